#!/usr/bin/env bash
# What the meter's page cache (trainer.cache_allocations) does to step time, system time, page
# faults, RSS and the pages held. Runs tt's LM at config A of tools/bench-lm.sh (every step
# makes and frees about 800 MiB of activations in tensors of up to 32 MiB), alternating cache
# off (malloc, as plain PyTorch) and on REPEATS times in one session; prints medians and the
# on/off ratio.
#   tools/bench-allocator.sh [BUILD_DIR] [REPEATS] [STEPS]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
REPEATS="${2:-3}"
STEPS="${3:-8}"
. "$ROOT/tools/lib/lm-pipeline.sh"
lm_text_check bench-allocator
command -v python3 >/dev/null || { echo "bench-allocator: needs python3 for the table (apt-get install python3)"; exit 1; }
WORK="$(mktemp -d /tmp/tt-bench-alloc-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
lm_pipeline "$WORK/p.yaml" bench-alloc 8 512 8 "$STEPS" 2 "$WORK/runs"
for i in $(seq 1 "$REPEATS"); do
  for cache in false true; do
    "$BUILD/bin/tt-run" -q "$WORK/p.yaml" trainer.cache_allocations=$cache --run-dir "$WORK/runs/$cache-$i" >/dev/null
  done
done
python3 - "$WORK/runs" "$REPEATS" "$STEPS" <<'PY'
import json, statistics, sys
runs, repeats, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for cache in ("false", "true"):
    s = [json.load(open(f"{runs}/{cache}-{i}/summary.json")) for i in range(1, repeats + 1)]
    med = lambda f: statistics.median(f(x) for x in s)
    rows[cache] = {
        "step ms": med(lambda x: 1e3 * x["median_step_seconds"]),
        "system s": med(lambda x: x["process"]["system_cpu_seconds"]),
        "minor faults": med(lambda x: x["process"]["minor_page_faults"]),
        "peak RSS MiB": med(lambda x: x["memory"]["peak_rss_bytes"] / 2**20),
        "peak tensors MiB": med(lambda x: x["memory"]["peak_tensor_bytes"] / 2**20),
    }
print(f"LM config A, {steps} steps, median of {repeats} runs each")
print(f"{'':18}{'cache off':>12}{'cache on':>12}{'on/off':>9}")
for k in rows["false"]:
    a, b = rows["false"][k], rows["true"][k]
    print(f"{k:18}{a:12.1f}{b:12.1f}{(b / a if a else float('nan')):9.2f}")
PY
