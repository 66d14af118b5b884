#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (TT_SANITIZE=ON):
#   tools/sanitize.sh [CTEST ARGS...]          e.g. tools/sanitize.sh -L robustness
# Configures and builds TT_SANITIZE_BUILD_DIR (default build-asan; -O1, test time limits x4), then
# runs ctest there with every process's sanitizer reports written to files, so that a report from
# a process a test ran and whose output it kept to itself (tt-run, tt-data) is seen too. Prints
# the ctest summary and the reports; exits 1 when a test failed or any report was written.
# Leak checking is off (LibTorch's own allocations outlive main); UBSan stops a process at its
# first report. SentencePiece cannot be loaded under ASan: its tests skip, saying so.
# Environment: TT_SANITIZE_BUILD_DIR, TT_JOBS (default: all cores).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${TT_SANITIZE_BUILD_DIR:-$ROOT/build-asan}"
JOBS="${TT_JOBS:-$(nproc)}"
say() { printf '\033[1m[sanitize]\033[0m %s\n' "$*"; }

if [ ! -f "$BUILD/build.ninja" ]; then
  say "configuring $BUILD (TT_SANITIZE=ON)"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTT_BUILD_TESTS=ON -DTT_SANITIZE=ON
fi
grep -q '^TT_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" ||
  { echo "sanitize: $BUILD is not a TT_SANITIZE=ON build (use another TT_SANITIZE_BUILD_DIR)" >&2; exit 2; }
say "building $BUILD"
cmake --build "$BUILD" -j "$JOBS"

REPORTS="$BUILD/sanitizer-reports"
rm -rf "$REPORTS"
mkdir -p "$REPORTS"
export ASAN_OPTIONS="detect_leaks=0:log_path=$REPORTS/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$REPORTS/ubsan${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
say "running the tests (reports go to $REPORTS)"
(cd "$BUILD" && ctest -j "$JOBS" "$@" 2>&1 | tee "$BUILD/sanitize-ctest.log" |
  grep -E --line-buffered '(Failed|\*\*\*|Not Run|tests passed|tests failed|Total Test time)') || true
rc=$(grep -q "tests passed, 0 tests failed" "$BUILD/sanitize-ctest.log" && echo 0 || echo 1)
reports=("$REPORTS"/*)
if [ -e "${reports[0]}" ]; then
  say "${#reports[@]} sanitizer report(s):"
  for r in "${reports[@]}"; do
    echo "--- $r"
    head -n 30 "$r"
  done
  exit 1
fi
if [ "$rc" != 0 ]; then
  echo "sanitize: tests failed (the log: $BUILD/sanitize-ctest.log)" >&2
  exit 1
fi
say "every test passed and no sanitizer report was written"
