#!/usr/bin/env bash
# How long a cold build of tt takes, compiled file by file and as a unity build (what
# tools/setup.sh does), each in a fresh clone of a commit with ccache off, one after the other
# on this machine:
#   tools/bench-build.sh [--rev REV] [--jobs N] [files|unity]...
# REV: the commit to build (default HEAD); N: ninja's jobs (default: all cores); the modes
# (default: both). Prints a table: mode, translation units compiled, wall seconds, and the
# ratio to the first mode. Needs what tools/setup.sh build installs.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REV=HEAD
JOBS="$(nproc)"
MODES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) REV="${2:?--rev takes a commit}"; shift 2 ;;
    --jobs) JOBS="${2:?--jobs takes a number}"; shift 2 ;;
    files|unity) MODES+=("$1"); shift ;;
    *) echo "bench-build: unknown argument '$1' (usage: tools/bench-build.sh [--rev REV] [--jobs N] [files|unity]...)" >&2
       exit 2 ;;
  esac
done
[ ${#MODES[@]} -gt 0 ] || MODES=(files unity)
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "bench-build: --jobs must be a positive number, got '$JOBS'" >&2; exit 2; }
commit="$(git -C "$REPO" rev-parse --short "$REV")"
WORK="$(mktemp -d /tmp/tt-bench-build-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

echo "cold build of $commit, $JOBS jobs, ccache off; CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
rows=()
first=""
for mode in "${MODES[@]}"; do
  src="$WORK/$mode"
  git clone -q "$REPO" "$src"
  git -C "$src" checkout -q "$commit"
  args=(-DCMAKE_BUILD_TYPE=Release -DTT_BUILD_TESTS=ON -DTT_USE_CCACHE=OFF)
  [ "$mode" = unity ] && args+=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8)
  cmake -S "$src" -B "$src/build" -G Ninja "${args[@]}" > "$WORK/$mode-configure.log" 2>&1 ||
    { cat "$WORK/$mode-configure.log"; exit 1; }
  units=$(ninja -C "$src/build" -t commands | grep -c ' -c ')
  echo "$mode: building $units translation units..."
  start=$(date +%s.%N)
  ninja -C "$src/build" -j "$JOBS" > "$WORK/$mode-build.log" 2>&1 || { tail -40 "$WORK/$mode-build.log"; exit 1; }
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  [ -n "$first" ] || first="$secs"
  rows+=("$(printf '%-6s %6d %10.0f %8.2fx' "$mode" "$units" "$secs" "$(awk -v a="$secs" -v b="$first" 'BEGIN { print a / b }')")")
  rm -rf "$src"
done
printf '%-6s %6s %10s %9s\n' mode units seconds ratio
printf '%s\n' "${rows[@]}"
