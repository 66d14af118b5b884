#!/usr/bin/env bash
# tt's topic model beside tinytopics itself, on the same .npy, in one run.
#   tools/bench-topic-vs-tinytopics.sh [--n 20000] [--m 5000] [--k 10] [--avg 256] [--epochs 5]
#                                      [--threads "1 2"] [--rounds 2] [--data DIR] [--set key=value ...]
#                                      [--build DIR]
# 1. The corpus: DIR/X.npy (with true_F.npy) when --data names a folder that has one, else written
#    there (or in a temporary folder) by tinytopics' own generator through
#    ../shared/reference/tinytopics/bench_tinytopics.py gen (seed 42).
# 2. Rounds, interleaved (this machine's speed drifts between runs): tinytopics 0.9.2 fitting from
#    the file (NumpyDiskDataset, 1 thread, Debian's python3-torch), then tt-run on the same file
#    (topic-npy) for each thread count. Both use tinytopics' defaults: k, batch 16, AdamW lr 0.05,
#    weight decay 1e-5, cosine warm restarts (T_0 20 epochs, eta_min 0.01).
# 3. Prints per side the seconds per epoch (the median after the first epoch; the median over the
#    rounds, their range beside it), tinytopics' time over tt's, the last epoch's loss, the fitted
#    topics' mean cosine to the true ones and the peak RSS.
# tinytopics' Python dependencies are Debian packages, installed with apt-get when missing (as
# root, or with sudo).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REF="$ROOT/../shared/reference/tinytopics"
BUILD="$ROOT/build"; N=20000; M=5000; K=10; AVG=256; EPOCHS=5; THREADS="1 2"; ROUNDS=2; DATA=""; SETS=()
need() { [ $# -ge 2 ] || { echo "bench-topic-vs-tinytopics: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --n) need "$@"; N="$2"; shift 2 ;; --m) need "$@"; M="$2"; shift 2 ;; --k) need "$@"; K="$2"; shift 2 ;;
    --avg) need "$@"; AVG="$2"; shift 2 ;; --epochs) need "$@"; EPOCHS="$2"; shift 2 ;;
    --threads) need "$@"; THREADS="$2"; shift 2 ;; --rounds) need "$@"; ROUNDS="$2"; shift 2 ;;
    --data) need "$@"; DATA="$2"; shift 2 ;; --set) need "$@"; SETS+=("$2"); shift 2 ;;
    --build) need "$@"; BUILD="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-topic-vs-tinytopics: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
for v in "$N" "$M" "$K" "$AVG" "$EPOCHS" "$ROUNDS" $THREADS; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "bench-topic-vs-tinytopics: '$v' is not a positive whole number" >&2; exit 2; }
done
[ "$EPOCHS" -ge 2 ] || { echo "bench-topic-vs-tinytopics: --epochs must be at least 2 (the first epoch is not timed)" >&2; exit 2; }
[ -f "$REF/bench_tinytopics.py" ] || { echo "bench-topic-vs-tinytopics: $REF/bench_tinytopics.py not found (../shared/reference beside the repository)" >&2; exit 1; }
[ -x "$BUILD/bin/tt-run" ] || { echo "bench-topic-vs-tinytopics: $BUILD/bin/tt-run not found: build tt first (tools/setup.sh build)" >&2; exit 1; }

PY=/usr/bin/python3  # Debian's Python, where python3-torch installs torch
if ! "$PY" -c 'import torch, numpy, scipy, sklearn, tqdm, matplotlib, skimage' 2>/dev/null; then
  PKGS="python3-torch python3-numpy python3-tqdm python3-matplotlib python3-sklearn python3-scipy python3-skimage"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "bench-topic-vs-tinytopics: installing tinytopics' dependencies from Debian: $PKGS" >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $PKGS >&2 ||
    { $SUDO apt-get update -q >&2 && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $PKGS >&2; } ||
    { echo "bench-topic-vs-tinytopics: could not install $PKGS" >&2; exit 1; }
fi
export PYTHONPATH="$REF:$REF/shim"

