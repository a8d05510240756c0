#!/usr/bin/env bash
# Starts a Kafka-compatible broker on 127.0.0.1 for the Kafka tests and exports
# BROOK_KAFKA_BOOTSTRAP. Sourced by scripts/test.sh (and usable by hand:
# `source scripts/kafka-broker.sh; cargo test ...`); the broker stops when the shell
# that sourced this exits.
#
# The broker is noida-db (PyPI, MIT; one Rust binary speaking the Kafka protocol with
# groups, commits, transactions and read_committed), installed into a temporary folder.
# BROOK_KAFKA_PORT picks the port (default 9092).

brook_kafka_port="${BROOK_KAFKA_PORT:-9092}"
brook_kafka_dir="$(mktemp -d "${TMPDIR:-/tmp}/brook-kafka.XXXXXX")"

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "brook kafka: installing python3-pip (apt-get)" >&2
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq python3-pip >/dev/null
fi
echo "brook kafka: installing noida-db into $brook_kafka_dir" >&2
python3 -m pip install -q --disable-pip-version-check --target "$brook_kafka_dir/py" noida-db \
  || python3 -m pip install -q --disable-pip-version-check --break-system-packages \
       --target "$brook_kafka_dir/py" noida-db

# The package's binary itself (its Python launcher would leave it running when killed).
brook_kafka_bin="$brook_kafka_dir/py/noida_db/noida-db"
[ -x "$brook_kafka_bin" ] || brook_kafka_bin="$brook_kafka_dir/py/bin/noida-db"
(
  cd "$brook_kafka_dir"
  PYTHONPATH="$brook_kafka_dir/py" exec "$brook_kafka_bin" start --only kafka \
    --host 127.0.0.1 --kafka-port "$brook_kafka_port" >"$brook_kafka_dir/broker.log" 2>&1
) &
brook_kafka_pid=$!

brook_kafka_stop() {
  kill "$brook_kafka_pid" 2>/dev/null || true
  # It may linger on open connections: SIGKILL after 2 s.
  for _ in $(seq 1 20); do
    kill -0 "$brook_kafka_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$brook_kafka_pid" 2>/dev/null || true
  wait "$brook_kafka_pid" 2>/dev/null || true
  rm -rf "$brook_kafka_dir"
}
trap brook_kafka_stop EXIT

for _ in $(seq 1 300); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$brook_kafka_port") 2>/dev/null; then
    break
  fi
  if ! kill -0 "$brook_kafka_pid" 2>/dev/null; then
    echo "brook kafka: the broker exited:" >&2
    cat "$brook_kafka_dir/broker.log" >&2
    exit 1
  fi
  sleep 0.1
done
if ! (exec 3<>"/dev/tcp/127.0.0.1/$brook_kafka_port") 2>/dev/null; then
  echo "brook kafka: no broker on 127.0.0.1:$brook_kafka_port after 30 s" >&2
  cat "$brook_kafka_dir/broker.log" >&2
  exit 1
fi
export BROOK_KAFKA_BOOTSTRAP="127.0.0.1:$brook_kafka_port"
echo "brook kafka: broker at $BROOK_KAFKA_BOOTSTRAP" >&2
