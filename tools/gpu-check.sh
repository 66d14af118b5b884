#!/usr/bin/env bash
# One command that proves tt on a CUDA machine: builds tt in portable mode against python3's
# PyTorch (or Torch_DIR), runs the test suite (the CUDA tests included; tools.gpu_check_dry_run,
# this check on the CPU, left out), then the GPU benchmarks, and writes one report.
#
#   tools/gpu-check.sh [--deps DIR] [--out DIR] [--budget SECONDS] [--stages LIST] [--topic N,M,K] [--dry-run]
#
#   --deps DIR      dependency bundle (tools/portable-deps.sh fetch DIR; default .deps/portable)
#   --out DIR       where the report and logs go (default gpu-check-<date>)
#   --budget S      a deadline S seconds from the start (default: none): a stage running then
#                   is stopped (what it finished is reported) and no later stage starts; each
#                   stage cut or skipped for time is named in the report
#   --topic N,M,K   the topic benchmark's shape (default 100000,100000,20: tinytopics' GPU
#                   figure is for this shape); 0 skips it
#   --tests REGEX   only the ctest entries matching REGEX (default: the whole suite); an entry
#                   runs a GoogleTest suite ("Options.*") or one CUDA test
#                   ("Cuda.Float32TrainingFollowsTheCpuRun")
#   --stages LIST   which stages run after the build, comma-separated among cuda (the CUDA
#                   tests), compare (compare-lm), suite (the other tests), topic; default all.
#                   The build always runs (a no-op when the build folder is up to date), so a
#                   check can be split over two calls: --stages cuda,compare then suite,topic
#   --dry-run       on a machine without a GPU: the same stages on the CPU (CUDA tests skipped,
#                   benchmarks on the CPU at small sizes), to test the mechanics
# Data: the compare benchmark reads data/brown/brown_train.txt (tt-data fetch brown, run ahead:
# a GPU machine may have no network) or ../shared/datasets/brown.
# Output (at most 8 files): report.md, machine.txt, build.log, tests.log, tests.xml,
# compare-lm.txt, compare-lm.csv, topic.txt.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps/portable"
OUT=""
BUDGET=0
TOPIC="100000,100000,20"
DRY=0
TESTS=""
STAGES="cuda,compare,suite,topic"
usage() { sed -n 5,18p "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) DEPS="${2:?--deps needs a folder}"; shift 2 ;;
    --out) OUT="${2:?--out needs a folder}"; shift 2 ;;
    --budget) BUDGET="${2:?--budget needs seconds}"; shift 2 ;;
    --topic) TOPIC="${2:?--topic needs N,M,K or 0}"; shift 2 ;;
    --tests) TESTS="${2:?--tests needs a regular expression}"; shift 2 ;;
    --stages) STAGES="${2:?--stages needs a list, e.g. cuda,compare}"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage ;;
  esac
done
for st in ${STAGES//,/ }; do
  case "$st" in cuda|compare|suite|topic) ;; *) echo "gpu-check: unknown stage '$st' in --stages (cuda, compare, suite, topic)" >&2; exit 2 ;; esac
done
want() { [[ ",$STAGES," == *",$1,"* ]]; }
OUT="${OUT:-$ROOT/gpu-check-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT" || { echo "gpu-check: cannot create $OUT" >&2; exit 1; }
OUT="$(cd "$OUT" && pwd)"
BUILD="${TT_BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${TT_JOBS:-$(nproc)}"
START=$(date +%s)
REPORT="$OUT/report.md"
NOT_RUN=()

say() { printf '\033[1m[gpu-check %4ds]\033[0m %s\n' "$(( $(date +%s) - START ))" "$*"; }
elapsed() { echo $(( $(date +%s) - START )); }
time_left() { [ "$BUDGET" -eq 0 ] || [ "$(elapsed)" -lt "$BUDGET" ]; }
# runs a command until the deadline (--budget); rc 124 when stopped there
bounded() {
  if [ "$BUDGET" -eq 0 ]; then "$@"; return; fi
  local left=$(( BUDGET - $(elapsed) ))
  [ "$left" -gt 1 ] || left=1
  timeout -k 10 "$left" "$@"
}
md() { printf '%s\n' "$@" >> "$REPORT"; }
fence() { md '```'; cat >> "$REPORT"; md '```'; }
# ctest over the build's tests, with its own Testing/ folder (logs, cost data) in a temporary
# one: another ctest of the same build may be running (CI runs this check as one of its tests).
CTEST_DIR="$(mktemp -d "${TMPDIR:-/tmp}/tt-gpu-check-ctest-XXXXXX")" || exit 1
trap 'rm -rf "$CTEST_DIR"' EXIT
printf 'subdirs("%s")\n' "$(realpath -m -- "$BUILD")" > "$CTEST_DIR/CTestTestfile.cmake"

