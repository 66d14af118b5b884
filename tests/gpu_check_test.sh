#!/usr/bin/env bash
# tools/gpu-check.sh end to end in its CPU-only dry mode, on this build: the dependency bundle
# is made and unpacked, the build step finds everything built, the CUDA tests are run and
# reported as skipped, the compare and topic benchmarks run on the CPU, and report.md says so.
set -euo pipefail
# the --tests expressions below name ctest entries as ctest makes them by default (a suite each)
unset TT_CTEST_EACH_TEST
BUILD="$1"
SRC="$2"
WORK="$(mktemp -d /tmp/tt-gpu-check-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# The bundle this build was made with (setup.sh --deps), else one kept beside the build:
# fetched once (apt-get download), then reused.
DEPS="$BUILD/portable-deps"
prefix=$(sed -n 's/^TT_DEPS_PREFIX:PATH=//p' "$BUILD/CMakeCache.txt")
[ -n "$prefix" ] && DEPS="$(dirname "$(dirname "$prefix")")"   # DIR/prefix/usr -> DIR
TT_BUILD_DIR="$BUILD" TT_JOBS=2 "$SRC/tools/gpu-check.sh" --dry-run --deps "$DEPS" \
  --out "$WORK/out" --tests '^Cuda\.' > "$WORK/log" 2>&1 || { cat "$WORK/log"; echo "FAIL: gpu-check.sh --dry-run failed"; exit 1; }
R="$WORK/out/report.md"
fail() { cat "$R"; echo "FAIL: $*"; exit 1; }
for f in report.md machine.txt build.log tests.log tests.xml compare-lm.txt compare-lm.csv topic.txt; do
  [ -s "$WORK/out/$f" ] || fail "no $f"
done
grep -q '^# tt GPU check (dry run: CPU only)' "$R" || fail "no title"
grep -q '^setup.sh --deps: rc 0' "$R" || fail "the build step did not succeed"
grep -q '100% tests passed' "$R" || fail "the tests did not pass"
n=$(grep -cE '^Test +#[0-9]+: Cuda\.[A-Za-z0-9]+ .*Skipped' "$R" || true)
[ "$n" -ge 7 ] || fail "expected the 7 Cuda tests reported as skipped, found $n"
grep -qE '^baseline ' "$WORK/out/compare-lm.txt" || fail "no baseline row in the compare table"
grep -q 'checkpoint' "$WORK/out/compare-lm.csv" || fail "no checkpoint variant in compare-lm.csv"
grep -qE '^epoch 1 seconds [0-9.]+' "$R" || fail "no epoch time of the topic benchmark"
grep -q 'NCCL across ranks needs two GPUs' "$R" || fail "the report does not say what was not run"
# a check split over calls: only the named stages run, the others are named as not run
TT_BUILD_DIR="$BUILD" TT_JOBS=2 "$SRC/tools/gpu-check.sh" --dry-run --deps "$DEPS" --out "$WORK/out2" \
  --stages suite --tests '^(tools\.link_order|Options\.\*)$' > "$WORK/log2" 2>&1 ||
  { cat "$WORK/log2"; echo "FAIL: --stages suite failed"; exit 1; }
R="$WORK/out2/report.md"
grep -q '100% tests passed, 0 tests failed out of 2' "$R" || fail "--stages suite did not run the two tests asked for"
grep -q 'the compare stage (not in --stages suite)' "$R" || fail "the compare stage is not named as not run"
grep -q 'the topic stage (not in --stages suite)' "$R" || fail "the topic stage is not named as not run"
grep -q '(no tt binary binds a libstdc++ symbol to such a copy): Passed' "$R" || fail "no link_order result"
[ ! -s "$WORK/out2/compare-lm.txt" ] || fail "compare-lm ran though not asked for"
# the CUDA tests alone (the first call of a split check): reported with their results
TT_BUILD_DIR="$BUILD" TT_JOBS=2 "$SRC/tools/gpu-check.sh" --dry-run --deps "$DEPS" --out "$WORK/out4" \
  --stages cuda > "$WORK/log4" 2>&1 || { cat "$WORK/log4"; echo "FAIL: --stages cuda failed"; exit 1; }
R="$WORK/out4/report.md"
grep -q '^The CUDA tests: rc 0 (the rest of the suite not in --stages cuda' "$R" || fail "no CUDA tests' result"
n=$(grep -cE '^Test +#[0-9]+: (Cuda|Adam8bitCuda)\.[A-Za-z0-9]+ .*Skipped' "$R" || true)
[ "$n" -ge 8 ] || fail "expected the 8 CUDA tests reported (skipped here), found $n"
grep -q 'the suite stage (not in --stages cuda)' "$R" || fail "the suite stage is not named as not run"
rc=0
"$SRC/tools/gpu-check.sh" --stages suite,bench --out "$WORK/out3" > "$WORK/log3" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "unknown stage 'bench'" "$WORK/log3" || { cat "$WORK/log3"; echo "FAIL: a bad --stages gave rc $rc"; exit 1; }
echo "gpu-check dry run: ok"
