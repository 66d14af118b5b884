#!/usr/bin/env bash
# The tabular in-context learner on real tables, TabTune's three strategies:
#   1. pretrain the model on the synthetic prior (configs/tabular-pretrain.yaml), unless --pretrained RUN
#      names a finished pretraining run;
#   2. on ../shared/datasets/tabular/{iris,wine,breast_cancer}.csv (stratified 70/30, seed 0: the rows of
#      scikit-learn's train_test_split(stratify=y, random_state=0), as the baselines were measured on):
#      inference (the training split as context, no training), finetune (episodic full fine-tuning),
#      peft (LoRA on qkv, proj, fc1, fc2), each through tt-run with the configs/tabular-*.yaml files;
#   3. prints accuracy, ROC-AUC, log-loss, Brier score and ECE per dataset and strategy, beside the
#      logistic-regression accuracies of the shared datasets' README (0.978 / 1.000 / 0.959).
# With --memory it also runs configs/compare-tabular.yaml (memory vs support size, naive vs chunked).
#   tools/bench-tabular.sh [--pretrained RUN] [--pretrain-steps 2000] [--datasets "iris wine breast_cancer"]
#                          [--memory] [--out DIR] [--build DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; PRE=""; PRE_STEPS=""; SETS="iris wine breast_cancer"; MEMORY=0; OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pretrained) PRE="$2"; shift 2 ;; --pretrain-steps) PRE_STEPS="$2"; shift 2 ;;
    --datasets) SETS="$2"; shift 2 ;; --memory) MEMORY=1; shift ;; --out) OUT="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    *) echo "bench-tabular: unknown argument $1" >&2; exit 2 ;;
  esac
done
DATA="$ROOT/../shared/datasets/tabular"
[ -d "$DATA" ] || { echo "bench-tabular: $DATA not found (../shared/datasets beside the repository)"; exit 1; }
command -v python3 >/dev/null || { echo "bench-tabular: needs python3 for the table (apt-get install python3)"; exit 1; }
TT="$BUILD/bin/tt-run"
[ -x "$TT" ] || { echo "bench-tabular: $TT not built (tools/setup.sh build)"; exit 1; }
OUT="${OUT:-$(mktemp -d /tmp/tt-bench-tabular-XXXXXX)}"
mkdir -p "$OUT"
cd "$ROOT"

if [ -z "$PRE" ]; then
  PRE="$OUT/pretrain"
  echo "bench-tabular: pretraining on the prior -> $PRE"
  "$TT" configs/tabular-pretrain.yaml ${PRE_STEPS:+trainer.max_steps=$PRE_STEPS} \
    ${PRE_STEPS:+trainer.eval_every=$PRE_STEPS} ${PRE_STEPS:+trainer.checkpoint_every=$PRE_STEPS} \
    --run-dir "$PRE" -q
fi
[ -d "$PRE/checkpoints" ] || { echo "bench-tabular: $PRE is not a pretraining run (no checkpoints/)"; exit 1; }

for d in $SETS; do
  [ -f "$DATA/$d.csv" ] || { echo "bench-tabular: $DATA/$d.csv not found"; exit 1; }
  for s in inference finetune peft; do
    "$TT" "configs/tabular-$s.yaml" "data.path=$DATA/$d.csv" "model.init_from=$PRE" \
      --run-dir "$OUT/$d-$s" -q > "$OUT/$d-$s.log" 2>&1 || { cat "$OUT/$d-$s.log"; exit 1; }
  done
done

python3 - "$OUT" $SETS <<'PY'
import json, sys
out, sets = sys.argv[1], sys.argv[2:]
lr = {"iris": 0.978, "wine": 1.000, "breast_cancer": 0.959}
print(f"{'dataset':<14} {'strategy':<10} {'accuracy':>8} {'LR acc':>7} {'ROC-AUC':>8} {'log-loss':>9} {'Brier':>7} {'ECE':>7} {'step ms':>8}")
for d in sets:
    for s in ("inference", "finetune", "peft"):
        sm = json.load(open(f"{out}/{d}-{s}/summary.json"))
        v = sm["validation"]
        ms = sm.get("median_step_seconds") or 0
        ms = f"{ms * 1e3:8.1f}" if ms > 0 else f"{'-':>8}"
        print(f"{d:<14} {s:<10} {v['val_accuracy']:8.3f} {lr.get(d, float('nan')):7.3f} {v['val_roc_auc']:8.3f} "
              f"{v['val_log_loss']:9.4f} {v['val_brier']:7.4f} {v['val_ece']:7.4f} {ms}")
PY

if [ "$MEMORY" = 1 ]; then
  "$TT" configs/compare-tabular.yaml --run-dir "$OUT/compare"
fi
echo "bench-tabular: runs in $OUT"