[ -d /usr/local/cuda/bin ] && PATH="$PATH:/usr/local/cuda/bin"
DEVICE=cuda
if [ "$DRY" -eq 1 ]; then DEVICE=cpu; fi

# --- the machine ---------------------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "host: $(uname -srm)"
  [ -r /etc/os-release ] && (. /etc/os-release; echo "os: $PRETTY_NAME")
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
  echo "cpu flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "OMP_NUM_THREADS: ${OMP_NUM_THREADS:-unset} (tt's default threads when set)"
  if command -v nvidia-smi >/dev/null; then
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  else
    echo "gpu: none (no nvidia-smi)"
  fi
  echo "python3 torch: $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1)"
  echo "python3 torch build: $(python3 -c 'import torch; print(torch.__config__.show())' 2>/dev/null | grep -oE 'BLAS_INFO=[^,]*|USE_MKL=[^,]*|USE_MKLDNN=[^,]*|CPU capability usage: [A-Z0-9]*' | tr '\n' ' ')"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -2 | head -1 || echo none)"
  echo "c++: $(c++ --version 2>/dev/null | head -1 || echo none); CXX=${CXX:-unset}"
  echo "cmake: $(cmake --version 2>/dev/null | head -1 || echo none); ninja $(ninja --version 2>/dev/null || echo none)"
} > "$OUT/machine.txt" 2>&1
: > "$REPORT"
md "# tt GPU check$([ "$DRY" -eq 1 ] && echo ' (dry run: CPU only)')" "" "## Machine"
fence < "$OUT/machine.txt"
cat "$OUT/machine.txt"

# --- build ---------------------------------------------------------------------------------
if [ ! -d "$DEPS/debs" ] && command -v apt-get >/dev/null; then
  say "no dependency bundle at $DEPS: fetching one"
  "$ROOT/tools/portable-deps.sh" fetch "$DEPS" > "$OUT/build.log" 2>&1
fi
say "building in $BUILD ($JOBS jobs)"
t0=$(date +%s)
TT_BUILD_DIR="$BUILD" TT_JOBS="$JOBS" bounded "$ROOT/tools/setup.sh" --deps "$DEPS" build >> "$OUT/build.log" 2>&1
BUILD_RC=$?
[ $BUILD_RC -ne 124 ] || NOT_RUN+=("the rest of the build (stopped at the --budget deadline)")
if [ $BUILD_RC -ne 0 ] && [ $BUILD_RC -ne 124 ] && [ -f "$BUILD/build.ninja" ]; then
  # every error, not only the first target's
  say "build failed (rc $BUILD_RC): building what can be built, to list every error"
  bounded cmake --build "$BUILD" -j "$JOBS" -- -k 0 >> "$OUT/build.log" 2>&1
fi
BUILD_S=$(( $(date +%s) - t0 ))
WARN=$(grep -c 'warning:' "$OUT/build.log")
ERR=$(grep -c 'error:' "$OUT/build.log")
md "" "## Build" "" "setup.sh --deps: rc $BUILD_RC in ${BUILD_S} s; ${WARN} warning lines, ${ERR} error lines (build.log)."
grep -E '^-- tt:|^-- Found Torch|CUDA' "$BUILD/CMakeFiles/CMakeOutput.log" >/dev/null 2>&1 || true
grep -E '^-- (tt|Found Torch|Caffe2: CUDA)' "$OUT/build.log" | sort -u | fence
if [ "$WARN" -gt 0 ] || [ "$ERR" -gt 0 ]; then
  md "" "Distinct warnings and errors (first 40):"
  grep -E 'warning:|error:' "$OUT/build.log" | sed -E 's/^[^ ]*\/(core|models|plugins|tools|tests)\//\1\//' | sort | uniq -c |
    sort -rn | head -40 | fence
