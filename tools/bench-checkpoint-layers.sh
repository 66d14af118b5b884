#!/usr/bin/env bash
# Activation memory against depth, with and without checkpointing: the transformer of config A
# (vocab 1024, d_model 256, 4 heads, seq 512, batch 8) at several layer counts, each trained a
# few steps with no checkpointing, every 2nd block, and every block. Prints tt's meter:
# activation bytes (held by forward when backward starts) and the step's peak tensor bytes.
#   tools/bench-checkpoint-layers.sh [--layers "2 4 8 12"] [--steps 2] [--threads 2] [--build DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; LAYERS="2 4 8 12"; STEPS=2; THREADS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) LAYERS="$2"; shift 2 ;; --steps) STEPS="$2"; shift 2 ;; --threads) THREADS="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    *) echo "bench-checkpoint-layers: unknown argument $1" >&2; exit 2 ;;
  esac
done
TEXT="$ROOT/../shared/datasets/brown/brown_train.txt"
[ -f "$TEXT" ] || { echo "bench-checkpoint-layers: $TEXT not found (../shared/datasets beside the repository)"; exit 1; }
WORK="$(mktemp -d /tmp/tt-bench-ckl-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
for L in $LAYERS; do
  cat > "$WORK/p$L.yaml" <<YAML
name: bench-ckpt-layers
seed: 0
data: {name: text, train: $TEXT, tokenizer: bytes, seq_len: 512, shuffle_buffer: 256}
model: {name: transformer, vocab: 1024, d_model: 256, n_layers: $L, n_heads: 4, sample_tokens: 0}
optimizer: {name: adamw, lr: 1.0e-3, weight_decay: 0.01}
trainer: {batch_size: 8, max_steps: $STEPS, threads: $THREADS, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
  for V in none every2 all; do
    case $V in none) P="[]" ;; every2) P="[{name: checkpoint, policy: every, every: 2}]" ;; all) P="[checkpoint]" ;; esac
    "$BUILD/bin/tt-run" -q "$WORK/p$L.yaml" "plugins=$P" --run-dir "$WORK/r-$L-$V" 2> "$WORK/$L-$V.log" ||
      { cat "$WORK/$L-$V.log"; exit 1; }
  done
done
python3 - "$WORK" "$LAYERS" <<'PY'
import json, sys
work, layers = sys.argv[1], sys.argv[2].split()
mib = lambda b: f"{b / 2**20:8.1f}"
print("activation bytes held when backward starts / peak tensor bytes (MiB), config A shape, by depth")
print(f"{'layers':>6} | {'none':>8} {'every 2':>8} {'all':>8} | {'none':>8} {'every 2':>8} {'all':>8}")
for L in layers:
    m = {v: json.load(open(f"{work}/r-{L}-{v}/summary.json"))["memory"] for v in ("none", "every2", "all")}
    print(f"{L:>6} | " + " ".join(mib(m[v]["activations_bytes"]) for v in ("none", "every2", "all")) + " | " +
          " ".join(mib(m[v]["peak_tensor_bytes"]) for v in ("none", "every2", "all")))
PY
