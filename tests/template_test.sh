#!/usr/bin/env bash
# Installs tt into a temporary prefix, builds plugins/template and models/template against the
# installed CMake package exactly as a user would, and runs pipelines that name them.
set -euo pipefail
BUILD="$1"
SRC="$2"
WORK="$(mktemp -d /tmp/tt-template-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

cmake --install "$BUILD" --prefix "$WORK/prefix" > "$WORK/install.log"
# The guides the templates point to are installed with them.
for doc in README.md docs/plugins.md docs/models.md docs/export.md; do
  cmp -s "$SRC/$doc" "$WORK/prefix/share/doc/tt/$doc" || { echo "FAIL: $doc is not installed to share/doc/tt"; exit 1; }
done

# The installed tabular configs start from the installed pretrained model, from any folder (the
# table given on the command line, as a user's own would be: three classes apart in two features).
mkdir "$WORK/elsewhere"
awk 'BEGIN { print "x1,x2,label"; for (i = 0; i < 90; i++) { c = i % 3; printf "%.3f,%.3f,%s\n", 2 * c + (i % 7) / 10, \
  (i % 5) / 10 - c, (c == 0 ? "a" : c == 1 ? "b" : "c") } }' > "$WORK/elsewhere/table.csv"
(cd "$WORK/elsewhere" && "$WORK/prefix/bin/tt-run" -q "$WORK/prefix/share/tt/configs/tabular-inference.yaml" \
  data.path=table.csv output.dir="$WORK/runs" output.run_name=tabular) > "$WORK/tabular.log" 2>&1 ||
  { cat "$WORK/tabular.log"; echo "FAIL: the installed tabular-inference config did not run from another folder"; exit 1; }
grep -qF "init_from: $WORK/prefix/share/tt/models/tabular-icl/pretrained/small.safetensors" \
  "$WORK/runs/tabular/pipeline.yaml" || { cat "$WORK/runs/tabular/pipeline.yaml"; echo "FAIL: not the installed model"; exit 1; }
grep -q '"status": "completed"' "$WORK/runs/tabular/summary.json" || { cat "$WORK/tabular.log"; exit 1; }
# An installed tt-run points at the installed example pipelines, not a checkout's configs/.
(cd "$WORK/elsewhere" && "$WORK/prefix/bin/tt-run" no-such.yaml) > "$WORK/missing.log" 2>&1 && exit 1
grep -qF "The examples are in $WORK/prefix/share/tt/configs/, e.g. $WORK/prefix/share/tt/configs/quickstart.yaml" \
  "$WORK/missing.log" || { cat "$WORK/missing.log"; echo "FAIL: the hint does not name the installed configs"; exit 1; }
# Staged for a package (DESTDIR): the staged configs name the model where it will be installed.
DESTDIR="$WORK/stage" cmake --install "$BUILD" --prefix /opt/tt > "$WORK/stage.log"
grep -qF "init_from: /opt/tt/share/tt/models/tabular-icl/pretrained/small.safetensors" \
  "$WORK/stage/opt/tt/share/tt/configs/tabular-inference.yaml" || { echo "FAIL: the staged config's init_from"; exit 1; }
test -f "$WORK/stage/opt/tt/share/tt/models/tabular-icl/pretrained/small.safetensors"

cp -r "$WORK/prefix/share/tt/plugin-template" "$WORK/my-plugin"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# The build tree is a CMake package as well (tt_DIR=<build>): a module builds against it without
# an install, and the build's tt-run loads it.
cp -r "$WORK/prefix/share/tt/plugin-template" "$WORK/from-build"
cmake -S "$WORK/from-build" -B "$WORK/from-build/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -Dtt_DIR="$BUILD" \
  "${launcher[@]}" > "$WORK/from-build-configure.log" 2>&1 ||
  { cat "$WORK/from-build-configure.log"; echo "FAIL: the build tree's ttConfig.cmake"; exit 1; }
cmake --build "$WORK/from-build/build" > "$WORK/from-build.log" || { cat "$WORK/from-build.log"; exit 1; }
test -f "$WORK/from-build/build/lib/tt/tt_plugin_grad-stats.so"
cmake -S "$WORK/my-plugin" -B "$WORK/my-plugin/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" "${launcher[@]}" > "$WORK/configure.log"
cmake --build "$WORK/my-plugin/build" > "$WORK/build.log" || { cat "$WORK/build.log"; exit 1; }
PLUGIN_DIR="$WORK/my-plugin/build/lib/tt"
test -f "$PLUGIN_DIR/tt_plugin_grad-stats.so"

