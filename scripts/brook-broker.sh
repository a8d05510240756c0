#!/usr/bin/env bash
# Starts `brook broker` (the log over the Kafka protocol; target/debug/brook, built
# first) on a free loopback port with a temporary data directory, and exports
# BROOK_KAFKA_BOOTSTRAP, so the Kafka tests run against brook's own broker. Sourced by
# scripts/test.sh in a subshell (and usable by hand: `source scripts/brook-broker.sh;
# cargo test ... -- --ignored`); the broker stops when the shell that sourced this exits.

brook_broker_bin="${CARGO_TARGET_DIR:-target}/debug/brook"
brook_broker_dir="$(mktemp -d "${TMPDIR:-/tmp}/brook-broker.XXXXXX")"
"$brook_broker_bin" --data-dir "$brook_broker_dir/data" broker --listen 127.0.0.1:0 \
  >"$brook_broker_dir/broker.log" 2>&1 &
brook_broker_pid=$!

brook_broker_stop() {
  kill "$brook_broker_pid" 2>/dev/null || true
  # SIGTERM stops it; SIGKILL after 2 s should it hang.
  for _ in $(seq 1 20); do
    kill -0 "$brook_broker_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$brook_broker_pid" 2>/dev/null || true
  wait "$brook_broker_pid" 2>/dev/null || true
  rm -rf "$brook_broker_dir"
}
trap brook_broker_stop EXIT

# The broker writes its address once it listens (port 0: the one it got).
for _ in $(seq 1 300); do
  [ -s "$brook_broker_dir/data/broker.addr" ] && break
  if ! kill -0 "$brook_broker_pid" 2>/dev/null; then
    echo "brook broker exited:" >&2
    cat "$brook_broker_dir/broker.log" >&2
    exit 1
  fi
  sleep 0.1
done
if ! [ -s "$brook_broker_dir/data/broker.addr" ]; then
  echo "brook broker: no address after 30 s" >&2
  cat "$brook_broker_dir/broker.log" >&2
  exit 1
fi
BROOK_KAFKA_BOOTSTRAP="$(cat "$brook_broker_dir/data/broker.addr")"
export BROOK_KAFKA_BOOTSTRAP
echo "brook broker: at $BROOK_KAFKA_BOOTSTRAP" >&2
