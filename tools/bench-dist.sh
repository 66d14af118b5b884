#!/usr/bin/env bash
# Data-parallel training on this machine: 2 ranks x 1 thread against 1 rank x 1 thread, the
# same per-rank batch (tt-run --nproc 2, Gloo on loopback).
#   LM:    a 4-layer d_model 256 transformer on the Brown corpus (../shared/datasets/brown) or,
#          without it, generated text; batch 16 x seq 128 per rank.
#   topic: a synthetic .npy (tt-data synth-topics), three runs: 1 rank; 2 ranks with L's
#          gradient summed densely every step (as tinytopics/Accelerate do it); 2 ranks with
#          trainer.dist_rows: owned (each rank keeps its documents' rows of L, only F is
#          all-reduced).
# Prints per run: throughput (examples/s from the median step), the ratio to 1 rank,
# communication seconds per step (median, rank 0), and the loss reached.
#   tools/bench-dist.sh [--lm-steps 40] [--topic-n 20000] [--topic-m 2000] [--topic-epochs 2]
#                       [--build DIR] [--only lm|topic]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; LM_STEPS=40; TN=20000; TM=2000; TE=2; ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --lm-steps) LM_STEPS="$2"; shift 2 ;; --topic-n) TN="$2"; shift 2 ;; --topic-m) TM="$2"; shift 2 ;;
    --topic-epochs) TE="$2"; shift 2 ;; --build) BUILD="$2"; shift 2 ;; --only) ONLY="$2"; shift 2 ;;
    *) echo "bench-dist: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || { echo "bench-dist: needs python3 for the table (apt-get install python3)"; exit 1; }
TT_RUN="$BUILD/bin/tt-run"; TT_DATA="$BUILD/bin/tt-data"
WORK="$(mktemp -d /tmp/tt-bench-dist-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT
run() {  # tag, nproc, yaml, overrides...
  local tag="$1" np="$2" yaml="$3"; shift 3
  local launch=()
  [ "$np" -gt 1 ] && launch=(--nproc "$np")
  "$TT_RUN" "${launch[@]}" "$yaml" "$@" -q --run-dir "$WORK/$tag" > "$WORK/$tag.log" 2>&1 ||
    { echo "bench-dist: run $tag failed:"; cat "$WORK/$tag.log"; exit 1; }
}

if [ "$ONLY" != topic ]; then
  DOCS="$ROOT/../shared/datasets/brown/brown_docs.tsv"
  if [ -f "$DOCS" ]; then
    cut -f3 "$DOCS" > "$WORK/lm.txt"; LM_DATA="Brown corpus"
  else
    for i in $(seq 1 20000); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done > "$WORK/lm.txt"
    LM_DATA="generated text"
  fi
  cat > "$WORK/lm.yaml" <<YAML
name: bench-dist-lm
seed: 0
data: {name: text, train: $WORK/lm.txt, tokenizer: bytes, seq_len: 128, shuffle_buffer: 512}
model: {name: transformer, vocab: 256, d_model: 256, n_layers: 4, n_heads: 4, sample_tokens: 0}
optimizer: {name: adamw, lr: 1.0e-3}
trainer: {batch_size: 16, max_steps: $LM_STEPS, threads: 1, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
  echo "LM ($LM_DATA): 1 rank, then 2 ranks ($LM_STEPS steps each)..." >&2
  run lm1 1 "$WORK/lm.yaml"
  run lm2 2 "$WORK/lm.yaml"
fi
if [ "$ONLY" != lm ]; then
  echo "topic: $TN x $TM .npy; 1 rank, 2 ranks (dense L all-reduce), 2 ranks (owned rows)..." >&2
  "$TT_DATA" synth-topics --n "$TN" --m "$TM" --k 10 --avg-doc-length 150 --seed 0 --out "$WORK/synth" > /dev/null
  cat > "$WORK/topic.yaml" <<YAML
name: bench-dist-topic
seed: 0
data: {name: topic-npy, path: $WORK/synth/X.npy}
model: {name: topic, k: 10}
optimizer: {name: adamw, lr: 0.05, weight_decay: 1.0e-5}
schedule: {name: cosine_warm_restarts, t0_epochs: 20, eta_min: 0.01}
trainer: {batch_size: 256, epochs: $TE, threads: 1, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
  run topic1 1 "$WORK/topic.yaml"
  run topic2 2 "$WORK/topic.yaml"
  run topic2owned 2 "$WORK/topic.yaml" trainer.dist_rows=owned
fi
python3 - "$WORK" "$ONLY" <<'PY'
import json, os, sys
work, only = sys.argv[1], sys.argv[2]
def load(tag):
    s = json.load(open(f"{work}/{tag}/summary.json"))
    comm = [json.loads(l).get("comm_seconds") for l in open(f"{work}/{tag}/metrics.jsonl") if '"comm_seconds"' in l]
    comm = sorted(c for c in comm if c is not None)
    world = s.get("world_size", 1)
    thr = world * s["batch_size"] / s["median_step_seconds"]
    return s, thr, (comm[len(comm) // 2] if comm else 0.0)
rows = []
def table(title, tags, base):
    _, b, _ = load(base)
    print(f"\n{title}")
    print(f"{'run':<34} {'ranks':>5} {'examples/s':>11} {'ratio':>6} {'step ms':>8} {'comm ms/step':>13} {'loss':>10}  {'corpus loss':>11}")
    for tag, label in tags:
        s, t, c = load(tag)
        loss = s.get("final_epoch_loss", s["final_loss"])
        corpus = s.get("model_metrics", {}).get("corpus_loss", s.get("validation", {}).get("loss", float("nan")))
        print(f"{label:<34} {s.get('world_size', 1):>5} {t:>11.1f} {t / b:>6.2f} {1e3 * s['median_step_seconds']:>8.1f} "
              f"{1e3 * c:>13.2f} {loss:>10.5g}  {corpus:>11.6g}")
if only != "topic":
    table("LM, batch 16 x 128 tokens per rank, 1 thread per rank", [("lm1", "1 rank"), ("lm2", "2 ranks, DDP (Gloo)")], "lm1")
if only != "lm":
    table("topic model, batch 256 documents per rank, 1 thread per rank",
          [("topic1", "1 rank"), ("topic2", "2 ranks, L gradient all-reduced"),
           ("topic2owned", "2 ranks, owned rows (F all-reduced)")], "topic1")
print(f"\nload average at the end: {os.getloadavg()[0]:.2f} (2 cores; other work on the machine slows both)")
PY
