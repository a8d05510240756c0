#!/usr/bin/env bash
# Example 1: snack sales on the embedded log. Creates the topic `snack-sales` (3
# partitions), produces 30 sales keyed by student, counts sales per item per minute of
# event time with a job that reads the topic, and has two consumer groups read it at
# different speeds: `billing` reads everything (in two goes), `analytics` only the first
# five. Each group has its own committed offsets and lag.
# Run: examples/snack_sales_groups.sh   (data under ./brook-data/snack-sales-groups)
set -euo pipefail
DATA=${BROOK_DATA_DIR:-./brook-data/snack-sales-groups}
source "$(dirname "$0")/common.sh"
rm -rf "$DATA"

show topic create snack-sales --partitions 3
show produce snack-sales --key-field student < examples/data/snack_sales.jsonl
# Keys pick the partition (Kafka's murmur2): each student's sales are in one partition.
show topic describe snack-sales
# The job reads the topic from its start; the window rows go to stdout.
show run examples/jobs/snack_sales_log.yaml --quiet
# billing reads 4 sales, then the rest; analytics only 5. Each commits what it read.
show_quiet consume snack-sales --group billing --from-beginning --max 4
show_quiet consume snack-sales --group billing
show consume snack-sales --group analytics --from-beginning --max 5
show group list
# Lag = what the group has left to read: 0 for billing, 25 for analytics.
show group describe billing
show group describe analytics