fi
# Which compiler CMake took, and which C++ runtime and OpenMP the programs load: a test binary
# built by one GCC and run against another's libstdc++ crashes in ways a log does not explain.
{
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
  echo "compiler: ${cxx:-?} ($("${cxx:-c++}" --version 2>/dev/null | head -1))"
  stdcxx=$("${cxx:-c++}" -print-file-name=libstdc++.so 2>/dev/null)
  echo "compiler's libstdc++: $([ -e "$stdcxx" ] && echo "shared ($stdcxx)" || echo "static only ($("${cxx:-c++}" -print-file-name=libstdc++.a 2>/dev/null))")"
  echo "libstdc++ tt links (cmake/TTModule.cmake): $(readlink "$BUILD/stdcxx/libstdc++.so" 2>/dev/null || echo '? (no build/stdcxx)')"
  [ -x "$BUILD/bin/tt-run" ] && ldd "$BUILD/bin/tt-run" | grep -E 'stdc\+\+|gcc_s|gomp|fmt|spdlog|torch_cuda' | sed 's/^\s*/  /'
} > "$OUT/runtime.txt" 2>&1
md "" "Compiler and runtime libraries of tt-run:"
fence < "$OUT/runtime.txt"
cat "$OUT/runtime.txt" >> "$OUT/machine.txt"
rm -f "$OUT/runtime.txt"
say "build: rc $BUILD_RC in ${BUILD_S} s, $WARN warnings, $ERR errors"

