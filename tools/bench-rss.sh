#!/usr/bin/env bash
# Where an LM run's resident memory goes beyond its tensors. Runs tt's LM at config A of
# tools/bench-lm.sh (vocab 1024, d_model 256, 8 layers, seq 512, batch 8, 2 threads) with the
# allocator's cache on (the default) and off (malloc, as plain PyTorch), and the same pipeline
# shrunk to a tiny model (d_model 32, 1 layer, seq 64, batch 1): that run's RSS less its tensors
# is the share of memory any process pays for LibTorch (its code and static tables), OpenMP and
# the loader, whatever the model. Prints, per run: peak tensors, peak reserved (the allocator's
# pages), peak RSS, RSS / tensors, and what is left beyond the tensors and that fixed share.
# --set KEY=VALUE (repeatable) passes a pipeline override to every run, e.g.
# --set trainer.release_library_pages=false.
#   tools/bench-rss.sh [--build DIR] [--steps 6] [--repeats 1] [--set KEY=VALUE]...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; STEPS=6; REPEATS=1; SETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;; --steps) STEPS="$2"; shift 2 ;; --repeats) REPEATS="$2"; shift 2 ;;
    --set) case "${2:-}" in *=*) SETS+=("$2"); shift 2 ;; *) echo "bench-rss: --set takes KEY=VALUE" >&2; exit 2 ;; esac ;;
    *) echo "bench-rss: unknown argument $1 (--build DIR, --steps N, --repeats N, --set KEY=VALUE)" >&2; exit 2 ;;
  esac
done
. "$ROOT/tools/lib/lm-pipeline.sh"
lm_text_check bench-rss
command -v python3 >/dev/null || { echo "bench-rss: needs python3 for the table (apt-get install python3)"; exit 1; }
WORK="$(mktemp -d /tmp/tt-bench-rss-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
lm_pipeline "$WORK/a.yaml" bench-rss 8 512 8 "$STEPS" 2 "$WORK/runs"
TINY="model.d_model=32 model.n_layers=1 model.n_heads=1 data.seq_len=64 trainer.batch_size=1"
for r in $(seq 1 "$REPEATS"); do
  "$BUILD/bin/tt-run" -q "$WORK/a.yaml" $TINY ${SETS[@]+"${SETS[@]}"} --run-dir "$WORK/tiny-$r"
  "$BUILD/bin/tt-run" -q "$WORK/a.yaml" ${SETS[@]+"${SETS[@]}"} --run-dir "$WORK/cache-$r"
  "$BUILD/bin/tt-run" -q "$WORK/a.yaml" trainer.cache_allocations=false ${SETS[@]+"${SETS[@]}"} --run-dir "$WORK/malloc-$r"
done
python3 - "$WORK" "$REPEATS" <<'PY'
import json, statistics, sys
work, repeats = sys.argv[1], int(sys.argv[2])
mib = lambda b: b / 2**20
def mem(run):
    ms = [json.load(open(f"{work}/{run}-{r}/summary.json"))["memory"] for r in range(1, repeats + 1)]
    return {k: statistics.median(m[k] for m in ms) for k in ("peak_tensor_bytes", "peak_reserved_bytes", "peak_rss_bytes")}
tiny = mem("tiny")
fixed = tiny["peak_rss_bytes"] - tiny["peak_tensor_bytes"]
print(f"fixed share (tiny LM: RSS {mib(tiny['peak_rss_bytes']):.1f} MiB less its {mib(tiny['peak_tensor_bytes']):.1f} MiB of tensors): {mib(fixed):.1f} MiB")
print(f"{'config A':<26} {'peak tensors':>13} {'peak reserved':>14} {'peak RSS':>10} {'RSS/tensors':>12} {'beyond both':>12}")
for run, name in (("cache", "cache on (default)"), ("malloc", "cache off (malloc)")):
    m = mem(run)
    t, rss = m["peak_tensor_bytes"], m["peak_rss_bytes"]
    res = f"{mib(m['peak_reserved_bytes']):.1f} MiB" if run == "cache" else "(malloc's)"
    print(f"{name:<26} {mib(t):>9.1f} MiB {res:>14} {mib(rss):>6.1f} MiB {rss / t:>11.3f}x {mib(rss - t - fixed):>8.1f} MiB")
print(f"floor: tensors + fixed share = {(mem('cache')['peak_tensor_bytes'] + fixed) / mem('cache')['peak_tensor_bytes']:.3f}x the tensors")
released = statistics.median(json.load(open(f"{work}/cache-{r}/summary.json"))["memory"].get("library_pages_released_bytes", 0)
                             for r in range(1, repeats + 1))
print(f"library pages given back before training (trainer.release_library_pages): {mib(released):.1f} MiB")
PY
