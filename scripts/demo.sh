#!/usr/bin/env bash
# The log demo: creates a topic, produces snack sales keyed by student, consumes them
# with two consumer groups at different speeds, and shows each group's lag.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release --quiet --bin brook
brook() { ./target/release/brook --data-dir "$DATA" "$@"; }
DATA=${BROOK_DATA_DIR:-./brook-data/demo}
rm -rf "$DATA"

set -x
brook topic create snack-sales --partitions 3
brook produce snack-sales --key-field student < examples/data/snack_sales.jsonl
brook topic describe snack-sales
# billing reads everything; analytics reads only the first 5 sales so far.
brook consume snack-sales --group billing --from-beginning --max 4
brook consume snack-sales --group billing
brook consume snack-sales --group analytics --from-beginning --max 5
brook group list
brook group describe billing
brook group describe analytics
# Event time: sales per item per minute (tumbling windows), late sales to a file.
brook run examples/jobs/sales_per_minute.yaml
