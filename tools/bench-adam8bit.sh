#!/usr/bin/env bash
# adam8bit (by default with float32 moments for the embeddings; adam8bit-emb8: 8-bit for those
# too) against float32 AdamW on the transformer LM (bytes of the Brown corpus), the same
# data, seed and order: validation loss after N steps, optimizer state (tt's meter) per
# parameter, and median step time, back to back.
#   tools/bench-adam8bit.sh [--steps 1000] [--d-model 128] [--layers 4] [--seq 128] [--batch 16]
#                           [--threads 2] [--lr 3e-3] [--seed 0] [--build DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; STEPS=1000; DMODEL=128; LAYERS=4; SEQ=128; BATCH=16; THREADS=2; LR=3e-3; SEED=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;; --d-model) DMODEL="$2"; shift 2 ;; --layers) LAYERS="$2"; shift 2 ;;
    --seq) SEQ="$2"; shift 2 ;; --batch) BATCH="$2"; shift 2 ;; --threads) THREADS="$2"; shift 2 ;;
    --lr) LR="$2"; shift 2 ;; --seed) SEED="$2"; shift 2 ;; --build) BUILD="$2"; shift 2 ;;
    *) echo "bench-adam8bit: unknown argument $1" >&2; exit 2 ;;
  esac
done
DATA="$ROOT/../shared/datasets/brown"
[ -f "$DATA/brown_train.txt" ] || { echo "bench-adam8bit: $DATA/brown_train.txt not found (../shared/datasets beside the repository)"; exit 1; }
command -v python3 >/dev/null || { echo "bench-adam8bit: needs python3 for the table (apt-get install python3)"; exit 1; }
WORK="$(mktemp -d /tmp/tt-bench-adam8bit-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/p.yaml" <<YAML
name: bench-adam8bit
seed: $SEED
data: {name: text, train: $DATA/brown_train.txt, validation: $DATA/brown_val.txt, tokenizer: bytes, seq_len: $SEQ,
       shuffle_buffer: 256, validation_max_examples: 256}
model: {name: transformer, vocab: 256, d_model: $DMODEL, n_layers: $LAYERS, n_heads: 4, sample_tokens: 0}
optimizer: {name: adamw, lr: $LR, weight_decay: 0.01}
schedule: {name: cosine, warmup_steps: $((STEPS / 20)), min_lr: 0}
trainer: {batch_size: $BATCH, max_steps: $STEPS, threads: $THREADS, eval_every: $STEPS, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
for v in adamw adam8bit adam8bit-emb8; do
  case $v in adamw) P="[]" ;; adam8bit) P="[adam8bit]" ;; adam8bit-emb8) P="[{name: adam8bit, embeddings_32bit: false}]" ;; esac
  "$BUILD/bin/tt-run" -q "$WORK/p.yaml" "plugins=$P" --run-dir "$WORK/$v" 2> "$WORK/$v.log" || { cat "$WORK/$v.log"; exit 1; }
done
python3 - "$WORK" "$STEPS" "$SEED" <<'PY'
import json, sys
work, steps = sys.argv[1], int(sys.argv[2])
def run(v):
    s = json.load(open(f"{work}/{v}/summary.json"))
    val = [json.loads(l) for l in open(f"{work}/{v}/metrics.jsonl") if '"val_loss"' in l]
    params = s["memory"]["parameters_bytes"] / 4
    return (val[-1]["val_loss"], s["memory"]["optimizer_state_bytes"], params, s["median_step_seconds"],
            s["median_optimizer_seconds"])
a = run("adamw")
print(f"transformer LM, {int(a[2])} parameters, {steps} steps, seed {sys.argv[3]}; validation loss (nats/token), optimizer state, "
      f"median training step, median optimizer step")
print(f"  {'adamw (float32)':<26}{a[0]:9.4f}{a[1] / 2**20:9.2f} MiB{a[1] / a[2]:7.2f} B/param{1e3 * a[3]:8.1f} ms"
      f"{1e3 * a[4]:8.2f} ms")
for v in ("adam8bit", "adam8bit-emb8"):
    b = run(v)
    print(f"  {v:<26}{b[0]:9.4f}{b[1] / 2**20:9.2f} MiB{b[1] / b[2]:7.2f} B/param{1e3 * b[3]:8.1f} ms"
          f"{1e3 * b[4]:8.2f} ms   vs adamw: val loss {100 * (b[0] - a[0]) / a[0]:+.2f}%, state {b[1] / a[1]:.3f}x, "
          f"step {b[3] / a[3]:.3f}x, optimizer step {b[4] / a[4]:.3f}x")
PY
