#!/usr/bin/env bash
# Sparse vs dense batches of the topic model on the Brown corpus (500 documents): the
# vocabulary is grown with max_terms, so n*m grows while the non-zeros grow much less. The
# sparse path's epoch time should follow the non-zeros, the dense path's n*m.
#   tools/bench-topic-sparse.sh [--terms "1000 4000 16000 0"] [--epochs 4] [--threads 1] [--batch 16]
#                               [--build DIR]
# (max_terms 0 keeps every term with min_df 1: about 42k.) Both paths also pay per step for
# the dense k x m topic-term matrix F (softmax, gradient, AdamW): n/batch x k x m per epoch,
# which larger batches amortize.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; TERMS="1000 4000 16000 0"; EPOCHS=4; THREADS=1; BATCH=16
while [ $# -gt 0 ]; do
  case "$1" in
    --terms) TERMS="$2"; shift 2 ;; --epochs) EPOCHS="$2"; shift 2 ;; --threads) THREADS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    *) echo "bench-topic-sparse: unknown argument $1" >&2; exit 2 ;;
  esac
done
DOCS="$ROOT/../shared/datasets/brown/brown_docs.tsv"
[ -f "$DOCS" ] || { echo "bench-topic-sparse: $DOCS not found (../shared/datasets beside the repository)"; exit 1; }
WORK="$(mktemp -d /tmp/tt-bench-sparse-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
for t in $TERMS; do
  for f in sparse dense; do
    cat > "$WORK/p.yaml" <<YAML
name: bench-topic-sparse
data: {name: topic-text, path: $DOCS, format: tsv, min_df: 1, max_terms: $t, batch_format: $f}
model: {name: topic, k: 15, corpus_loss: false}
optimizer: {name: adamw, lr: 0.05, weight_decay: 1.0e-5}
schedule: {name: cosine_warm_restarts, t0_epochs: 20, eta_min: 0.01}
trainer: {epochs: $EPOCHS, batch_size: $BATCH, threads: $THREADS, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
    "$BUILD/bin/tt-run" -q "$WORK/p.yaml" --run-dir "$WORK/runs/$t-$f" 2> "$WORK/$t-$f.log" || { cat "$WORK/$t-$f.log"; exit 1; }
  done
done
python3 - "$WORK" "$TERMS" "$BATCH" <<'PY'
import json, re, sys
work, terms, batch = sys.argv[1], sys.argv[2].split(), sys.argv[3]
print(f"topic model on Brown (500 documents), k=15, batch {batch}: median seconds per epoch after the first")
print(f"{'terms':>8}{'n*m':>12}{'non-zeros':>11}{'sparse s':>10}{'dense s':>10}{'dense/sparse':>13}")
for t in terms:
    s = {f: json.load(open(f"{work}/runs/{t}-{f}/summary.json")) for f in ("sparse", "dense")}
    log = open(f"{work}/runs/{t}-sparse/log.txt").read()
    m = re.search(r"(\d+) docs x (\d+) terms, (\d+) non-zeros", log)
    n, mm, nnz = (int(x) for x in m.groups()) if m else (0, 0, 0)
    sp, de = s["sparse"]["median_epoch_seconds"], s["dense"]["median_epoch_seconds"]
    print(f"{t if t != '0' else 'all':>8}{n * mm:>12}{nnz:>11}{sp:>10.4f}{de:>10.4f}{de / sp:>13.2f}")
PY
