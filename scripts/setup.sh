#!/usr/bin/env bash
# Shared set-up for the quick-start commands: checks what a fresh Debian machine with
# only Rust lacks and installs it. Sourced by scripts/demo.sh and scripts/test.sh.
set -euo pipefail

need_apt=()
# The RocksDB crate (keyed state) needs libclang to generate its bindings: libclang.so
# or libclang-N.so (not libclang-cpp.so, which LLVM packages bring without it).
have_libclang() {
  local f
  for f in /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
           /usr/lib/*-linux-gnu/libclang.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so*; do
    [ -e "$f" ] && return 0
  done
  return 1
}
have_libclang || need_apt+=(libclang-dev)
# C and C++ compilers for crates that build native code (RocksDB is C++).
if ! command -v cc >/dev/null 2>&1 || ! command -v c++ >/dev/null 2>&1; then
  need_apt+=(build-essential)
fi

# librdkafka (the Kafka connector, built from source by the rdkafka crate): cmake and
# libcurl's headers.
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
if ! [ -e /usr/include/curl/curl.h ] && ! ls /usr/include/*-linux-gnu/curl/curl.h >/dev/null 2>&1; then
  need_apt+=(libcurl4-openssl-dev)
fi
# The tests' librdkafka is built with OpenSSL (its SASL SCRAM needs it:
# tests/broker_sasl.rs); kcat is one of the Kafka clients those tests use.
if ! [ -e /usr/include/openssl/ssl.h ]; then
  need_apt+=(libssl-dev)
fi
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
# Debian's headless Chromium for the dashboard's end-to-end test (tests/ui.rs; about a
# minute to install on a fresh machine).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)

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
