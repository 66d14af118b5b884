#!/usr/bin/env bash
# Builds tt's libFuzzer harnesses (tests/fuzz) and runs each for a while:
#   tools/fuzz.sh [SECONDS] [HARNESS...]   SECONDS per harness (default 60); all harnesses by default
# Harnesses: npy csv mtx text_stream text_stream_sp checkpoint pipeline.
# For each it prints the executions, the coverage (libFuzzer's cov: edges) and the crashes, and it
# exits 1 when any harness crashed, leaked, hung or tripped a sanitizer; the inputs that did are
# in $FUZZ_BUILD/fuzz/crashes/HARNESS/. New inputs found go to $FUZZ_BUILD/fuzz/corpus/HARNESS/
# (kept between runs); the seeds in tests/fuzz/corpus/ and the regressions in
# tests/fuzz/regressions/ are read, never written.
#
# The harnesses link an ordinary build of tt (libtt_core, the model libraries, the modules):
# TT_BUILD_DIR (default build, as tools/setup.sh makes it), configured and brought up to date
# here. They are built with clang in TT_FUZZ_BUILD_DIR (default build-fuzz).
# Environment: TT_BUILD_DIR, TT_FUZZ_BUILD_DIR, TT_JOBS (default: all cores),
# TT_FUZZ_ARGS (more libFuzzer flags, e.g. "-jobs=4").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${TT_BUILD_DIR:-$ROOT/build}"
FUZZ_BUILD="${TT_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
JOBS="${TT_JOBS:-$(nproc)}"
SECONDS_EACH="${1:-60}"
[ $# -gt 0 ] && shift
ALL=(npy csv mtx text_stream text_stream_sp checkpoint pipeline)
HARNESSES=("$@")
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=("${ALL[@]}")
case "$SECONDS_EACH" in
  '' | *[!0-9]*) echo "usage: tools/fuzz.sh [SECONDS] [HARNESS...] (harnesses: ${ALL[*]})" >&2; exit 2 ;;
esac
for h in "${HARNESSES[@]}"; do
  [[ " ${ALL[*]} " == *" $h "* ]] || { echo "fuzz: no harness '$h' (harnesses: ${ALL[*]})" >&2; exit 2; }
done

say() { printf '\033[1m[fuzz]\033[0m %s\n' "$*"; }
for t in clang clang++ cmake ninja; do
  command -v "$t" >/dev/null || { echo "fuzz: $t is not installed (apt-get install clang cmake ninja-build)" >&2; exit 1; }
done

# The ordinary build the harnesses link: the core, the model libraries, and the modules that
# pipeline validation finds on the search path.
DEPS=(tt_core tt_topic_impl tt_tabular-icl_impl tt_transformer_impl
      tt_model_topic tt_model_transformer tt_model_tabular-icl
      tt_plugin_adam8bit tt_plugin_amp tt_plugin_attention tt_plugin_checkpoint tt_plugin_lora
      tt_plugin_offload tt_plugin_oom-guard tt_plugin_zero1)
if [ ! -f "$BUILD/build.ninja" ]; then
  say "configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTT_BUILD_TESTS=ON
fi
say "building what the harnesses link in $BUILD"
cmake --build "$BUILD" -j "$JOBS" $(printf -- '--target %s ' "${DEPS[@]}")

if [ ! -f "$FUZZ_BUILD/build.ninja" ]; then
  say "configuring $FUZZ_BUILD (clang)"
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTT_BUILD_TESTS=OFF -DTT_FUZZ=ON -DTT_FUZZ_DEPS_DIR="$BUILD"
fi
say "building the harnesses in $FUZZ_BUILD"
cmake --build "$FUZZ_BUILD" -j "$JOBS" $(printf -- '--target tt_fuzz_%s ' "${HARNESSES[@]}")

OUT="$FUZZ_BUILD/fuzz"
# LibTorch is not tt's to fix: leaks inside libtorch_cpu are suppressed (tests/fuzz/lsan.supp).
export LSAN_OPTIONS="suppressions=$ROOT/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
failed=()
printf '\n%-16s %12s %8s %8s  %s\n' harness executions cov crashes notes
for h in "${HARNESSES[@]}"; do
  seeds="$ROOT/tests/fuzz/corpus/$h"
  [ "$h" = text_stream_sp ] && seeds="$ROOT/tests/fuzz/corpus/text_stream"
  dict="$ROOT/tests/fuzz/${h%_sp}.dict"
  regressions="$ROOT/tests/fuzz/regressions/$h"
  work="$OUT/corpus/$h"
  crashes="$OUT/crashes/$h"
  log="$OUT/logs/$h.log"
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  args=(-max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1
        -artifact_prefix="$crashes/")
  [ -f "$dict" ] && args+=(-dict="$dict")
  dirs=("$work" "$seeds")
  [ -d "$regressions" ] && dirs+=("$regressions")
  before=$(find "$crashes" -type f | wc -l)
  set +e
  # shellcheck disable=SC2086
  "$OUT/$h" "${args[@]}" ${TT_FUZZ_ARGS:-} "${dirs[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  found=$(( $(find "$crashes" -type f | wc -l) - before ))
  note=""
  if [ $rc -ne 0 ]; then
    failed+=("$h")
    [ "$found" -gt 0 ] || found=1
    note="exit $rc: $(grep -m1 -E 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error|broken promise|terminate called' "$log" || true)"
  fi
  printf '%-16s %12s %8s %8s  %s\n' "$h" "${execs:-?}" "${cov:-?}" "$found" "$note"
done
echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in: ${failed[*]} (logs in $OUT/logs/, inputs in $OUT/crashes/)" >&2
  exit 1
fi
echo "fuzz: no crash in ${#HARNESSES[@]} harnesses (${SECONDS_EACH}s each)"
