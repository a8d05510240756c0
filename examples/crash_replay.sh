#!/usr/bin/env bash
# Example 8: crash and replay. Runs examples/jobs/crash_replay.yaml (sales per item per
# minute, a checkpoint every 200 ms) once without interruption, then again, killing
# `brook run` with SIGKILL once a checkpoint is complete, and restores the killed job
# with `--restore latest`. The file sink commits with the checkpoints (two-phase
# commit): after the restore its rows and the totals equal the uninterrupted run's.
# Run: examples/crash_replay.sh   (data under ./brook-data/crash-replay, rows under
#      results/crash_replay/)
set -euo pipefail
ROOT=${BROOK_DATA_DIR:-./brook-data/crash-replay}
DATA=$ROOT
source "$(dirname "$0")/common.sh"
OUT=$PWD/results/crash_replay
rm -rf "$ROOT" "$OUT"
mkdir -p "$OUT"
JOB=examples/jobs/crash_replay.yaml

echo "== 1. the reference: a run without interruption"
DATA=$ROOT/clean
show run "$JOB" --quiet --set "sinks.out.path=$OUT/clean.jsonl"

echo
echo "== 2. the same job, killed with SIGKILL after its first complete checkpoint"
DATA=$ROOT/crashed
CHECKPOINTS=$DATA/checkpoints/crash-replay
echo "\$ brook run $JOB --set sinks.out.path=$OUT/restored.jsonl &"
# The binary itself in the background (not the `brook` function, whose subshell would
# be killed instead of the job).
"$BROOK" --data-dir "$DATA" run "$JOB" --quiet --set "sinks.out.path=$OUT/restored.jsonl" &
pid=$!
for _ in $(seq 400); do
  if compgen -G "$CHECKPOINTS/chk-*/_metadata" >/dev/null; then break; fi
  sleep 0.05
done
sleep 0.3
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  committed=$(cat "$OUT/restored.jsonl" 2>/dev/null | wc -l)
  complete=$(cd "$CHECKPOINTS" && for c in chk-*; do
    if [ -f "$c/_metadata" ]; then printf '%s ' "$c"; fi; done)
  echo "killed brook run (pid $pid): $committed rows committed so far," \
    "complete checkpoints: $complete"
else
  wait "$pid"
  echo "the job finished before it could be killed (a very fast machine): nothing to restore"
fi

echo
echo "== 3. restore the killed job from its newest complete checkpoint"
show run "$JOB" --quiet --set "sinks.out.path=$OUT/restored.jsonl" --restore latest

echo
echo "== 4. totals per item (examples/jobs/crash_replay_totals.yaml)"
DATA=$ROOT/totals
totals() {
  brook run examples/jobs/crash_replay_totals.yaml --quiet --set "sources.rows.path=$1" | sort
}
totals "$OUT/clean.jsonl" > "$OUT/clean_totals.jsonl"
totals "$OUT/restored.jsonl" > "$OUT/restored_totals.jsonl"
echo "uninterrupted run:"
cat "$OUT/clean_totals.jsonl"
echo "killed and restored:"
cat "$OUT/restored_totals.jsonl"
echo
if cmp -s "$OUT/clean_totals.jsonl" "$OUT/restored_totals.jsonl" \
  && cmp -s <(sort "$OUT/clean.jsonl") <(sort "$OUT/restored.jsonl"); then
  echo "same totals, and the same $(wc -l < "$OUT/clean.jsonl") per-minute rows: none lost, none twice"
else
  echo "the totals differ: exactly-once is broken" >&2
  exit 1
fi
