#!/usr/bin/env bash
# The budget planner's peak and step-time estimates against measurements, on a small GPT-style LM
# (Brown text). tt-run --plan-estimates runs only the planner's reference probes (the pipeline as
# written at the largest and the smallest micro-batch, each technique alternative alone at the
# largest) and writes every configuration's estimate; each configuration below is then trained for
# as many steps as a probe (1 warm-up + 3) in a tt-run process of its own, and its peak tensor
# bytes (tt's meter) and median step time are set against the estimates. Peaks are byte counts:
# they repeat run to run (bf16 ones may differ by a fraction of a per cent between CPUs); times
# are not, and mean something only on an otherwise idle machine.
#   tools/bench-planner-estimates.sh [--d-model 64] [--layers 2] [--seq-len 128] [--batch 16]
#                                    [--threads 2] [--build DIR] [--keep DIR]
# About 25 s with the defaults on 2 idle cores once the text has been counted (kept in tt's cache);
# several minutes on cores shared with other work.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; DMODEL=64; LAYERS=2; SEQ=128; BATCH=16; THREADS=2; KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --d-model) DMODEL="$2"; shift 2 ;; --layers) LAYERS="$2"; shift 2 ;; --seq-len) SEQ="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;; --threads) THREADS="$2"; shift 2 ;; --build) BUILD="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    *) echo "bench-planner-estimates: unknown argument $1" >&2; exit 2 ;;
  esac
done
TEXT="$ROOT/../shared/datasets/brown/brown_train.txt"
[ -f "$TEXT" ] || TEXT="$ROOT/data/brown/brown_train.txt"
[ -f "$TEXT" ] || { echo "bench-planner-estimates: no Brown text (../shared/datasets/brown or tt-data fetch brown)"; exit 1; }
command -v python3 >/dev/null || { echo "bench-planner-estimates: needs python3 for the table (apt-get install python3)"; exit 1; }
if [ -n "$KEEP" ]; then WORK="$KEEP"; mkdir -p "$WORK"; else WORK="$(mktemp -d /tmp/tt-bench-planner-XXXXXX)"; trap 'rm -rf "$WORK"' EXIT; fi
cat > "$WORK/lm.yaml" <<YAML
name: planner-lm
seed: 0
data: {name: text, train: $TEXT, tokenizer: bytes, seq_len: $SEQ, shuffle_buffer: 256}
model: {name: transformer, vocab: 256, d_model: $DMODEL, n_layers: $LAYERS, n_heads: 4, sample_tokens: 0}
optimizer: {name: adamw, lr: 1.0e-3, weight_decay: 0.01}
trainer: {batch_size: $BATCH, threads: $THREADS}
output: {dir: $WORK/runs, plots: false}
YAML
echo "reference probes (tt-run --plan-estimates)..." >&2
"$BUILD/bin/tt-run" "$WORK/lm.yaml" --plan-estimates --run-dir "$WORK/est" > "$WORK/est.log" 2>&1 || { cat "$WORK/est.log"; exit 1; }
# The configurations to measure, from the estimates: every micro-batch as written, each technique
# alone at the smallest and at a middle one (between the planner's two reference micro-batches),
# and combinations at small micro-batches, up to all five techniques.
python3 - "$WORK/est-plan/estimates.json" > "$WORK/chosen.tsv" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["configurations"]
micros = sorted({r["micro_batch_size"] for r in rows}, reverse=True)
def techs(r): return r["configuration"].split(" @ ")[0]
def has(r, *names): return all(n in techs(r) for n in names)
def count(r): return 0 if techs(r) == "as written" else techs(r).count(" + ") + 1
smallest = micros[-1]
combos = {("checkpoint(all)", "amp"): micros[-3::2], ("adam8bit", "offload"): [smallest],
          ("checkpoint(all)", "amp", "attention"): micros[-2:], ("checkpoint(every 2)", "amp", "attention"): [smallest],
          ("checkpoint(all)", "amp", "attention", "adam8bit", "offload"): [micros[1], smallest]}
want = []
for r in rows:
    m, n = r["micro_batch_size"], count(r)
    if "measured" in r: continue                             # a reference probe
    if n == 0 or (n == 1 and m in (smallest, micros[-3])) or \
       any(n == len(k) and has(r, *k) and m in ms for k, ms in combos.items()):
        want.append(r)
for r in want:
    print(f'{r["configuration"]}\t{r["micro_batch_size"]}\t{r["plugins"]}\t{r["estimated_peak_bytes"]}')
PY
echo "measuring $(wc -l < "$WORK/chosen.tsv") configurations..." >&2
i=0
while IFS=$'\t' read -r label micro plugins est; do
  i=$((i + 1))
  "$BUILD/bin/tt-run" -q "$WORK/lm.yaml" "plugins=$plugins" "trainer.micro_batch_size=$micro" trainer.max_steps=4 \
    trainer.progress=off --run-dir "$WORK/c$i" > "$WORK/c$i.log" 2>&1 || { echo "failed: $label"; cat "$WORK/c$i.log"; exit 1; }
  echo "  $label" >&2
done < "$WORK/chosen.tsv"
python3 - "$WORK" "$DMODEL" "$LAYERS" "$SEQ" "$BATCH" <<'PY'
import json, math, statistics, sys
work, d, l, seq, batch = sys.argv[1:]
MiB = 2**20
est = json.load(open(f"{work}/est-plan/estimates.json"))["configurations"]
refs = [r for r in est if "measured" in r]
print(f"planner estimates vs measured peaks and step times: transformer d_model {d}, {l} layers, seq_len {seq}, "
      f"batch {batch}; {len(refs)} reference probes, {len(est)} configurations estimated")
chosen = [line.rstrip("\n").split("\t") for line in open(f"{work}/chosen.tsv")]
w = max(len(c[0]) for c in chosen) + 2
by_label = {r["configuration"]: r for r in est}
print(f"  {'configuration':<{w}}{'est. MiB':>10}{'peak MiB':>10}{'error':>9}{'est. ms':>10}{'step ms':>10}{'est/step':>10}")
errs, times = [], []
for i, (label, micro, plugins, e) in enumerate(chosen, 1):
    s = json.load(open(f"{work}/c{i}/summary.json"))
    peak = s["memory"]["peak_tensor_bytes"]
    err = 100.0 * (int(e) - peak) / peak
    errs.append(err)
    est_ms, ms = by_label[label]["estimated_step_ms"], 1000.0 * s["median_step_seconds"]
    times.append(est_ms / ms)
    print(f"  {label:<{w}}{int(e) / MiB:10.2f}{peak / MiB:10.2f}{err:+8.1f}%{est_ms:10.1f}{ms:10.1f}{est_ms / ms:9.2f}x")
a = [abs(x) for x in errs]
print(f"  {len(errs)} configurations: peak mean |error| {sum(a) / len(a):.1f}%, max |error| {max(a):.1f}%; "
      f"{sum(x < 0 for x in errs)} estimated low, {sum(x > 0 for x in errs)} high")
within = sum(1 for x in times if 0.8 <= x <= 1.25)
off = math.exp(statistics.mean(abs(math.log(x)) for x in times))
print(f"  step time estimate / measured: median {statistics.median(times):.2f}x, from {min(times):.2f}x to "
      f"{max(times):.2f}x; {within} of {len(times)} within 0.8x-1.25x; {off:.2f}x off on geometric mean")
for r in refs:
    m = r["measured"]
    print(f"  reference probe {r['configuration']}: {m['median_step_ms']:.1f} ms/step, peak {m['peak_tensor_bytes'] / MiB:.2f} MiB")
PY
