#!/usr/bin/env bash
# Runs brook's whole test suite (unit, integration, crash and doc tests).
# Usage: scripts/test.sh   (BROOK_CRASH_ITERATIONS=N runs more crash iterations)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo test --workspace --all-targets
cargo test --workspace --doc
