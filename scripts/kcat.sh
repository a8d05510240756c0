#!/usr/bin/env bash
# Makes sure kcat (Debian's package, built on librdkafka) is installed, for the tests
# that run it against `brook broker` (tests/broker_admin.rs); prints its path.
set -euo pipefail
if ! command -v kcat >/dev/null 2>&1; then
  echo "kcat: installing (apt-get)" >&2
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq kcat >/dev/null
fi
command -v kcat
