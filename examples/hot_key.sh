#!/usr/bin/env bash
# Example 9: a hot key. theo makes 80 % of 500 sales. Produced keyed by student into a
# topic of 4 partitions, his sales all land in one partition; a job keyed by student
# sends them all to one subtask. The job's summary shows the records each subtask
# received and the skew (max / mean: 1.00 is even, 4.00 is one subtask doing all the
# work); a two-phase aggregation (salted key, then merge) spreads the hot key.
# Run: examples/hot_key.sh   (data under ./brook-data/hot-key, rows under results/)
set -euo pipefail
DATA=${BROOK_DATA_DIR:-./brook-data/hot-key}
source "$(dirname "$0")/common.sh"
rm -rf "$DATA"

show topic create hot-sales --partitions 4
show produce hot-sales --key-field student < examples/data/hot_key_sales.jsonl
show topic describe hot-sales
# Records per partition: END - START (the START and END columns).
brook topic describe hot-sales | awk 'NR > 2 { n[NR] = $3 - $2; total += n[NR];
    if (n[NR] > max) max = n[NR]; parts++ }
  END { printf "partition skew (max / mean): %.2f\n", max * parts / total }'
show run examples/jobs/hot_key.yaml
echo
if cmp -s <(sort results/hot_key_one_phase.jsonl) <(sort results/hot_key_two_phase.jsonl); then
  echo "one-phase and two-phase rows are the same ($(wc -l < results/hot_key_one_phase.jsonl) rows)"
else
  echo "one-phase and two-phase rows differ" >&2
  exit 1
fi
