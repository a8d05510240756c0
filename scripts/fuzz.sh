#!/usr/bin/env bash
# Runs brook's fuzz targets (fuzz/: libFuzzer through libfuzzer-sys, on the stable
# toolchain; README "Fuzzing" says why and how).
#
#   scripts/fuzz.sh [TARGET|all] [SECONDS]   fuzz one target, or each in turn (default:
#                                            all, 60 s each), niced, one at a time
#   scripts/fuzz.sh build                    only build the targets
#   scripts/fuzz.sh list                     the targets
#   scripts/fuzz.sh merge [TARGET|all]       fold the new inputs of earlier runs into
#                                            the committed seeds, minimised
#   scripts/fuzz.sh repro TARGET FILE        run one input (a crash to debug)
#
# A crash, panic, hang (one input > FUZZ_TIMEOUT s, default 10) or an allocation past
# FUZZ_RSS_MB (default 2048) stops a target and leaves the input in
# fuzz/artifacts/<target>/. Inputs that found new coverage go to
# fuzz/target/corpus/<target>; the committed seeds (fuzz/corpus/<target>) are only read.
# Each run prints a summary line: executions, CPU seconds, coverage (libFuzzer's edge
# count `cov` and feature count `ft`), corpus size, findings.
#
# The build is its own (fuzz/target, instrumented with sanitizer coverage) and the
# first one is long: DataFusion, the Kafka client's C library and RocksDB's bindings.
# FUZZ_FEATURES=" " builds only the light targets (not spec, whose build is all of
# brook's, nor sql_decode, DataFusion's, nor broker_frame, kafka-protocol's); "spec",
# "sql" or "broker" adds one.
# Set ROCKSDB_LIB_DIR (and ROCKSDB_STATIC=1) to an already built RocksDB to skip its
# C++ build, as for clippy (see the engineers' notes).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
fuzz="$root/fuzz"
triple=x86_64-unknown-linux-gnu
bin_dir="$fuzz/target/$triple/release"
targets=(log_batch log_segment checkpoint spec file_records sql_decode broker_frame)

build() {
  # The flags cargo fuzz passes, all stable: SanitizerCoverage feeding libFuzzer
  # (inline 8-bit counters, the PC table, comparison operands) and `--cfg fuzzing`.
  # No AddressSanitizer: that needs nightly's -Zsanitizer, and brook has no unsafe
  # code (`unsafe_code = "deny"`); panics, overflows (overflow-checks on), hangs and
  # memory blow-ups are what these targets look for. `--target` keeps the flags off
  # build scripts and proc macros, which must not link libFuzzer.
  local flags="--cfg fuzzing -Cpasses=sancov-module"
  flags+=" -Cllvm-args=-sanitizer-coverage-level=4"
  flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
  flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
  flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares"
  flags+=" -Cllvm-args=-sanitizer-coverage-stack-depth"
  # The stable-toolchain check of `cfg(fuzzing)` would otherwise warn in every crate.
  flags+=" --check-cfg=cfg(fuzzing)"
  CARGO_INCREMENTAL=0 RUSTFLAGS="$flags" nice -n "${FUZZ_BUILD_NICE:-19}" cargo build --release \
    --manifest-path "$fuzz/Cargo.toml" --target "$triple" --bins ${FUZZ_FEATURES:+--no-default-features --features "$FUZZ_FEATURES"}
}

run_one() {
  local t=$1 secs=$2
  local work="$fuzz/target/corpus/$t" art="$fuzz/artifacts/$t/" log="$fuzz/target/logs/$t.log"
  mkdir -p "$work" "$art" "$(dirname "$log")"
  local status=0
  /usr/bin/time -f '%U %S' -o "$fuzz/target/logs/$t.time" \
    nice -n 19 "$bin_dir/$t" -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -print_final_stats=1 -artifact_prefix="$art" \
    "$work" "$fuzz/corpus/$t" >"$log" 2>&1 || status=$?
  local execs cov ft corp cpu found
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1 | cut -d' ' -f2)
  cpu=$(awk '{printf "%.0f", $1 + $2}' "$fuzz/target/logs/$t.time" 2>/dev/null || echo '?')
  found=$(ls "$art" | wc -l)
  printf '%s: %s execs, %s CPU-s, cov %s, ft %s, corpus %s, exit %s, artifacts %s (log %s)\n' \
    "$t" "${execs:-?}" "$cpu" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$status" "$found" "$log"
  return "$status"
}

case "${1:-all}" in
  list) printf '%s\n' "${targets[@]}" ;;
  build) build ;;
  merge)
    build
    for t in $([ "${2:-all}" = all ] && echo "${targets[@]}" || echo "$2"); do
      mkdir -p "$fuzz/target/corpus/$t" "$fuzz/target/merged/$t"
      "$bin_dir/$t" -merge=1 "$fuzz/target/merged/$t" "$fuzz/corpus/$t" "$fuzz/target/corpus/$t"
      rm -rf "$fuzz/corpus/$t" && mv "$fuzz/target/merged/$t" "$fuzz/corpus/$t"
    done
    ;;
  repro)
    build
    "$bin_dir/${2:?target}" "${3:?input file}"
    ;;
  *)
    build
    secs=${2:-60}
    failed=0
    for t in $([ "${1:-all}" = all ] && echo "${targets[@]}" || echo "$1"); do
      run_one "$t" "$secs" || failed=1
    done
    exit "$failed"
    ;;
esac
