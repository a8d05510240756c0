#!/usr/bin/env bash
# Runs brook's whole test suite (unit, integration, crash and doc tests), and the tests
# against a Kafka broker: with BROOK_KAFKA_BOOTSTRAP set they use that broker, else this
# script starts one (scripts/kafka-broker.sh; it stops when the script exits).
# Usage: scripts/test.sh   (BROOK_CRASH_ITERATIONS=N runs more crash iterations)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
if [ -z "${BROOK_KAFKA_BOOTSTRAP:-}" ]; then
  source scripts/kafka-broker.sh
fi
# A one-off full build gains nothing from incremental artifacts (GBs on disk).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The runner tests start example job binaries (examples/runner_job.rs); `cargo test`
# builds examples only as test harnesses, so build the real ones first.
cargo build --workspace --examples
cargo test --workspace --all-targets
cargo test --workspace --doc
# The broker tests are #[ignore]d (they show as ignored where there is no broker):
# run them, and only them, explicitly. `--ignored` runs only the ignored tests of these
# targets, so none of the tests above runs twice. `--workspace`, not `-p`: the same
# package selection keeps cargo's feature unification, so nothing is built again.
# `--test broker` also names the root's tests/broker.rs (the Kafka-protocol broker),
# which has no ignored tests.
cargo test --workspace --test broker --test kafka_kill_restore --test kafka_group -- --ignored
# The same tests against brook's own broker (`brook broker` on a free port: scripts/
# brook-broker.sh; in a subshell, so its EXIT trap stops it while the noida-db broker
# above keeps its own). Skipped there until the broker serves what they need (issue
# 17's transactions step): every one writes through an idempotent producer (the
# connector's sink and brook_kafka::admin::produce set enable.idempotence=true), which
# needs InitProducerId; the exactly-once ones (transactions_*, killed_and_restored_*,
# and kafka_group's two, whose jobs checkpoint) also need AddPartitionsToTxn,
# AddOffsetsToTxn, TxnOffsetCommit and EndTxn. Drop a --skip once its APIs are served.
(
  source scripts/brook-broker.sh
  cargo test --workspace --test broker --test kafka_kill_restore --test kafka_group -- \
    --ignored --skip source_reads_every_partition_and_resumes_at_checkpointed_offsets \
    --skip without_checkpoints_the_idempotent_producer_writes_everything \
    --skip partitions_with_records_waiting_do_not_go_idle \
    --skip transactions_commit_on_checkpoint_completion_restore_once_and_fence_zombies \
    --skip killed_and_restored_kafka_job_commits_exactly_the_output_of_a_clean_run \
    --skip two_processes_share_a_topic_and_one_takes_over_the_others_partitions_exactly_once \
    --skip a_bounded_group_job_runs_every_partition_to_its_end_once
)
