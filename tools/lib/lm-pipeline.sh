# The LM benchmarks' pipeline (sourced by tools/bench-lm.sh, bench-rss.sh, bench-allocator.sh):
# tt's transformer on the UTF-8 bytes of the Brown training text with AdamW(1e-3, wd 0.01), the
# model ../shared/reference/pytorch_gpt_bench.py trains in plain PyTorch.
#   lm_pipeline FILE NAME LAYERS SEQ BATCH STEPS THREADS RUNS_DIR
# LM_TEXT is the text it reads; lm_text_check fails with a message when it is missing.
LM_TEXT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/../shared/datasets/brown/brown_train.txt"

lm_text_check() {  # $1: the calling script's name
  [ -f "$LM_TEXT" ] || { echo "$1: $LM_TEXT not found (the shared datasets sit beside the repository)" >&2; exit 1; }
}

lm_pipeline() {
  cat > "$1" <<YAML
name: $2
seed: 0
data: {name: text, train: $LM_TEXT, tokenizer: bytes, seq_len: $4, shuffle_buffer: 256}
model: {name: transformer, vocab: 1024, d_model: 256, n_layers: $3, n_heads: 4, sample_tokens: 0}
optimizer: {name: adamw, lr: 1.0e-3, weight_decay: 0.01}
trainer: {batch_size: $5, max_steps: $6, threads: $7, progress: off}
output: {dir: $8, plots: false}
YAML
}
