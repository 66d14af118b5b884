#!/usr/bin/env bash
# LoRA fine-tuning of a pretrained LM on a held-out kind of text, against full fine-tuning.
# The Brown corpus' documents (../shared/datasets/brown/brown_docs.tsv) are split by category:
# the LM is pretrained on every category but one; the held-out category's documents are then
# split 3:1 into fine-tuning text and validation text. Reported (tt's meter): validation loss of
# the pretrained model and after fine-tuning, trainable parameters, gradient + optimizer bytes,
# peak tensor bytes, median step time.
#   tools/bench-lora.sh [--category religion] [--pretrain-steps 600] [--steps 200] [--r 8]
#                       [--d-model 256] [--layers 4] [--threads 2] [--build DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; CAT=religion; PRE=600; STEPS=200; R=8; DMODEL=256; LAYERS=4; THREADS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --category) CAT="$2"; shift 2 ;; --pretrain-steps) PRE="$2"; shift 2 ;; --steps) STEPS="$2"; shift 2 ;;
    --r) R="$2"; shift 2 ;; --d-model) DMODEL="$2"; shift 2 ;; --layers) LAYERS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;; --build) BUILD="$2"; shift 2 ;;
    *) echo "bench-lora: unknown argument $1" >&2; exit 2 ;;
  esac
done
DOCS="$ROOT/../shared/datasets/brown/brown_docs.tsv"
[ -f "$DOCS" ] || { echo "bench-lora: $DOCS not found (../shared/datasets beside the repository)"; exit 1; }
command -v python3 >/dev/null || { echo "bench-lora: needs python3 for the table (apt-get install python3)"; exit 1; }
WORK="$(mktemp -d /tmp/tt-bench-lora-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
# One document a line; the held-out category's every 4th document is validation.
awk -F'\t' -v cat="$CAT" -v w="$WORK" '
  $2 != cat { print $3 > (w "/pretrain.txt"); next }
  { n++; print $3 > (w "/" (n % 4 == 0 ? "tune_val.txt" : "tune_train.txt")) }' "$DOCS"
[ -s "$WORK/tune_val.txt" ] || { echo "bench-lora: category '$CAT' has too few documents in $DOCS"; exit 1; }
MODEL="name: transformer, vocab: 256, d_model: $DMODEL, n_layers: $LAYERS, n_heads: 4, sample_tokens: 0"
common() {  # name, train, validation, steps, lr, extra model keys
  cat <<YAML
name: $1
seed: 0
data: {name: text, train: $2, validation: $3, tokenizer: bytes, seq_len: 128, shuffle_buffer: 512}
model: {$MODEL$6}
optimizer: {name: adamw, lr: $5, weight_decay: 0.0}
schedule: {name: cosine, warmup_steps: $(( $4 / 20 )), min_lr: 0}
trainer: {batch_size: 16, max_steps: $4, threads: $THREADS, eval_every: $4, checkpoint_every: $4, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
}
run() {  # tag, yaml, plugins
  echo "$2" > "$WORK/$1.yaml"
  "$BUILD/bin/tt-run" -q "$WORK/$1.yaml" "plugins=$3" --run-dir "$WORK/$1" 2> "$WORK/$1.log" || { cat "$WORK/$1.log"; exit 1; }
}
echo "pretraining on every category but $CAT ($PRE steps)..." >&2
run base "$(common base "$WORK/pretrain.txt" "$WORK/tune_val.txt" "$PRE" 2e-3 "")" "[]"
INIT=", init_from: $WORK/base"
echo "fine-tuning ($STEPS steps): LoRA r=$R, then full..." >&2
run before "$(common before "$WORK/tune_train.txt" "$WORK/tune_val.txt" 1 0 "$INIT")" "[{name: lora, r: $R, alpha: $((2 * R))}]"
run lora "$(common lora "$WORK/tune_train.txt" "$WORK/tune_val.txt" "$STEPS" 2e-3 "$INIT")" "[{name: lora, r: $R, alpha: $((2 * R))}]"
run full "$(common full "$WORK/tune_train.txt" "$WORK/tune_val.txt" "$STEPS" 3e-4 "$INIT")" "[]"
python3 - "$WORK" "$CAT" "$STEPS" "$R" <<'PY'
import json, os, sys
work, cat, steps, r = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
MiB = 2**20
def s(v): return json.load(open(f"{work}/{v}/summary.json"))
b, lo, fu = s("before"), s("lora"), s("full")
print(f"held-out category '{cat}': {os.path.getsize(work + '/tune_train.txt')} chars to tune on, "
      f"{os.path.getsize(work + '/tune_val.txt')} to validate; {steps} fine-tuning steps")
print(f"  pretrained model: validation {b['validation']['val_loss']:.4f} nats/token "
      f"({b['validation']['val_bits_per_char']:.4f} bits/char)")
print(f"  {'':<12}{'val loss':>10}{'bits/char':>11}{'trainable':>11}{'grad+opt':>12}{'peak tensor':>13}{'step':>9}")
def state(x): return x["memory"]["gradients_bytes"] + x["memory"]["optimizer_state_bytes"]
for name, x in ((f"lora r={r}", lo), ("full", fu)):
    print(f"  {name:<12}{x['validation']['val_loss']:10.4f}{x['validation']['val_bits_per_char']:11.4f}"
          f"{x['trainable_parameters']:11d}{state(x) / MiB:8.3f} MiB{x['memory']['peak_tensor_bytes'] / MiB:9.2f} MiB"
          f"{1e3 * x['median_step_seconds']:7.1f} ms")
print(f"  lora vs full: trainable {lo['trainable_parameters'] / fu['trainable_parameters']:.4f}x, "
      f"gradient + optimizer bytes {state(lo) / state(fu):.4f}x, step time {lo['median_step_seconds'] / fu['median_step_seconds']:.3f}x; "
      f"validation loss {b['validation']['val_loss']:.4f} -> {lo['validation']['val_loss']:.4f} (lora), "
      f"{fu['validation']['val_loss']:.4f} (full)")
PY
