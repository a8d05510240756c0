#!/usr/bin/env bash
# Soak (issue 20): a windowed job from the log, fed at half its maximum rate for a long
# time with a checkpoint every second, sampled every 10 s. benches/README.md "Soak"
# records a run.
#
#   scripts/soak.sh            a release brook (target/release/brook, or $BROOK)
#
# Environment: SOAK_SECS (default 3600) how long the job is fed; SOAK_RATE
# (records/s; default half the measured maximum); SOAK_MAX_RECORDS (default 400000)
# records of the maximum-rate run; SOAK_KEYS (default 1000); SOAK_OUT (default
# ./soak-results) where the CSV and the summary go; SOAK_WARMUP_SECS (default 10 % of
# the run, at most 300) the samples left out of the summary.
#
# Set-up: `brook broker` serves a scratch data directory; a feeder (python3 piped into
# `brook produce`) appends JSON records {key, value, ts: wall-clock ms} to a topic of 2
# partitions; the job (`brook run`, RocksDB state) reads it unbounded, keys by `key`,
# counts and sums per key in 1 s tumbling windows of event time and writes the rows
# to a file sink (committed with each checkpoint).
#
# The maximum rate: the same job, bounded, over SOAK_MAX_RECORDS records appended
# beforehand (records / wall time of the run, start-up included, so a little low).
#
# Each sample (CSV columns): seconds since the start; the job's RSS (KiB, VmRSS);
# state size (bytes of the RocksDB directory); checkpoint directory size (bytes);
# last checkpoint's id, duration (ms) and size (bytes), from --metrics-addr;
# records into the window operator; end-to-end latency (ms): the wall time of the sample
# minus the newest window end in the committed output, i.e. how far behind real time
# the committed results are (window size + watermark delay + checkpoint interval at
# best); and the load average.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BROOK=${BROOK:-$root/target/release/brook}
SECS=${SOAK_SECS:-3600}
MAX_RECORDS=${SOAK_MAX_RECORDS:-400000}
KEYS=${SOAK_KEYS:-1000}
OUT=${SOAK_OUT:-$root/soak-results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/brook-soak.XXXXXX")
data=$work/data
csv=$OUT/soak.csv
summary=$OUT/summary.txt
pids=()

# Every process this script started, however deep: the broker and the feeder run
# inside subshells (the `brook` function, the pipeline), so killing the pids `$!` names
# left the binaries and python running after the script ended.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do
    kill_tree "$child"
  done
  [ "$1" = "$$" ] || kill "$1" 2>/dev/null || true
}

