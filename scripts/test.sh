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
# The dashboard in a real browser (Debian's chromium, from scripts/setup.sh) is
# #[ignore]d where there is none: run it, and only it, explicitly.
cargo test --workspace --test ui -- --ignored
# Full and read-only disks mount a small tmpfs, which needs root: #[ignore]d in the run
# above, run here (as root; elsewhere they fail saying so).
cargo test --workspace --test disk_full -- --ignored
# The broker tests are #[ignore]d (they show as ignored where there is no broker):
# run them, and only them, explicitly. `--ignored` runs only the ignored tests of these
# targets, so none of the tests above runs twice. `--workspace`, not `-p`: the same
# package selection keeps cargo's feature unification, so nothing is built again.
# `--test broker` also names the root's tests/broker.rs (the Kafka-protocol broker),
# which has no ignored tests.
cargo test --workspace --test broker --test kafka_kill_restore --test kafka_group -- --ignored
# The same tests against brook's own broker (`brook broker` on a free port: scripts/
# brook-broker.sh; in a subshell, so its EXIT trap stops it while the noida-db broker
# above keeps its own). Nothing is compiled again; they add about 45 s.
(
  source scripts/brook-broker.sh
  cargo test --workspace --test broker --test kafka_kill_restore --test kafka_group -- --ignored
)
