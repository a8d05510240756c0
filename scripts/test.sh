#!/usr/bin/env bash
# Runs brook's whole test suite (unit, integration, crash and doc tests).
# Usage: scripts/test.sh   (BROOK_CRASH_ITERATIONS=N runs more crash iterations)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
# A one-off full build gains nothing from incremental artifacts (GBs on disk).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The runner tests start example job binaries (examples/runner_job.rs); `cargo test`
# builds examples only as test harnesses, so build the real ones first.
cargo build --workspace --examples
cargo test --workspace --all-targets
cargo test --workspace --doc
