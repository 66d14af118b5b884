#!/usr/bin/env bash
# What the meter's size-class cache (trainer.cache_allocations) does to step time, system
# time, page faults and RSS. Runs the topic model with a wide vocabulary, so every step makes
# and frees tensors of tens of MiB, alternating cache off/on REPEATS times in one session,
# and prints medians and the on/off ratio.
#   tools/bench-allocator.sh [BUILD_DIR] [REPEATS] [N_TERMS] [BATCH]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
REPEATS="${2:-3}"
TERMS="${3:-100000}"
BATCH="${4:-128}"
WORK="$(mktemp -d /tmp/tt-bench-alloc-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/p.yaml" <<YAML
name: bench-alloc
data: {name: topic-synthetic, n_docs: 1024, n_terms: $TERMS, k: 10, avg_doc_length: 200}
model: {name: topic, k: 10}
optimizer: {name: adamw, lr: 0.05}
trainer: {batch_size: $BATCH, max_steps: 24, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
for i in $(seq 1 "$REPEATS"); do
  for cache in false true; do
    "$BUILD/bin/tt-run" -q "$WORK/p.yaml" trainer.cache_allocations=$cache --run-dir "$WORK/runs/$cache-$i"
  done
done
command -v python3 >/dev/null || { echo "bench-allocator: needs python3 for the table (apt-get install python3)"; exit 1; }
python3 - "$WORK/runs" "$REPEATS" "$TERMS" "$BATCH" <<'PY'
import json, statistics, sys
runs, repeats, terms, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
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
print(f"topic model, {terms} terms, batch {batch}, 24 steps, median of {repeats} runs each")
print(f"{'':18}{'cache off':>12}{'cache on':>12}{'on/off':>9}")
for k in rows["false"]:
    a, b = rows["false"][k], rows["true"][k]
    print(f"{k:18}{a:12.1f}{b:12.1f}{(b / a if a else float('nan')):9.2f}")
PY