cat > "$WORK/pipeline.yaml" <<YAML
name: template-check
data: {name: topic-synthetic, n_docs: 64, n_terms: 50, k: 4}
model: {name: topic, k: 4}
plugins:
  - {name: grad-stats, every: 2}
trainer: {batch_size: 16, max_steps: 6, threads: 1, progress: off}
output: {dir: $WORK/runs, run_name: r, plots: false}
YAML

# Without the plugin directory on the path, the pipeline is refused with an explanation.
if "$WORK/prefix/bin/tt-run" -q "$WORK/pipeline.yaml" > "$WORK/refused.log" 2>&1; then
  echo "FAIL: pipeline naming grad-stats ran without TT_PLUGIN_PATH"; exit 1
fi
grep -q "unknown plugin 'grad-stats'" "$WORK/refused.log" || { cat "$WORK/refused.log"; exit 1; }

TT_PLUGIN_PATH="$PLUGIN_DIR" "$WORK/prefix/bin/tt-run" "$WORK/pipeline.yaml"
TT_PLUGIN_PATH="$WORK/from-build/build/lib/tt" "$BUILD/bin/tt-run" -q "$WORK/pipeline.yaml" output.run_name=from-build ||
  { echo "FAIL: the module built against the build tree did not run"; exit 1; }
grep -q '"grad_l2"' "$WORK/runs/from-build/metrics.jsonl" || { echo "FAIL: no grad_l2 from the build tree's module"; exit 1; }
# The template's own pipeline, run from its folder as its first lines say.
(cd "$WORK/my-plugin" && TT_PLUGIN_PATH="$PLUGIN_DIR" "$WORK/prefix/bin/tt-run" -q pipeline.yaml trainer.max_steps=4 \
  output.run_name=shipped > "$WORK/shipped.log" 2>&1) || { cat "$WORK/shipped.log"; echo "FAIL: the template's pipeline.yaml"; exit 1; }
grep -q '"grad_l2"' "$WORK/my-plugin/runs/shipped/metrics.jsonl" || { echo "FAIL: no grad_l2 from the template's pipeline"; exit 1; }
TT_PLUGIN_PATH="$PLUGIN_DIR" "$WORK/prefix/bin/tt-run" --list > "$WORK/list.txt"
grep -q "grad-stats" "$WORK/list.txt" || { echo "FAIL: --list does not show grad-stats"; exit 1; }
n=$(grep -c '"grad_l2"' "$WORK/runs/r/metrics.jsonl")
[ "$n" -eq 3 ] || { echo "FAIL: expected 3 grad_l2 lines (every 2 of 6 steps), got $n"; exit 1; }

# The budget planner picks up the installed plugin's PlannerOffer: --recommend on a pipeline that
# does not name it weighs grad-stats(every 4) as a technique dimension and measures it.
sed '/^plugins:/,/grad-stats/d' "$WORK/pipeline.yaml" > "$WORK/plain.yaml"
TT_PLUGIN_PATH="$PLUGIN_DIR" "$WORK/prefix/bin/tt-run" --recommend --probe-steps 2 --max-probes 4 \
  --run-dir "$WORK/rec" "$WORK/plain.yaml" > "$WORK/recommend.log" 2>&1 || { cat "$WORK/recommend.log"; exit 1; }
grep -Eq "^budget planner: [0-9]+ technique dimensions \(.*grad-stats\)" "$WORK/recommend.log" ||
  { cat "$WORK/recommend.log"; echo "FAIL: --recommend does not weigh grad-stats"; exit 1; }
grep -Eq "probe +[0-9]+ +grad-stats\(every 4\) @ micro 16 +[0-9.]+ ms/step" "$WORK/recommend.log" ||
  { cat "$WORK/recommend.log"; echo "FAIL: --recommend did not measure grad-stats(every 4)"; exit 1; }
grep -q '"configuration": "grad-stats(every 4) @ micro 16"' "$WORK/rec-plan/recommend.json" ||
  { echo "FAIL: recommend.json has no grad-stats(every 4) configuration"; exit 1; }