# --- tests: the CUDA ones first, alone on the device (their memory figures are not shared) ---
TESTS_RC=-1
CUDA_RC=""   # empty: the CUDA tests did not run in this call
run_cuda_tests() {
  [ -z "$TESTS" ] || return 0
  say "the CUDA tests"
  bounded ctest --test-dir "$CTEST_DIR" -R '^(Cuda\.|Adam8bitCuda\.)' --output-on-failure --timeout 900 > "$OUT/tests.log" 2>&1
  CUDA_RC=$?
}
cuda_state() {
  if [ -n "$CUDA_RC" ]; then echo "rc $CUDA_RC"
  elif [ -n "$TESTS" ]; then echo "among --tests"
  else echo "not run in this call (--stages $STAGES)"; fi
}
cuda_block() {
  if [ -z "$CUDA_RC" ] && [ -z "$TESTS" ]; then
    md "" "The CUDA tests: not run in this call (--stages $STAGES)."
    return
  fi
  md "" "The CUDA tests:"
  grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: (Cuda|Adam8bitCuda)\.' "$OUT/tests.log" | sed -E 's/^ *[0-9]+\/[0-9]+ //' | fence
}
run_suite() {
  say "test suite ($JOBS jobs)"
  local t0 rc
  t0=$(date +%s)
  # a GPU machine reaches no package mirror: the test that downloads from Debian's skips
  export TT_TEST_OFFLINE=1
  if [ -z "$TESTS" ]; then
    NOT_RUN+=("TtDataFetch.TabularFromDebiansPackageHoldsTheSharedTables (it downloads from Debian's package mirror)")
    # tools.gpu_check_dry_run is this check on the CPU (minutes); what it tests is what runs here
    NOT_RUN+=("tools.gpu_check_dry_run (this check's CPU dry run, which CI runs)")
    bounded ctest --test-dir "$CTEST_DIR" -E '^(Cuda\.|Adam8bitCuda\.|tools\.gpu_check_dry_run$)' -j "$JOBS" --timeout 900 \
      --output-on-failure \
      --output-junit "$OUT/tests.xml" >> "$OUT/tests.log" 2>&1
  else
    bounded ctest --test-dir "$CTEST_DIR" -R "$TESTS" -j "$JOBS" --timeout 900 --output-on-failure \
      --output-junit "$OUT/tests.xml" >> "$OUT/tests.log" 2>&1
  fi
  rc=$?
  TESTS_RC=$(( rc != 0 || ${CUDA_RC:-0} != 0 ))
  TESTS_S=$(( $(date +%s) - t0 ))
  md "" "## Tests" "" "ctest: rc $TESTS_RC (the CUDA tests: $(cuda_state); the rest in ${TESTS_S} s; tests.log, tests.xml)."
  grep -E 'tests passed|tests failed out of' "$OUT/tests.log" | fence
  if [ $rc -eq 124 ]; then
    NOT_RUN+=("the rest of the test suite (stopped at the --budget deadline)")
    md "" "Stopped at the --budget deadline after $(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$OUT/tests.log") ctest entries:" \
       "$(grep -cE '^ *[0-9]+/[0-9]+ Test +#.* Passed' "$OUT/tests.log") passed," \
       "$(grep -cE '^ *[0-9]+/[0-9]+ Test +#.*\*\*\*(Failed|Exception|Timeout)' "$OUT/tests.log") failed."
  fi
  cuda_block
  if grep -qE '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Not Run)' "$OUT/tests.log"; then
    md "" "Failed (ctest entries; an entry runs a GoogleTest suite):"
    grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Not Run)' "$OUT/tests.log" | fence
    md "" "Failed tests:"
    failed_tests '.*' | fence
  fi
  md "" "Skipped:"
  grep -E 'Test +#.*\*\*\*Skipped' "$OUT/tests.log" | sed -E 's/^ *[0-9]+\/[0-9]+ //' | sort -u | fence
  crash_stacks
  say "tests: rc $TESTS_RC in ${TESTS_S} s"
}
# A failed test that crashes again when run alone (killed by a signal) is run a third time
# under a debugger (gdb, or cuda-gdb, which also debugs host code) for the stack of every
# thread; the first four go into the report.
# The GoogleTest tests that failed, whose names match REGEX, from the output of the ctest entries
# that failed in tests.log (an entry runs a suite): those GoogleTest reported failed, and one
# that started but neither passed nor failed before its entry's output ended (a crash, a timeout).
failed_tests() {
  awk '/^\[ RUN      \] / { run = $4; next }
       /^\[ +(OK|SKIPPED) +\] / { run = ""; next }
       /^\[  FAILED  \] [^ ]+\.[^ ,]+(,| \()/ { sub(/,$/, "", $4); print $4; run = ""; next }
       /Test +#[0-9]+:|^[0-9]+% tests passed/ { if (run != "") print run; run = "" }
       END { if (run != "") print run }' "$OUT/tests.log" | grep -E "^$1" | sort -u
}
crash_stacks() {
  local dbg="" name bin rc n=0
  for d in gdb cuda-gdb; do command -v "$d" >/dev/null && { dbg="$d"; break; }; done
  [ -n "$dbg" ] || return 0
  while read -r name; do
    [ $n -lt 4 ] && time_left || break
    for bin in "$BUILD"/bin/tt_*tests; do
      "$bin" --gtest_list_tests --gtest_filter="$name" 2>/dev/null | grep -q '^  ' || continue
      timeout 120 "$bin" --gtest_filter="$name" > /dev/null 2>&1
      rc=$?
      if [ $rc -gt 128 ] && [ $rc -ne 124 ]; then
        n=$((n + 1))
        md "" "Stack of the crash in $name (signal $((rc - 128)), $dbg):"
        timeout 300 "$dbg" -batch -ex run -ex 'thread apply all bt 25' --args "$bin" --gtest_filter="$name" 2>&1 |
          grep -E '^(#|Thread|Program received)' | head -80 | fence
      fi
      break
    done
  done < <(failed_tests '.*')
}
# A failed Dist test is run again alone, as it was and then with MKL's conditional numerical
# reproducibility (MKL_CBWR=COMPATIBLE, MKL_DYNAMIC=FALSE): whether the difference comes from
# the load on the machine or from MKL's code paths.
rerun_dist() {
  local name bin="$BUILD/bin/tt_dist_tests" env
  [ -x "$bin" ] || return 0
  while read -r name; do
    for env in "" "MKL_CBWR=COMPATIBLE MKL_DYNAMIC=FALSE"; do
      time_left || return 0
      md "" "$name again, alone${env:+, with $env}:"
      bounded env $env "$bin" --gtest_filter="$name" 2>&1 | grep -E '^\[ +(OK|FAILED) +\]|Which is|tests?/.*Failure|Expected' |
        head -12 | fence
    done
  done < <(failed_tests 'Dist\.' | head -2)
}
: > "$OUT/tests.log"
HAVE_TESTS=0
[ -f "$BUILD/CTestTestfile.cmake" ] && HAVE_TESTS=1
if want cuda && [ $HAVE_TESTS -eq 1 ] && time_left; then run_cuda_tests; fi

# --- benchmarks, then the rest of the suite ------------------------------------------------
RUN="$BUILD/bin/tt-run"
DATA="$ROOT/data/brown/brown_train.txt"
[ -f "$DATA" ] || DATA="$ROOT/../shared/datasets/brown/brown_train.txt"
if ! want compare; then
  :
elif [ -x "$RUN" ] && [ -f "$DATA" ] && time_left; then
  say "compare-lm on $DEVICE"
  t0=$(date +%s)
  cfg=configs/compare-lm-cuda.yaml
  extra=(data.train="$DATA" output.dir="$BUILD/bench")
  if [ "$DRY" -eq 1 ]; then
    # the mechanics only: the CPU cannot run the CUDA variants; the same LM, small, three variants
    cfg="$BUILD/bench/compare-lm-dry.yaml"
    mkdir -p "$BUILD/bench"
    sed -e 's/seq_len: 512/seq_len: 64/; s/d_model: 256/d_model: 64/; s/device: cuda/device: cpu/' \
        -e 's/^  steps: .*/  steps: 2/; s/^  warmup_steps: .*/  warmup_steps: 1/' \
        -e '/^    [a-z0-9+-]*: {plugins/{/^    \(checkpoint\|chunked\): /!d}' -e '/^    #/d' \
        "$ROOT/configs/compare-lm-cuda.yaml" > "$cfg"
  fi
  (cd "$ROOT" && bounded "$RUN" "$cfg" "${extra[@]}") > "$OUT/compare-lm.txt" 2>&1
  CMP_RC=$?
  CMP_S=$(( $(date +%s) - t0 ))
  latest=$(ls -td "$BUILD"/bench/*compare* 2>/dev/null | head -1)
  [ -n "$latest" ] && [ -f "$latest/compare.csv" ] && cp "$latest/compare.csv" "$OUT/compare-lm.csv"
  md "" "## compare-lm on $DEVICE ($cfg)" "" "rc $CMP_RC in ${CMP_S} s (compare-lm.txt, compare-lm.csv)."
  # the table: from its header line to the line naming compare.csv
  awk '/^variant|^ *variant/ {on=1} on {print} /compare.csv/ {on=0}' "$OUT/compare-lm.txt" | fence
  say "compare-lm: rc $CMP_RC in ${CMP_S} s"
else
  NOT_RUN+=("compare-lm ($([ -x "$RUN" ] || echo 'no tt-run; ')$([ -f "$DATA" ] || echo 'no data/brown/brown_train.txt: run tt-data fetch brown ahead; ')$(time_left || echo 'out of time'))")
fi

if ! want suite; then
  if [ -n "$CUDA_RC" ]; then
    md "" "## Tests" "" "The CUDA tests: rc $CUDA_RC (the rest of the suite not in --stages $STAGES; tests.log)."
    grep -E 'tests passed|tests failed out of' "$OUT/tests.log" | fence
    cuda_block
    crash_stacks
  fi
elif [ $HAVE_TESTS -eq 1 ] && time_left; then
  run_suite
  rerun_dist
else
  NOT_RUN+=("the test suite ($([ $HAVE_TESTS -eq 1 ] && echo 'out of time' || echo 'no build'))")
fi

want topic || TOPIC=0
if [ "$TOPIC" != "0" ] && [ -x "$RUN" ] && time_left; then
  IFS=, read -r TN TM TK <<< "$TOPIC"
  [ "$DRY" -eq 1 ] && { TN=2000; TM=1000; TK=10; }
  TDIR="$BUILD/bench/topic-${TN}x${TM}"
  say "topic model ${TN} x ${TM}, k $TK, from disk, on $DEVICE"
  t0=$(date +%s)
  {
    if [ ! -f "$TDIR/X.npy" ]; then
      bounded "$BUILD/bin/tt-data" synth-topics --n "$TN" --m "$TM" --k "$TK" --avg-doc-length 256 --seed 42 --out "$TDIR"
    fi
    (cd "$ROOT" && bounded "$RUN" configs/topic-disk.yaml data.path="$TDIR/X.npy" data.true_F="$TDIR/true_F.npy" \
      model.k="$TK" trainer.device="$DEVICE" trainer.epochs=2 schedule.t0_epochs=2 \
      trainer.checkpoint_every=0 output.dir="$BUILD/bench" --run-dir "$TDIR/run" --overwrite)
  } > "$OUT/topic.txt" 2>&1
  TOPIC_RC=$?
  TOPIC_S=$(( $(date +%s) - t0 ))
  md "" "## Topic model ${TN} x ${TM}, k ${TK}, from disk (configs/topic-disk.yaml), on $DEVICE" ""
  md "rc $TOPIC_RC in ${TOPIC_S} s (topic.txt)."
  if [ -f "$TDIR/run/summary.json" ]; then
    python3 - "$TDIR/run/summary.json" "$TDIR/run/metrics.jsonl" <<'EOF' | fence
import json, sys
s = json.load(open(sys.argv[1]))
epochs = [json.loads(l) for l in open(sys.argv[2]) if '"epoch_seconds"' in l]
print("epochs:", s.get("epochs_completed"), "train_seconds:", round(s.get("train_seconds", 0), 2))
for e in epochs: print("epoch", e.get("epoch_end"), "seconds", round(e["epoch_seconds"], 2))
print("memory:", json.dumps(s.get("memory")))
EOF
  fi
  grep -E 'synth-topics: wrote|error|Error' "$OUT/topic.txt" | head -5 | fence
  say "topic: rc $TOPIC_RC in ${TOPIC_S} s"
elif [ "$TOPIC" != "0" ]; then
  NOT_RUN+=("the topic benchmark ($([ -x "$RUN" ] || echo 'no tt-run')$(time_left || echo 'out of time'))")
fi

# --- crash reports: tt's code addresses as functions and lines -------------------------------
# A crash report names tt's own (hidden) functions as library+offset: addr2line turns them into
# functions and source lines here, where the very binaries are.
if command -v addr2line >/dev/null; then
  crash_lines=$(cat "$OUT/tests.log" "$OUT/compare-lm.txt" 2>/dev/null |
    grep -oE '\((/[^ ()]+)\+0x[0-9a-f]+' | tr -d '(' | grep -F "$BUILD/" | awk '!seen[$0]++' | head -40)
  if [ -n "$crash_lines" ]; then
    md "" "## tt's code addresses in crash reports (addr2line; in the order first met, each with its function and file:line)" ""
    while read -r addr; do
      file="${addr%+0x*}"; off="0x${addr##*+0x}"
      printf '%s\n' "${addr#$BUILD/}"
      addr2line -f -C -i -e "$file" "$off" 2>/dev/null | sed "s|$ROOT/||; s/^/        /"
    done <<< "$crash_lines" | fence
  fi
fi
# A Python PyTorch's libraries may export copies of libstdc++'s std::filesystem (see
# CMakeLists.txt): which ones this one has.
torch_libs=$(ldd "$RUN" 2>/dev/null | awk '/lib(torch|torch_cpu|c10)\.so/ {print $3}')
if [ -n "$torch_libs" ] && command -v nm >/dev/null; then
  lo=$(grep -E 'Test +#[0-9]+: tools\.link_order ' "$OUT/tests.log" | grep -oE 'Passed|\*\*\*Failed|Not Run' | head -1)
  md "" "std::filesystem symbols that LibTorch's libraries export (copies of libstdc++'s); tools.link_order" \
     "(no tt binary binds a libstdc++ symbol to such a copy): ${lo:-not run}."
  for lib in $torch_libs; do
    syms=$(nm -D --defined-only "$lib" 2>/dev/null | awk '{print $3}' | grep 'St10filesystem' | sed 's/@.*//')
    printf '%s: %s\n' "$lib" "$(grep -c . <<< "$syms")"
    [ -z "$syms" ] && continue
    names=$(c++filt <<< "$syms" 2>/dev/null | sort)
    # the ones tt's checkpoint listing and clean-up call, then the first others
    grep -E 'path::compare|remove_all|directory_iterator::operator\+\+|directory_iterator\(' <<< "$names" | sed 's/^/  /'
    grep -vE 'path::compare|remove_all|directory_iterator' <<< "$names" | head -8 | sed 's/^/  /'
  done | fence
fi

# --- what was not run ----------------------------------------------------------------------
md "" "## Not run here"
NCCL=$(grep -E '^-- tt: c10d' "$OUT/build.log" | tail -1 | sed 's/^-- tt: //')
md "" "- NCCL across ranks needs two GPUs: ${NCCL:-the build did not report its c10d backends}; the Dist tests ran over Gloo."
[ "$DRY" -eq 1 ] && md "- Dry run: no GPU; the CUDA tests are reported as skipped and the benchmarks ran on the CPU."
for st in cuda compare suite topic; do want "$st" || NOT_RUN+=("the $st stage (not in --stages $STAGES)"); done
for n in "${NOT_RUN[@]}"; do md "- $n"; done
md "" "Total: $(elapsed) s."
say "report: $REPORT"
# without the suite, the CUDA tests' result stands for the tests
want suite || TESTS_RC=${CUDA_RC:-0}
[ $BUILD_RC -eq 0 ] && [ $TESTS_RC -eq 0 ]
