# Sourced by the example scripts: `brook` runs the binary on the example's data
# directory. BROOK names a built binary (the tests set it); without it the release
# binary is built first (scripts/setup.sh installs what the build needs).
cd "$(dirname "$0")/.."
if [ -z "${BROOK:-}" ]; then
  source scripts/setup.sh
  cargo build --release --quiet --bin brook
  BROOK="${CARGO_TARGET_DIR:-target}/release/brook"
fi
brook() { "$BROOK" --data-dir "$DATA" "$@"; }
# Prints a command, then runs it.
show() { echo; echo "\$ brook $*"; brook "$@"; }
# The same, without the command's output.
show_quiet() { echo; echo "\$ brook $* > /dev/null"; brook "$@" >/dev/null; }
