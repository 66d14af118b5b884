#!/usr/bin/env bash
# Pretrains the shipped tabular in-context learner (models/tabular-icl/pretrained/small.safetensors)
# from scratch, in the five stages that made it, and exports it as safetensors:
#   1. configs/tabular-pretrain.yaml as committed (seed 0, 6000-step cosine schedule from lr 2e-3);
#      its checkpoint at step 5000 goes on;
#   2. 3000 steps from it (seed 2) on a prior whose feature-function targets depend on up to 32
#      features instead of 8 (data.max_informative=32), lr 8e-4 (50 warm-up steps) cosine to 5e-5;
#   3. 4000 steps more (seed 3), the same prior, lr 5e-4 cosine to 3e-5;
#   4. 4000 steps more (seed 21) on a prior where 30% of the tables have classes that cause their
#      features (data.class_cause_share=0.3: correlated features carrying the same evidence),
#      lr 3e-4 (50 warm-up steps) cosine to 2e-5;
#   5. from it (seed 22), half the tables so drawn (data.class_cause_share=0.5), lr 2e-4 (50 warm-up
#      steps) in a 2500-step cosine to 2e-5; its checkpoint at step 1000 is the model.
# About 3.3 hours on 2 cores (1.4 to 2.4 steps a second); nothing else should run beside it, as every
# stage uses both cores. Each stage is an ordinary tt-run run directory under OUT (stage1 ...
# stage5): a stage that finished is not run again, so an interrupted pretraining goes on where it
# stopped (an unfinished stage restarts from its beginning).
#   tools/pretrain-tabular.sh [--out DIR] [--build DIR] [--quick]
# --out: where the runs and OUT/small.safetensors go (default runs/tabular-pretrain-stages).
# --quick: 40 / 20 / 20 / 20 / 40 steps, to try the mechanics in a minute (the model is useless).
# To ship the result: copy OUT/small.safetensors to models/tabular-icl/pretrained/ and write its
# checksum (cd models/tabular-icl/pretrained && sha256sum small.safetensors > small.safetensors.sha256).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; OUT="$ROOT/runs/tabular-pretrain-stages"; QUICK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "pretrain-tabular: --out needs a directory" >&2; exit 2; }; OUT="$2"; shift 2 ;;
    --build) [ $# -ge 2 ] || { echo "pretrain-tabular: --build needs a directory" >&2; exit 2; }; BUILD="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "pretrain-tabular: unknown argument $1 (--out DIR, --build DIR, --quick)" >&2; exit 2 ;;
  esac
done
TT="$BUILD/bin/tt-run"
[ -x "$TT" ] || { echo "pretrain-tabular: $TT not built (tools/setup.sh build)" >&2; exit 1; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$ROOT"

if [ "$QUICK" = 1 ]; then S1=40; KEEP1=20; S2=20; S3=20; S4=20; S5=40; KEEP5=20; EVERY="trainer.eval_every=20 trainer.checkpoint_every=20"
else S1=6000; KEEP1=5000; S2=3000; S3=4000; S4=4000; S5=2500; KEEP5=1000; EVERY=""; fi
ckpt() { printf '%s/checkpoints/step-%08d.pt' "$1" "$2"; }

stage() {  # stage NAME FINAL_STEP ARGS...: runs tt-run unless NAME's final checkpoint exists
  local name="$1" final="$2"; shift 2
  if [ -f "$(ckpt "$OUT/$name" "$final")" ]; then
    echo "pretrain-tabular: $name already finished ($(ckpt "$OUT/$name" "$final"))"
    return
  fi
  rm -rf "$OUT/$name"
  echo "pretrain-tabular: $name -> $OUT/$name"
  "$TT" configs/tabular-pretrain.yaml "$@" $EVERY --run-dir "$OUT/$name"
  [ -f "$(ckpt "$OUT/$name" "$final")" ] ||
    { echo "pretrain-tabular: $name ended without $(ckpt "$OUT/$name" "$final")" >&2; exit 1; }
}

stage stage1 "$KEEP1" trainer.max_steps=$S1 trainer.keep_checkpoints=0
stage stage2 "$S2" seed=2 "model.init_from=$(ckpt "$OUT/stage1" "$KEEP1")" data.max_informative=32 \
  optimizer.lr=8e-4 schedule.warmup_steps=50 schedule.min_lr=5e-5 trainer.max_steps=$S2
stage stage3 "$S3" seed=3 "model.init_from=$(ckpt "$OUT/stage2" "$S2")" data.max_informative=32 \
  optimizer.lr=5e-4 schedule.warmup_steps=50 schedule.min_lr=3e-5 trainer.max_steps=$S3
stage stage4 "$S4" seed=21 "model.init_from=$(ckpt "$OUT/stage3" "$S3")" data.max_informative=32 \
  data.class_cause_share=0.3 optimizer.lr=3e-4 schedule.warmup_steps=50 schedule.min_lr=2e-5 trainer.max_steps=$S4
stage stage5 "$KEEP5" seed=22 "model.init_from=$(ckpt "$OUT/stage4" "$S4")" data.max_informative=32 \
  data.class_cause_share=0.5 optimizer.lr=2e-4 schedule.warmup_steps=50 schedule.min_lr=2e-5 trainer.max_steps=$S5 \
  trainer.keep_checkpoints=0
"$TT" --export safetensors "$(ckpt "$OUT/stage5" "$KEEP5")" --out "$OUT/small.safetensors"
echo "pretrain-tabular: $OUT/small.safetensors ($(sha256sum "$OUT/small.safetensors" | cut -d' ' -f1))"