stop() {
  kill_tree $$
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap stop EXIT

[ -x "$BROOK" ] || { echo "no brook binary at $BROOK (cargo build --release -p brook)" >&2; exit 1; }
brook() { "$BROOK" --data-dir "$data" "$@"; }

# Feeder: RATE records/s (0: as fast as possible, COUNT records), in 10 ms steps.
feeder() {
  python3 - "$1" "$2" "$KEYS" <<'EOF'
import sys, time, json
rate, count, keys = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout
i = 0
start = time.time()
while count == 0 or i < count:
    if rate > 0:
        due = int((time.time() - start) * rate)
        if due - i > rate:
            # More than a second behind (the feeder was descheduled or stopped): the
            # missed records are not made up in a burst, the rate stays the rate.
            start = time.time() - i / rate
            due = i + int(rate / 100)
        if due <= i:
            time.sleep(0.01)
            continue
    else:
        due = min(i + 10000, count)
    now = int(time.time() * 1000)
    lines = []
    while i < due and (count == 0 or i < count):
        lines.append(json.dumps({"key": "k%d" % (i * 2654435761 % keys), "value": i % 100, "ts": now}))
        i += 1
    out.write("\n".join(lines) + "\n")
    out.flush()
EOF
}

job_spec() { # TOPIC BOUNDED SINK_PATH
  cat <<EOF
name: soak
sources:
  - name: events
    connector: log
    topic: $1
    start: earliest
    bounded: $2
    event_time: ts
    watermark: { out_of_orderness: 200ms }
steps:
  - key_by: [key]
  - name: per-second
    window: { kind: tumbling, size: 1s }
    aggregate: { n: count(), total: sum(value) }
sinks:
  - { name: out, connector: file, path: $3 }
EOF
}

brook broker --listen 127.0.0.1:0 >"$work/broker.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
  [ -s "$data/broker.addr" ] && break
  sleep 0.1
done
[ -s "$data/broker.addr" ] || { cat "$work/broker.log" >&2; exit 1; }

# 1. The maximum rate.
brook topic create soak-max --partitions 2 >/dev/null
feeder 0 "$MAX_RECORDS" | brook produce soak-max --key-field key >/dev/null 2>&1
job_spec soak-max true "$work/max-out/windows.jsonl" >"$work/max.yaml"
t0=$(date +%s.%N)
brook run --quiet "$work/max.yaml" --checkpoint-interval 1s \
  --checkpoint-dir "$work/max-checkpoints" 2>"$work/max.stderr"
t1=$(date +%s.%N)
max_rate=$(python3 -c "print(int($MAX_RECORDS / ($t1 - $t0)))")
RATE=${SOAK_RATE:-$((max_rate / 2))}
rm -rf "$data/state/soak" "$work/max-out" "$work/max-checkpoints"
echo "maximum rate: $max_rate records/s ($MAX_RECORDS records in $(python3 -c "print(round($t1 - $t0, 1))") s); soak at $RATE records/s for $SECS s" | tee "$summary"

# 2. The soak.
brook topic create soak --partitions 2 >/dev/null
feeder "$RATE" 0 | brook produce soak --key-field key --batch 100 >/dev/null 2>"$work/feeder.stderr" &
pids+=($!)
job_spec soak false "$work/out/windows.jsonl" >"$work/soak.yaml"
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Not through the `brook` function: $! must be the job's own process (its RSS).
"$BROOK" --data-dir "$data" run --quiet "$work/soak.yaml" --checkpoint-interval 1s \
  --checkpoint-dir "$work/checkpoints" --metrics-addr "127.0.0.1:$metrics_port" \
  2>"$work/job.stderr" &
job=$!
pids+=("$job")

metric() { # NAME: the sum of its samples
  awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.6f", s }' "$work/metrics"
}
newest_end() {
  local f
  f=$(ls -t "$work/out" 2>/dev/null | grep -v '^\.' | head -1 || true)
  [ -n "$f" ] || { echo 0; return; }
  tail -n 2000 "$work/out/$f" | jq -s 'map(.window_end) | max // 0'
}

echo "t_s,rss_kib,state_bytes,checkpoints_bytes,checkpoint_id,checkpoint_ms,checkpoint_bytes,records_in,latency_ms,load1" >"$csv"
start=$(date +%s)
while :; do
  sleep 10
  now=$(date +%s)
  elapsed=$((now - start))
  if ! kill -0 "$job" 2>/dev/null; then
    echo "the job exited early:" >&2
    tail -20 "$work/job.stderr" >&2
    exit 1
  fi
  rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$job/status")
  state=$(du -sb "$data/state/soak" 2>/dev/null | cut -f1 || echo 0)
  chk=$(du -sb "$work/checkpoints" 2>/dev/null | cut -f1 || echo 0)
  curl -s "http://127.0.0.1:$metrics_port/metrics" >"$work/metrics" || : >"$work/metrics"
  id=$(metric brook_last_checkpoint_id)
  ms=$(python3 -c "print(round($(metric brook_last_checkpoint_duration_seconds) * 1000))")
  size=$(metric brook_last_checkpoint_size_bytes)
  # Into the window (the source's own counter counts nothing: it only emits).
  recs=$(awk '$1 ~ /^brook_records_in_total\{operator="per-second",/ { s += $2 } END { printf "%d", s }' "$work/metrics")
  end=$(newest_end)
  latency=$(( $(date +%s%3N) - ${end%.*} ))
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "$elapsed,$rss,$state,$chk,${id%.*},$ms,${size%.*},$recs,$latency,$load" >>"$csv"
  [ "$elapsed" -ge "$SECS" ] && break
done

# 3. The summary: after a warm-up (SOAK_WARMUP_SECS), the first,
# last, smallest and largest RSS and checkpoint duration, and whether each stays flat
# within 10 %: the mean of the last tenth of the samples against the first tenth's.
python3 - "$csv" "${SOAK_WARMUP_SECS:-}" >>"$summary" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
end = int(rows[-1]["t_s"])
warm = int(sys.argv[2]) if sys.argv[2] else min(300, end // 10)
after = [r for r in rows if int(r["t_s"]) > warm]
tenth = max(1, len(after) // 10)
print(f"{len(rows)} samples over {end} s; warm-up {warm} s; load average {min(float(r['load1']) for r in rows):.1f}-{max(float(r['load1']) for r in rows):.1f}")
for col, unit in [("rss_kib", "KiB"), ("checkpoint_ms", "ms"), ("state_bytes", "B"), ("latency_ms", "ms")]:
    v = [float(r[col]) for r in after]
    first, last = sum(v[:tenth]) / tenth, sum(v[-tenth:]) / tenth
    drift = (last - first) / first * 100 if first else 0.0
    flat = "flat within 10 %" if abs(drift) <= 10 else "NOT flat within 10 %"
    print(f"{col}: first {v[0]:.0f} last {v[-1]:.0f} min {min(v):.0f} max {max(v):.0f} {unit}; first-tenth mean {first:.0f}, last-tenth mean {last:.0f} ({drift:+.1f} %): {flat}")
recs = [int(r["records_in"]) for r in rows]
print(f"records in: {recs[-1]} ({(recs[-1] - recs[0]) / max(1, end - int(rows[0]['t_s'])):.0f}/s between the first and last sample)")
EOF
cat "$summary"