WORK="$(mktemp -d /tmp/tt-bench-tinytopics-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
[ -n "$DATA" ] || DATA="$WORK/data"
if [ ! -f "$DATA/X.npy" ]; then
  echo "bench-topic-vs-tinytopics: writing a $N x $M corpus (k $K, $AVG words a document) to $DATA with tinytopics' generator" >&2
  "$PY" "$REF/bench_tinytopics.py" gen --n "$N" --m "$M" --k "$K" --avg-doc-length "$AVG" --seed 42 --out "$DATA" > "$WORK/gen.log" 2>&1 ||
    { cat "$WORK/gen.log" >&2; exit 1; }
fi
DATA="$(cd "$DATA" && pwd)"
TRUE_F=""; [ -f "$DATA/true_F.npy" ] && TRUE_F=", true_F: $DATA/true_F.npy"
cat > "$WORK/p.yaml" <<YAML
name: topic-vs-tinytopics
data: {name: topic-npy, path: $DATA/X.npy$TRUE_F}
model: {name: topic, k: $K, corpus_loss: false}
optimizer: {name: adamw, lr: 0.05, weight_decay: 1.0e-5}
schedule: {name: cosine_warm_restarts, t0_epochs: 20, eta_min: 0.01}
trainer: {epochs: $EPOCHS, batch_size: 16, progress: off}
output: {dir: $WORK/runs, plots: false}
YAML
for r in $(seq 1 "$ROUNDS"); do
  echo "bench-topic-vs-tinytopics: round $r of $ROUNDS: tinytopics" >&2
  "$PY" "$REF/bench_tinytopics.py" fit --data "$DATA" --mode disk --k "$K" --epochs "$EPOCHS" --seed 123 --threads 1 \
    --json "$WORK/tinytopics-r$r.json" > "$WORK/tinytopics-r$r.log" 2>&1 || { cat "$WORK/tinytopics-r$r.log" >&2; exit 1; }
  for t in $THREADS; do
    echo "bench-topic-vs-tinytopics: round $r of $ROUNDS: tt, $t thread(s)" >&2
    "$BUILD/bin/tt-run" -q "$WORK/p.yaml" trainer.threads="$t" "${SETS[@]}" --run-dir "$WORK/runs/t$t-r$r" \
      2> "$WORK/tt-t$t-r$r.log" || { cat "$WORK/tt-t$t-r$r.log" >&2; exit 1; }
  done
done
CPU="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
"$PY" - "$WORK" "$THREADS" "$ROUNDS" "$DATA" "$K" "$EPOCHS" "$CPU" "${SETS[*]:-}" <<'PY'
import json, statistics, sys
work, threads, rounds, data, k, epochs, cpu, sets = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), *sys.argv[4:]
R = range(1, rounds + 1)
tiny = [json.load(open(f"{work}/tinytopics-r{r}.json")) for r in R]
print(f"topic model beside tinytopics 0.9.2: {data}/X.npy ({tiny[0]['n']} x {tiny[0]['m']}), k {k}, batch 16, "
      f"{epochs} epochs, {rounds} interleaved round(s); CPU: {cpu} {sets}")
print(f"{'':<26}{'s/epoch':>9}{'range':>15}{'tinytopics/tt':>15}{'last epoch loss':>17}{'cosine':>8}{'peak RSS':>11}")
t_med = statistics.median(x["epoch_seconds_median_after_first"] for x in tiny)
def row(name, ep, loss, cos, rss):
    rng = f"{min(ep):.3f}-{max(ep):.3f}"
    med = statistics.median(ep)
    ratio = f"{t_med / med:.1f}x" if name != "tinytopics (1 thread)" else ""
    cos_s = f"{cos:.4f}" if cos is not None else "-"
    print(f"{name:<26}{med:>9.3f}{rng:>15}{ratio:>15}{loss:>17.2f}{cos_s:>8}{rss:>8.0f} MiB")
row("tinytopics (1 thread)", [x["epoch_seconds_median_after_first"] for x in tiny], tiny[0]["final_loss"],
    tiny[0].get("aligned_cosine_mean"), max(x["peak_rss_mib_after_fit"] for x in tiny))
for t in threads:
    ss = [json.load(open(f"{work}/runs/t{t}-r{r}/summary.json")) for r in R]
    s = ss[0]
    row(f"tt ({t} thread{'s' if t != '1' else ''})", [x["median_epoch_seconds"] for x in ss], s["final_epoch_loss"],
        s.get("model_metrics", {}).get("aligned_cosine_mean"), max(x["memory"]["peak_rss_bytes"] for x in ss) / 2**20)
PY