# The worked example of docs/plugins.md (an EMA of the weights), installed to share/tt/examples,
# builds and runs the same way, and its declared option range refuses a decay outside (0, 1).
cp -r "$WORK/prefix/share/tt/examples/ema" "$WORK/ema"
cmake -S "$WORK/ema" -B "$WORK/ema/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" "${launcher[@]}" > "$WORK/ema-configure.log"
cmake --build "$WORK/ema/build" > "$WORK/ema-build.log" || { cat "$WORK/ema-build.log"; exit 1; }
sed -e 's/name: grad-stats, every: 2/name: ema, decay: 0.9/' -e 's/run_name: r,/run_name: ema,/' \
  "$WORK/pipeline.yaml" > "$WORK/ema.yaml"
TT_PLUGIN_PATH="$WORK/ema/build/lib/tt" "$WORK/prefix/bin/tt-run" -q "$WORK/ema.yaml" > "$WORK/ema.log" 2>&1 ||
  { cat "$WORK/ema.log"; exit 1; }
test -s "$WORK/runs/ema/ema.pt" || { cat "$WORK/ema.log"; echo "FAIL: the ema example wrote no ema.pt"; exit 1; }
grep -q "the weights' average" "$WORK/runs/ema/summary.json" ||
  { cat "$WORK/runs/ema/summary.json"; echo "FAIL: the ema example did not report the bytes it holds"; exit 1; }
if TT_PLUGIN_PATH="$WORK/ema/build/lib/tt" "$WORK/prefix/bin/tt-run" -q "$WORK/ema.yaml" plugins.0.decay=1.5 \
  output.run_name=ema-bad > "$WORK/ema-bad.log" 2>&1; then
  echo "FAIL: decay 1.5 was accepted"; exit 1
fi
grep -q "(ema).decay must be in (0, 1), got 1.5" "$WORK/ema-bad.log" || { cat "$WORK/ema-bad.log"; exit 1; }

# The model template (docs/models.md): built out of tree, its own pipeline run from its folder on
# its own table for a few steps, reporting val_accuracy beside val_loss; its validate() check
# refuses dropout without hidden layers when the pipeline is read (--dry-run).
cp -r "$WORK/prefix/share/tt/model-template" "$WORK/my-model"
cmake -S "$WORK/my-model" -B "$WORK/my-model/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" "${launcher[@]}" > "$WORK/model-configure.log" 2>&1 ||
  { cat "$WORK/model-configure.log"; exit 1; }
cmake --build "$WORK/my-model/build" > "$WORK/model-build.log" || { cat "$WORK/model-build.log"; exit 1; }
MODEL_DIR="$WORK/my-model/build/lib/tt"
test -f "$MODEL_DIR/tt_model_mlp.so"
TT_PLUGIN_PATH="$MODEL_DIR" "$WORK/prefix/bin/tt-run" --list > "$WORK/model-list.txt"
grep -q "csv-table" "$WORK/model-list.txt" || { echo "FAIL: --list does not show the template's dataset"; exit 1; }
(cd "$WORK/my-model" && TT_PLUGIN_PATH="$MODEL_DIR" "$WORK/prefix/bin/tt-run" -q pipeline.yaml trainer.max_steps=6 \
  trainer.eval_every=3 output.dir="$WORK/runs" output.run_name=model output.plots=false) > "$WORK/model.log" 2>&1 ||
  { cat "$WORK/model.log"; echo "FAIL: the model template's pipeline did not run"; exit 1; }
grep -q '"status": "completed"' "$WORK/runs/model/summary.json" || { cat "$WORK/model.log"; exit 1; }
grep -q '"val_accuracy"' "$WORK/runs/model/summary.json" ||
  { cat "$WORK/runs/model/summary.json"; echo "FAIL: no val_accuracy in the model template's summary"; exit 1; }
if (cd "$WORK/my-model" && TT_PLUGIN_PATH="$MODEL_DIR" "$WORK/prefix/bin/tt-run" --dry-run pipeline.yaml \
  model.layers=0 model.dropout=0.5) > "$WORK/model-bad.log" 2>&1; then
  echo "FAIL: the model template's dropout without hidden layers was accepted"; exit 1
fi
grep -q "dropout needs layers >= 1" "$WORK/model-bad.log" || { cat "$WORK/model-bad.log"; exit 1; }

echo "the installed tabular-inference config ran from another folder on the installed model;" \
  "template plugin built out of tree and ran: $n grad_l2 lines; --recommend weighed and measured grad-stats(every 4);" \
  "the ema example built, ran and refused decay 1.5; the model template built, ran (val_accuracy) and refused" \
  "dropout without hidden layers"
