#!/usr/bin/env bash
# Shared set-up for the quick-start commands: checks what a fresh Debian machine with
# only Rust lacks and installs it. Sourced by scripts/demo.sh and scripts/test.sh.
set -euo pipefail

need_apt=()
# The RocksDB crate (keyed state) needs libclang to generate its bindings.
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 \
   && ! ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 \
   && ! ls /usr/lib/aarch64-linux-gnu/libclang*.so* >/dev/null 2>&1; then
  need_apt+=(libclang-dev)
fi
# A C/C++ compiler for crates that build native code.
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "brook setup: installing ${need_apt[*]} (apt-get)" >&2
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "brook setup: cargo not found; install Rust from https://rustup.rs" >&2
  exit 1
fi
