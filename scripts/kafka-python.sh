#!/usr/bin/env bash
# Installs kafka-python (PyPI) into the folder given as $1 (for PYTHONPATH), unless it
# is there already. tests/broker.rs runs it to get a Kafka client brook did not write;
# usable by hand too: `scripts/kafka-python.sh /tmp/kp; PYTHONPATH=/tmp/kp python3 ...`.
set -euo pipefail
dir="${1:?usage: scripts/kafka-python.sh DIR}"
if [ -f "$dir/kafka/__init__.py" ]; then
  exit 0
fi
# Tests in one binary run in parallel and may all find it missing: one installs, the
# others wait and then find it there (without the lock a second install replaced the
# folder while a test's python was importing from it).
mkdir -p "$(dirname "$dir")"
exec 9>"${dir%/}.lock"
flock 9
if [ -f "$dir/kafka/__init__.py" ]; then
  exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "kafka-python: installing python3-pip (apt-get)" >&2
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq python3-pip >/dev/null
fi
echo "kafka-python: installing into $dir" >&2
# Into a temporary folder first, so an interrupted install is never taken as done.
tmp="$(mktemp -d "${dir%/}.XXXXXX")"
python3 -m pip install -q --disable-pip-version-check --target "$tmp" 'kafka-python>=2.2,<4' \
  || python3 -m pip install -q --disable-pip-version-check --break-system-packages \
       --target "$tmp" 'kafka-python>=2.2,<4'
rm -rf "$dir"
mv "$tmp" "$dir"
