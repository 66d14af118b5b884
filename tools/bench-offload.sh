#!/usr/bin/env bash
# offload (target: disk) on the transformer LM against the same run without it, with AdamW and
# with adam8bit, the same data, seed and order: loss after N steps (equal: the arithmetic is the
# wrapped optimizer's), optimizer state in tensor memory and in the file, peak tensor bytes and
# peak RSS (tt's meter), median step and optimizer-step time, back to back.
#   tools/bench-offload.sh [--steps 30] [--d-model 256] [--layers 4] [--seq 128] [--batch 8]
#                          [--threads 2] [--build DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; STEPS=30; DMODEL=256; LAYERS=4; SEQ=128; BATCH=8; THREADS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;; --d-model) DMODEL="$2"; shift 2 ;; --layers) LAYERS="$2"; shift 2 ;;
    --seq) SEQ="$2"; shift 2 ;; --batch) BATCH="$2"; shift 2 ;; --threads) THREADS="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    *) echo "bench-offload: unknown argument $1" >&2; exit 2 ;;
  esac
done
DATA="$ROOT/../shared/datasets/brown"
[ -f "$DATA/brown_train.txt" ] || { echo "bench-offload: $DATA/brown_train.txt not found (../shared/datasets beside the repository)"; exit 1; }
command -v python3 >/dev/null || { echo "bench-offload: needs python3 for the table (apt-get install python3)"; exit 1; }
WORK="$(mktemp -d /tmp/tt-bench-offload-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/p.yaml" <<YAML
name: bench-offload
seed: 0
data: {name: text, train: $DATA/brown_train.txt, tokenizer: bytes, seq_len: $SEQ, shuffle_buffer: 256}
model: {name: transformer, vocab: 256, d_model: $DMODEL, n_layers: $LAYERS, n_heads: 4, sample_tokens: 0}
optimizer: {name: adamw, lr: 1e-3, weight_decay: 0.01}
trainer: {batch_size: $BATCH, max_steps: $STEPS, threads: $THREADS, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
for v in adamw adamw+offload adam8bit adam8bit+offload; do
  case $v in
    adamw) P="[]" ;; adamw+offload) P="[offload]" ;;
    adam8bit) P="[{name: adam8bit, min_8bit_size: 4096}]" ;; adam8bit+offload) P="[{name: adam8bit, min_8bit_size: 4096}, offload]" ;;
  esac
  "$BUILD/bin/tt-run" -q "$WORK/p.yaml" "plugins=$P" --run-dir "$WORK/$v" 2> "$WORK/$v.log" || { cat "$WORK/$v.log"; exit 1; }
done
python3 - "$WORK" "$STEPS" <<'PY'
import json, sys
work, steps = sys.argv[1], int(sys.argv[2])
MiB = 2**20
def run(v):
    s = json.load(open(f"{work}/{v}/summary.json"))
    f = [json.loads(l).get("offload_state_file_bytes") for l in open(f"{work}/{v}/metrics.jsonl")]
    f = [x for x in f if x]
    m = s["memory"]
    return dict(loss=s["final_loss"], state=m["optimizer_state_bytes"], file=f[0] if f else 0,
                peak=m["peak_tensor_bytes"], rss=m["peak_rss_bytes"], step=s["median_step_seconds"],
                opt=s["median_optimizer_seconds"], params=m["parameters_bytes"] / 4)
r = {v: run(v) for v in ("adamw", "adamw+offload", "adam8bit", "adam8bit+offload")}
print(f"transformer LM, {int(r['adamw']['params'])} parameters, {steps} steps (tt's meter; RSS from the kernel)")
print(f"  {'variant':<18}{'loss':>9}{'opt state':>12}{'state file':>12}{'peak tensor':>13}{'peak RSS':>11}{'step':>9}{'opt step':>10}")
for v, x in r.items():
    print(f"  {v:<18}{x['loss']:9.5f}{x['state'] / MiB:9.2f} MiB{x['file'] / MiB:9.2f} MiB{x['peak'] / MiB:10.2f} MiB"
          f"{x['rss'] / MiB:8.1f} MiB{1e3 * x['step']:7.1f} ms{1e3 * x['opt']:7.2f} ms")
for base in ("adamw", "adam8bit"):
    a, b = r[base], r[base + "+offload"]
    print(f"  {base}+offload vs {base}: loss {'equal' if a['loss'] == b['loss'] else 'differs by %.2e' % abs(a['loss'] - b['loss'])}, "
          f"peak tensor {(b['peak'] - a['peak']) / MiB:+.2f} MiB (state {a['state'] / MiB:.2f} MiB), "
          f"peak RSS {(b['rss'] - a['rss']) / MiB:+.1f} MiB, step {b['step'] / a['step']:.3f}x, optimizer step {b['opt'] / a['opt']:.2f}x")
PY
