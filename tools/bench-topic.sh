#!/usr/bin/env bash
# Topic-model speed and memory on this machine, tinytopics' default semantics.
#   tools/bench-topic.sh [--n N] [--m M] [--k K] [--avg A] [--threads "1 2"] [--epochs E]
#                        [--npy X.npy] [--set key=value ...] [--build DIR] [--repeats R]
# Prints, per thread count: seconds per epoch (median after the first), median step,
# peak tensor bytes, peak RSS, anonymous RSS at the end, and the last epoch loss. With
# --repeats R the thread counts run interleaved R times (t1 t2 t1 t2 ...: this machine's
# speed drifts between runs) and s/epoch is the median of the runs, their range beside it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; N=20000; M=5000; K=10; AVG=256; THREADS="1 2"; EPOCHS=3; NPY=""; SETS=(); REPEATS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --n) N="$2"; shift 2 ;; --m) M="$2"; shift 2 ;; --k) K="$2"; shift 2 ;; --avg) AVG="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;; --epochs) EPOCHS="$2"; shift 2 ;; --npy) NPY="$2"; shift 2 ;;
    --set) SETS+=("$2"); shift 2 ;; --build) BUILD="$2"; shift 2 ;; --repeats) REPEATS="$2"; shift 2 ;;
    *) echo "bench-topic: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || { echo "bench-topic: needs python3 for the table (apt-get install python3)"; exit 1; }
WORK="$(mktemp -d /tmp/tt-bench-topic-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
if [ -n "$NPY" ]; then
  DATA="{name: topic-npy, path: $NPY}"
else
  DATA="{name: topic-synthetic, n_docs: $N, n_terms: $M, k: $K, avg_doc_length: $AVG}"
fi
cat > "$WORK/p.yaml" <<YAML
name: bench-topic
data: $DATA
model: {name: topic, k: $K, corpus_loss: false}
optimizer: {name: adamw, lr: 0.05, weight_decay: 1.0e-5}
schedule: {name: cosine_warm_restarts, t0_epochs: 20, eta_min: 0.01}
trainer: {epochs: $EPOCHS, batch_size: 16, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
for r in $(seq 1 "$REPEATS"); do
  for t in $THREADS; do
    "$BUILD/bin/tt-run" -q "$WORK/p.yaml" trainer.threads=$t "${SETS[@]}" --run-dir "$WORK/runs/t$t-r$r" \
      2> "$WORK/t$t.log" || { cat "$WORK/t$t.log"; exit 1; }
  done
done
python3 - "$WORK/runs" "$THREADS" "${NPY:-synthetic n=$N m=$M}" "$K" "${SETS[*]:-}" "$REPEATS" <<'PY'
import json, statistics, sys
runs, threads, data, k, sets, repeats = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
print(f"topic model, {data}, k={k}, batch 16, AdamW + cosine warm restarts {sets}"
      + (f", {repeats} interleaved runs each" if repeats > 1 else ""))
print(f"{'threads':>8}{'s/epoch':>10}{'range':>14}{'ms/step':>10}{'peak tensors':>14}{'peak RSS':>11}{'anon RSS':>11}"
      f"{'epoch loss':>14}")
for t in threads:
    ss = [json.load(open(f"{runs}/t{t}-r{r}/summary.json")) for r in range(1, repeats + 1)]
    ep = [s["median_epoch_seconds"] for s in ss]
    s = ss[0]
    m = s["memory"]
    mib = lambda b: f"{b / 2**20:.1f} MiB"
    print(f"{t:>8}{statistics.median(ep):>10.3f}{f'{min(ep):.3f}-{max(ep):.3f}':>14}"
          f"{1e3 * statistics.median(x['median_step_seconds'] for x in ss):>10.3f}"
          f"{mib(m['peak_tensor_bytes']):>14}{mib(m['peak_rss_bytes']):>11}{mib(m['rss_anon_end_bytes']):>11}"
          f"{s['final_epoch_loss']:>14.2f}")
PY
