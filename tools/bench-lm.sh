#!/usr/bin/env bash
# tt's transformer LM against plain PyTorch on the same shapes, machine and threads, back to
# back in one run (the machine is shared: compare ratios, not absolute times).
#   tools/bench-lm.sh [--config "A B"] [--threads 2] [--steps 10] [--warmup 3] [--build DIR] [--rounds 1]
#                     [--variants "baseline checkpoint checkpoint-every2 amp amp-checkpoint chunked all3"]
# --rounds R runs the whole set (PyTorch, then every tt variant) R times, round-robin, so that a
# slow spell of the shared machine falls on every side alike; each figure is then the median of
# the R runs' medians, and the ratios are medians of the per-round ratios.
# Config A: vocab 1024, d_model 256, 8 layers, 4 heads, seq 512, batch 8; B: 4 layers, seq 2048,
# batch 2 (../shared/reference/pytorch_gpt_bench.py; it needs Debian's python3-torch).
# Both train on the UTF-8 bytes of the Brown training text with AdamW(1e-3, wd 0.01).
# Prints median step time (after the warm-up steps), peak tensor bytes and peak RSS per side;
# tt's variants (plugins) also as ratios to tt's baseline.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; CONFIGS="A"; THREADS=2; STEPS=10; WARMUP=3; VARIANTS="baseline"; ROUNDS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIGS="$2"; shift 2 ;; --threads) THREADS="$2"; shift 2 ;; --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;; --build) BUILD="$2"; shift 2 ;; --variants) VARIANTS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "bench-lm: unknown argument $1" >&2; exit 2 ;;
  esac
done
REF="$ROOT/../shared/reference/pytorch_gpt_bench.py"
. "$ROOT/tools/lib/lm-pipeline.sh"
[ -f "$REF" ] || { echo "bench-lm: $REF not found (the shared reference sits beside the repository)"; exit 1; }
lm_text_check bench-lm
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "bench-lm: needs Debian's python3-torch: apt-get install python3-torch"; exit 1; }
WORK="$(mktemp -d /tmp/tt-bench-lm-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

plugins_of() {  # tt variant -> its plugins list
  case "$1" in
    baseline) echo "[]" ;;
    checkpoint) echo "[checkpoint]" ;;
    checkpoint-every2) echo "[{name: checkpoint, policy: every, every: 2}]" ;;
    amp) echo "[amp]" ;;
    amp-checkpoint) echo "[checkpoint, amp]" ;;
    chunked) echo "[{name: attention, kernel: chunked}]" ;;
    all3) echo "[checkpoint, amp, {name: attention, kernel: chunked}]" ;;
    *) echo "bench-lm: unknown variant $1 (baseline, checkpoint, checkpoint-every2, amp, amp-checkpoint, chunked, all3)" >&2
       exit 2 ;;
  esac
}

shape() {  # config -> "layers seq batch"
  case "$1" in A) echo "8 512 8" ;; B) echo "4 2048 2" ;; *) echo "bench-lm: unknown config $1" >&2; exit 2 ;; esac
}

printf '%-6s %-18s %10s %13s %10s\n' config side "step (ms)" "peak tensors" "peak RSS"
for C in $CONFIGS; do
  read -r LAYERS SEQ BATCH <<<"$(shape "$C")"
  /usr/bin/python3 "$REF" tensorpeak --config "$C" --variant baseline --threads "$THREADS" \
    --json "$WORK/refpeak.json" > "$WORK/refpeak.log" 2>&1 || { cat "$WORK/refpeak.log"; exit 1; }
  lm_pipeline "$WORK/tt.yaml" bench-lm "$LAYERS" "$SEQ" "$BATCH" $((WARMUP + STEPS)) "$THREADS" "$WORK/runs"
  for R in $(seq 1 "$ROUNDS"); do
    /usr/bin/python3 "$REF" run --config "$C" --variant baseline --threads "$THREADS" --warmup "$WARMUP" \
      --steps "$STEPS" --json "$WORK/ref-$R.json" > "$WORK/ref.log" 2>&1 || { cat "$WORK/ref.log"; exit 1; }
    for V in $VARIANTS; do
      "$BUILD/bin/tt-run" "$WORK/tt.yaml" "plugins=$(plugins_of "$V")" --run-dir "$WORK/tt-$V-$R" -q
    done
  done
  python3 - "$C" "$WORK" "$WARMUP" "$ROUNDS" $VARIANTS <<'PY'
import json, statistics, sys
c, work, warmup, rounds, variants = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
med = statistics.median
refpeak = json.load(open(f"{work}/refpeak.json"))["tensor_peak_bytes"]
ref = [json.load(open(f"{work}/ref-{r}.json")) for r in range(1, rounds + 1)]
mib = lambda b: f"{b / 2**20:.0f} MiB"
def tt(v, r):
    steps = [json.loads(l) for l in open(f"{work}/tt-{v}-{r}/metrics.jsonl") if '"loss"' in l]
    return (med(s["step_seconds"] for s in steps[warmup:]) * 1e3,
            json.load(open(f"{work}/tt-{v}-{r}/summary.json"))["memory"])
runs = {v: [tt(v, r) for r in range(1, rounds + 1)] for v in variants}
ref_ms = [x["median_ms"] for x in ref]
spread = lambda xs: f" ({min(xs):.0f}-{max(xs):.0f})" if len(xs) > 1 else ""
print(f"{c:<6} {'pytorch':<18} {med(ref_ms):10.0f} {mib(refpeak):>13} {mib(med(x['peak_rss_kb'] for x in ref) * 1024):>10}{spread(ref_ms)}")
base = variants[0]
for v in variants:
    ms = [m for m, _ in runs[v]]
    peak = runs[v][0][1]["peak_tensor_bytes"]
    vs_ref = med(m / rm for m, rm in zip(ms, ref_ms))
    vs_base = med(m / b for m, (b, _) in zip(ms, runs[base]))
    print(f"{c:<6} {'tt ' + v:<18} {med(ms):10.0f} {mib(peak):>13} {mib(med(mem['peak_rss_bytes'] for _, mem in runs[v])):>10}"
          f"   vs pytorch {vs_ref:.3f}x time {peak / refpeak:.3f}x peak"
          f"   vs tt {base} {vs_base:.3f}x time {peak / runs[base][0][1]['peak_tensor_bytes']:.3f}x peak{spread(ms)}")
PY
done
