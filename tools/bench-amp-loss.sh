#!/usr/bin/env bash
# amp's numerical faithfulness: the same LM trained N steps in float32 and with bf16 autocast
# (same data, seed and order), and with the LM head kept in float32 (keep_fp32: [head]),
# compared by the mean loss of the last 20 steps.
#   tools/bench-amp-loss.sh [--steps 200] [--layers 8] [--seq 512] [--batch 8] [--threads 2] [--build DIR]
#                           [--lr 1e-3] [--warmup 0] [--seed 0]
# Default shape: config A (vocab 1024, d_model 256, 8 layers, 4 heads, seq 512, batch 8).
# The learning rate is constant by default; with --warmup W, W steps of linear warm-up, then
# cosine decay to lr/10 at the last step.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; STEPS=200; LAYERS=8; SEQ=512; BATCH=8; THREADS=2; LR=1.0e-3; WARMUP=0; SEED=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;; --layers) LAYERS="$2"; shift 2 ;; --seq) SEQ="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;; --threads) THREADS="$2"; shift 2 ;; --build) BUILD="$2"; shift 2 ;;
    --lr) LR="$2"; shift 2 ;; --warmup) WARMUP="$2"; shift 2 ;; --seed) SEED="$2"; shift 2 ;;
    *) echo "bench-amp-loss: unknown argument $1" >&2; exit 2 ;;
  esac
done
TEXT="$ROOT/../shared/datasets/brown/brown_train.txt"
[ -f "$TEXT" ] || { echo "bench-amp-loss: $TEXT not found (../shared/datasets beside the repository)"; exit 1; }
if [ "$WARMUP" = 0 ]; then SCHEDULE="{name: constant}"
else SCHEDULE="{name: cosine, warmup_steps: $WARMUP, min_lr: $(python3 -c "print($LR / 10)")}"; fi
WORK="$(mktemp -d /tmp/tt-bench-amp-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/p.yaml" <<YAML
name: bench-amp-loss
seed: $SEED
data: {name: text, train: $TEXT, tokenizer: bytes, seq_len: $SEQ, shuffle_buffer: 256}
model: {name: transformer, vocab: 1024, d_model: 256, n_layers: $LAYERS, n_heads: 4, sample_tokens: 0}
optimizer: {name: adamw, lr: $LR, weight_decay: 0.01}
schedule: $SCHEDULE
trainer: {batch_size: $BATCH, max_steps: $STEPS, threads: $THREADS, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
for v in fp32 bf16 bf16-head32; do
  case $v in fp32) P="[]" ;; bf16) P="[amp]" ;; bf16-head32) P="[{name: amp, keep_fp32: [head]}]" ;; esac
  "$BUILD/bin/tt-run" -q "$WORK/p.yaml" "plugins=$P" --run-dir "$WORK/$v" 2> "$WORK/$v.log" || { cat "$WORK/$v.log"; exit 1; }
done
python3 - "$WORK" "$STEPS" "$LR" "$SCHEDULE" <<'PY'
import json, sys, statistics
work, steps = sys.argv[1], int(sys.argv[2])
def run(v):
    lines = [json.loads(l) for l in open(f"{work}/{v}/metrics.jsonl")]
    losses = [l["loss"] for l in lines if "loss" in l]
    s = json.load(open(f"{work}/{v}/summary.json"))
    return statistics.mean(losses[-20:]), losses[0], s["median_step_seconds"], s["memory"]["peak_tensor_bytes"]
a = run("fp32")
print(f"lr {sys.argv[3]}, {sys.argv[4]}")
print(f"{steps} steps, first loss {a[1]:.4f}; mean loss of the last 20 steps, median step, peak tensors:")
print(f"  {'fp32':<22}{a[0]:8.4f}{1e3 * a[2]:9.0f} ms{a[3] / 2**20:8.0f} MiB")
for v, label in (("bf16", "amp bf16"), ("bf16-head32", "amp bf16, head fp32")):
    b = run(v)
    print(f"  {label:<22}{b[0]:8.4f}{1e3 * b[2]:9.0f} ms{b[3] / 2**20:8.0f} MiB   vs fp32: loss {b[0] / a[0]:.4f} "
          f"({100 * abs(b[0] - a[0]) / a[0]:.2f}% apart), time {b[2] / a[2]:.3f}x, peak {b[3] / a[3]:.3f}x")
# the trajectories: mean loss over windows of 10 steps, so a gap can be told from a shifted curve
every = max(10, steps // 10)
marks = sorted(set(list(range(every, steps + 1, every)) + [steps]))
print("mean loss of the 10 steps ending at step: " + " ".join(f"{m:>7}" for m in marks))
for v in ("fp32", "bf16", "bf16-head32"):
    losses = [json.loads(l)["loss"] for l in open(f"{work}/{v}/metrics.jsonl") if '"loss"' in l]
    print(f"  {v:<39}" + " ".join(f"{statistics.mean(losses[max(0, m - 10):m]):7.3f}" for m in marks))
PY
