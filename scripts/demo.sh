#!/usr/bin/env bash
# brook's main job on real data: every flight that left New York in 2013 (nycflights13,
# examples/data/nycflights13). Loads the flights and the weather into log topics keyed
# by airport, runs the job (examples/nycflights13), prints a summary, shows the topics'
# partitions and the first rows of each result file in results/nycflights13/.
# Usage: scripts/demo.sh [-- job options, see: cargo run --release --example nycflights13 -- --help]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
DATA=${BROOK_DATA_DIR:-./brook-data/nycflights13}
RESULTS=results/nycflights13
BIN=${CARGO_TARGET_DIR:-target}/release

echo "brook demo: building (the first build compiles RocksDB's C++ library: 15-40 min on 2 cores)" >&2
cargo build --release --quiet --bin brook --example nycflights13
"$BIN/examples/nycflights13" --data-dir "$DATA" --results "$RESULTS" "$@"

echo
echo "The topics the job read (partitions, offsets):"
"$BIN/brook" --data-dir "$DATA" topic describe flights
"$BIN/brook" --data-dir "$DATA" topic describe weather
for f in hourly_delays duty_periods cancelled late; do
  echo
  echo "$RESULTS/$f.jsonl ($(wc -l < "$RESULTS/$f.jsonl") rows), first 2:"
  head -n 2 "$RESULTS/$f.jsonl"
done
