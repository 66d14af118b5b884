#!/usr/bin/env bash
# The tabular in-context learner on real tables, TabTune's three strategies, beside classical baselines:
#   1. pretrain the model on the synthetic prior (configs/tabular-pretrain.yaml), unless --pretrained RUN
#      names a finished pretraining run;
#   2. on each table — ../shared/datasets/tabular/{iris,wine,breast_cancer}.csv by default, or any CSV
#      given with --csv — split as tt splits it (stratified, test fraction 0.3 and split seed 0 unless
#      --test-fraction/--split-seed say otherwise; both are passed to tt-run too, so the two agree):
#      inference (the training split as context, no training), finetune (episodic full fine-tuning),
#      peft (LoRA on qkv, proj, fc1, fc2), each through tt-run with the configs/tabular-*.yaml files;
#   3. computes two baselines with scikit-learn on the same rows: the table read as tt reads it (a
#      header row; the label column by --label, else the last; labels numbered in tt's class order;
#      a missing value an error, or with --impute mean the training rows' mean, after the split), split by
#        train_test_split(X, y, test_size=FRACTION, stratify=y, random_state=SEED)
#      (the rows tt's stratified_split picks), features standardized by a StandardScaler fit on the
#      training rows, then LogisticRegression(max_iter=5000) and KNeighborsClassifier(n_neighbors=5);
#   4. prints accuracy, ROC-AUC, log-loss, Brier score and ECE per table for tt's strategies and the two
#      baselines (logreg, knn5), all from the same metric definitions as tt's (models/tabular-icl/src/metrics.h).
# --strategies picks among inference, finetune and peft (default all three); a table with more than
# 10 classes runs inference only (training takes at most 10; inference groups more, see tabular_model.h).
# --synthetic "FxC ..." adds tables drawn from the pretraining prior with F features and C classes
# (tt-data synth-table, --synthetic-rows rows each, held-out seeds 1000000007, 1000000008, ...; the class a
# function of the features, --node-target-share 0, so that there is something to learn).
# --support-sweep "S ..." times inference with S support rows (a 20-feature, 5-class prior table of
# S + 1000 rows, the last 1000 the queries) and prints the seconds and peak memory per S.
# scikit-learn is Debian's python3-sklearn, installed with apt-get when missing (as root, or with sudo).
# --baselines-only skips steps 1-2 (no tt build or pretrained model needed).
# With --memory it also runs configs/compare-tabular.yaml (memory vs support size, naive vs chunked).
#   tools/bench-tabular.sh [--pretrained RUN|WEIGHTS] [--pretrain-steps 2000] [--datasets "iris wine breast_cancer"]
#                          [--csv FILE]... [--label COLUMN] [--impute none|mean] [--strategies "inference finetune peft"]
#                          [--synthetic "50x2 100x5 300x3 20x15 20x26"] [--synthetic-rows 1000] [--support-sweep "1000 10000"]
#                          [--test-fraction 0.3] [--split-seed 0 | --split-seeds "0 1 2 3 4"] [--baselines-only]
#                          [--set KEY=VALUE]... [--memory] [--out DIR] [--build DIR]
# --split-seeds "S ..." runs the whole comparison once per split seed (in OUT/seed-S, each printing its
# table) and then prints, per table and strategy, the mean accuracy and log-loss over the splits, their
# range, and on how many splits tt's accuracy reached logistic regression's: one split of a small table
# moves by a whole row at a time. It needs --pretrained (or --baselines-only).
# --set KEY=VALUE (repeatable) passes a pipeline override to every tt-run of the strategies, e.g.
# --set model.preprocess=quantile or --set model.ensemble=16.
# --pretrained takes a pretraining run or a weights file (the shipped one: models/tabular-icl/pretrained/small.safetensors).
# --out DIR keeps the runs (a temporary folder by default); running again into the same DIR replaces
# the strategies', the sweep's and the comparison's runs there (not a pretraining: give it as --pretrained DIR/pretrain).
# --csv may be repeated; with --csv and no --datasets only the given files are run. A table is named
# by its file name without .csv (the run directories in --out are NAME-STRATEGY). --label names the
# label column of the --csv files (default: their last column; the shared tables' is their last,
# target); --impute applies to every table, as data.impute does in tt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; PRE=""; PRE_STEPS=""; SETS=""; SETS_GIVEN=0; MEMORY=0; OUT=""; CSVS=()
LABEL=""; IMPUTE="none"; FRACTION="0.3"; SPLIT_SEED="0"; BASELINES_ONLY=0  # tt's defaults (csv_schema)
STRATEGIES="inference finetune peft"; SYNTH=""; SYNTH_ROWS=1000; SWEEP=""; SPLIT_SEEDS=""; SETS_TT=()
ARGS=("$@")
need() { [ $# -ge 2 ] || { echo "bench-tabular: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --pretrained) need "$@"; PRE="$2"; shift 2 ;; --pretrain-steps) need "$@"; PRE_STEPS="$2"; shift 2 ;;
    --datasets) need "$@"; SETS="$2"; SETS_GIVEN=1; shift 2 ;; --csv) need "$@"; CSVS+=("$2"); shift 2 ;;
    --label) need "$@"; LABEL="$2"; shift 2 ;; --impute) need "$@"; IMPUTE="$2"; shift 2 ;;
    --test-fraction) need "$@"; FRACTION="$2"; shift 2 ;; --split-seed) need "$@"; SPLIT_SEED="$2"; shift 2 ;;
    --split-seeds) need "$@"; SPLIT_SEEDS="$2"; shift 2 ;;
    --set) need "$@"; case "$2" in *=*) ;; *) echo "bench-tabular: --set takes KEY=VALUE, got '$2'" >&2; exit 2 ;; esac
           SETS_TT+=("$2"); shift 2 ;;
    --baselines-only) BASELINES_ONLY=1; shift ;;
    --strategies) need "$@"; STRATEGIES="$2"; shift 2 ;;
    --synthetic) need "$@"; SYNTH="$2"; shift 2 ;; --synthetic-rows) need "$@"; SYNTH_ROWS="$2"; shift 2 ;;
    --support-sweep) need "$@"; SWEEP="$2"; shift 2 ;;
    --memory) MEMORY=1; shift ;; --out) need "$@"; OUT="$2"; shift 2 ;;
    --build) need "$@"; BUILD="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-tabular: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
case "$IMPUTE" in none|mean) ;; *) echo "bench-tabular: --impute is '$IMPUTE': use none or mean" >&2; exit 2 ;; esac
[ "$SETS_GIVEN" = 1 ] || [ ${#CSVS[@]} -gt 0 ] || [ -n "$SYNTH" ] || SETS="iris wine breast_cancer"
for s in $STRATEGIES; do
  case "$s" in inference|finetune|peft) ;; *) echo "bench-tabular: --strategies has '$s': use inference, finetune, peft" >&2; exit 2 ;; esac
done
[ -n "$STRATEGIES" ] || { echo "bench-tabular: --strategies is empty" >&2; exit 2; }
case "$SYNTH_ROWS" in ''|*[!0-9]*) echo "bench-tabular: --synthetic-rows '$SYNTH_ROWS' is not a row count" >&2; exit 2 ;; esac
for v in $SYNTH; do
  case "$v" in [1-9]*x[1-9]*) ;; *) echo "bench-tabular: --synthetic has '$v': write FEATURESxCLASSES, e.g. 50x15" >&2; exit 2 ;; esac
done
for v in $SWEEP; do
  case "$v" in ''|*[!0-9]*) echo "bench-tabular: --support-sweep has '$v': support row counts" >&2; exit 2 ;; esac
done
for v in $SPLIT_SEEDS; do
  case "$v" in *[!0-9]*) echo "bench-tabular: --split-seeds has '$v': split seeds are integers" >&2; exit 2 ;; esac
done
if [ -n "$SPLIT_SEEDS" ]; then
  [ -n "$PRE" ] || [ "$BASELINES_ONLY" = 1 ] ||
    { echo "bench-tabular: --split-seeds needs --pretrained RUN|WEIGHTS (one model for every split) or --baselines-only" >&2; exit 2; }
  [ -z "$SWEEP" ] && [ "$MEMORY" = 0 ] ||
    { echo "bench-tabular: --split-seeds compares accuracy over splits: run --support-sweep and --memory without it" >&2; exit 2; }
  OUT="${OUT:-$(mktemp -d /tmp/tt-bench-tabular-XXXXXX)}"
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd)"
  PASS=()  # the arguments less --split-seeds, --split-seed and --out, which each split's run gets its own of
  i=0
  while [ $i -lt ${#ARGS[@]} ]; do
    case "${ARGS[$i]}" in --split-seeds|--split-seed|--out) i=$((i + 2)) ;; *) PASS+=("${ARGS[$i]}"); i=$((i + 1)) ;; esac
  done
  for S in $SPLIT_SEEDS; do
    echo "== split seed $S"
    "${BASH_SOURCE[0]}" ${PASS[@]+"${PASS[@]}"} --split-seed "$S" --out "$OUT/seed-$S"
  done
  PY=python3; python3 -c 'import json' 2>/dev/null || PY=/usr/bin/python3
  echo
  "$PY" - "$OUT" "$BASELINES_ONLY" "$STRATEGIES" $SPLIT_SEEDS <<'PY'
import json, os, sys
out, baselines_only, strategies, seeds = sys.argv[1], sys.argv[2] == "1", sys.argv[3].split(), sys.argv[4:]
runs = {}  # (table, method) -> [(accuracy, log-loss, examples)]
for s in seeds:
    base = json.load(open(f"{out}/seed-{s}/baselines.json"))
    for d, b in base.items():
        for m in ([] if baselines_only else strategies):
            f = f"{out}/seed-{s}/{d}-{m}/summary.json"
            if os.path.exists(f):
                v = json.load(open(f))["validation"]
                runs.setdefault((d, m), []).append((v["val_accuracy"], v["val_log_loss"], s))
        for m in ("logreg", "knn5"):
            runs.setdefault((d, m), []).append((b[m]["accuracy"], b[m]["log_loss"], s))
print(f"over {len(seeds)} stratified splits (seeds {' '.join(seeds)}): mean, lowest and highest; "
      "'>= logreg': the splits where the accuracy reached logistic regression's")
W = max([14] + [len(d) for d, _ in runs])
print(f"{'dataset':<{W}} {'method':<10} {'accuracy':>8} {'lowest':>7} {'highest':>7} {'log-loss':>9} {'>= logreg':>10}")
for (d, m), r in runs.items():
    lr = {s: a for a, _, s in runs[(d, "logreg")]}
    acc = [a for a, _, _ in r]
    ll = [l for _, l, _ in r]
    reached = sum(1 for a, _, s in r if a >= lr[s] - 1e-9)
    print(f"{d:<{W}} {m:<10} {sum(acc) / len(acc):8.3f} {min(acc):7.3f} {max(acc):7.3f} {sum(ll) / len(ll):9.4f} "
          f"{reached:>6} of {len(r)}")
PY
  echo "bench-tabular: runs in $OUT"
  exit 0
fi
TT="$BUILD/bin/tt-run"; TT_DATA="$BUILD/bin/tt-data"
[ -z "$SYNTH$SWEEP" ] || [ -x "$TT_DATA" ] || { echo "bench-tabular: $TT_DATA not built (tools/setup.sh build)" >&2; exit 1; }
OUT="${OUT:-$(mktemp -d /tmp/tt-bench-tabular-XXXXXX)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# The tables: NAME<TAB>LABEL<TAB>PATH lines (LABEL empty: the last column), names unique (they name
# the run directories).
TABLES=()
DATA="$ROOT/../shared/datasets/tabular"
for d in $SETS; do
  [ -d "$DATA" ] || { echo "bench-tabular: $DATA not found (../shared/datasets beside the repository); use --csv FILE"; exit 1; }
  [ -f "$DATA/$d.csv" ] || { echo "bench-tabular: $DATA/$d.csv not found"; exit 1; }
  TABLES+=("$d"$'\t'$'\t'"$(cd "$DATA" && pwd)/$d.csv")  # label: the last column, target
done
for f in ${CSVS[@]+"${CSVS[@]}"}; do
  [ -f "$f" ] || { echo "bench-tabular: $f not found (--csv)"; exit 1; }
  n="$(basename "$f")"; n="${n%.csv}"
  case "$n" in *[!A-Za-z0-9._-]*) n="$(printf '%s' "$n" | tr -c 'A-Za-z0-9._-' '_')" ;; esac
  TABLES+=("$n"$'\t'"$LABEL"$'\t'"$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done
i=0
for v in $SYNTH; do  # held-out prior tables: seeds far from pretraining's
  F="${v%x*}"; C="${v#*x}"; n="synth-${F}f-${C}c"
  mkdir -p "$OUT/synthetic"
  "$TT_DATA" synth-table --features "$F" --classes "$C" --rows "$SYNTH_ROWS" --seed $((1000000007 + i)) --node-target-share 0 \
    --out "$OUT/synthetic/$n.csv" || { echo "bench-tabular: tt-data synth-table failed for $v" >&2; exit 1; }
  TABLES+=("$n"$'\t'$'\t'"$OUT/synthetic/$n.csv")
  i=$((i + 1))
done
[ ${#TABLES[@]} -gt 0 ] || [ -n "$SWEEP" ] || { echo "bench-tabular: no tables (--datasets, --csv, --synthetic or --support-sweep)" >&2; exit 2; }
dups="$(printf '%s\n' ${TABLES[@]+"${TABLES[@]}"} | cut -f1 | sort | uniq -d)"
[ -z "$dups" ] || { echo "bench-tabular: two tables are named ${dups//$'\n'/ }: give files different names" >&2; exit 2; }

# scikit-learn (and numpy with it): the first python3 that has it (the one on PATH, then Debian's
# /usr/bin/python3), else Debian's python3-sklearn installed only when missing, as tools/setup.sh does.
PY=""
for p in python3 /usr/bin/python3; do
  command -v "$p" >/dev/null && "$p" -c 'import sklearn, numpy' 2>/dev/null && { PY="$p"; break; }
done
if [ -z "$PY" ]; then
  command -v apt-get >/dev/null || {
    echo "bench-tabular: needs python3 with scikit-learn for the baselines (Debian: python3-sklearn; pip: scikit-learn)" >&2; exit 1; }
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "bench-tabular: need root (or sudo) to apt-get install python3-sklearn for the baselines" >&2; exit 1; }
    SUDO=(sudo)
  fi
  echo "bench-tabular: installing python3-sklearn (scikit-learn, for the baselines)"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-sklearn
  PY=/usr/bin/python3  # a Debian package serves Debian's python
  "$PY" -c 'import sklearn, numpy' || { echo "bench-tabular: python3-sklearn installed but $PY cannot import sklearn" >&2; exit 1; }
fi

if [ "$BASELINES_ONLY" = 0 ]; then
  [ -x "$TT" ] || { echo "bench-tabular: $TT not built (tools/setup.sh build), or use --baselines-only"; exit 1; }
fi
cd "$ROOT"

# Baselines first: quick, and a table tt cannot read fails here before any pretraining.
printf '%s\n' ${TABLES[@]+"${TABLES[@]}"} | sed '/^$/d' > "$OUT/tables.tsv"
"$PY" - "$OUT" "$IMPUTE" "$FRACTION" "$SPLIT_SEED" <<'PY'
# Reads each table as models/tabular-icl/src/table.cpp's read_csv does, splits it as its
# stratified_split does (by calling scikit-learn's train_test_split, which that function mirrors)
# and scores logistic regression and 5-NN with metrics.cpp's definitions.
import json, math, re, sys, warnings
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

out, impute, fraction, seed = sys.argv[1:5]
MAX_CLASSES = 1000  # tt::tab::kMaxTableClasses
MISSING = {"", "NA", "na", "NaN", "nan", "?", "null"}

def fail(msg):
    print(f"bench-tabular: {msg}", file=sys.stderr)
    sys.exit(1)

try:
    fraction = float(fraction)
    seed = int(seed)
except ValueError:
    fail(f"--test-fraction {sys.argv[3]} / --split-seed {sys.argv[4]}: expected a number and an integer")
if not 0 < fraction < 1:
    fail(f"--test-fraction is {fraction}: it must be between 0 and 1")
if not 0 <= seed <= 0xFFFFFFFF:
    fail(f"--split-seed is {seed}: it must be between 0 and 2^32 - 1")

def split_line(line):  # table.cpp split_line: commas, double quotes ("" inside), \r dropped, fields trimmed
    out, cur, quoted, i = [], [], False, 0
    while i < len(line):
        c = line[i]
        if quoted:
            if c == '"' and i + 1 < len(line) and line[i + 1] == '"':
                cur.append('"'); i += 1
            elif c == '"':
                quoted = False
            else:
                cur.append(c)
        elif c == '"':
            quoted = True
        elif c == ',':
            out.append("".join(cur)); cur = []
        elif c != '\r':
            cur.append(c)
        i += 1
    out.append("".join(cur))
    return [f.strip(" \t") for f in out]

def parse_number(f):  # strtod over the whole field, finite
    if not f or "_" in f or f != f.strip():
        return None
    try:
        v = float(f)
    except ValueError:
        if not re.match(r"[+-]?0[xX]", f):
            return None
        try:
            v = float.fromhex(f)
        except ValueError:
            return None
    return v if math.isfinite(v) else None

def read_csv(path, label):
    header, rows, line_of = None, [], []
    with open(path, "rb") as fh:
        text = fh.read().decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        if line.strip(" \t\r") == "":
            continue
        if header is None:
            header = split_line(line)
            continue
        rows.append(split_line(line)); line_of.append(n)
    if header is None:
        fail(f"{path} is empty: expected a header row of column names and data rows")
    if not rows:
        fail(f"{path} has a header but no data rows")
    for r, n in zip(rows, line_of):
        if len(r) != len(header):
            fail(f"{path}:{n} has {len(r)} fields where the header has {len(header)}")
    lc = len(header) - 1
    if label:
        if label not in header:
            fail(f"{path} has no column '{label}' (--label); its columns are: {', '.join(header[:40])}")
        lc = header.index(label)
    if len(header) < 2:
        fail(f"{path} has a single column: expected features and a label column")
    cols = [j for j in range(len(header)) if j != lc]
    X = np.zeros((len(rows), len(cols)))
    missing = []
    for i, r in enumerate(rows):
        for k, j in enumerate(cols):
            f = r[j]
            if f in MISSING:
                if impute != "mean":
                    fail(f"{path}:{line_of[i]} column '{header[j]}' has a missing value ('{f}'): fill it in, "
                         "or use --impute mean (data.impute: mean) to replace missing values by the column's mean")
                missing.append((i, k)); continue
            v = parse_number(f)
            if v is None:
                fail(f"{path}:{line_of[i]} column '{header[j]}' is not numeric ('{f}'): features must be numbers")
            X[i, k] = v
    for i, k in missing:  # NaN until the split: imputed with the training rows' means (impute_means_of)
        X[i, k] = np.nan
    labels = []
    for i, r in enumerate(rows):
        if r[lc] in MISSING:
            fail(f"{path}:{line_of[i]} has no label in column '{header[lc]}': every training row needs one")
        labels.append(r[lc])
    classes = sorted(set(labels))  # numerically when every label is a number, as tt numbers its classes
    if all(parse_number(l) is not None for l in labels):
        classes.sort(key=parse_number)
    if len(classes) > MAX_CLASSES:
        fail(f"{path} column '{header[lc]}' has {len(classes)} classes; tt predicts at most {MAX_CLASSES}")
    if len(classes) < 2:
        fail(f"{path} column '{header[lc]}' has a single class: nothing to learn")
    ids = {c: i for i, c in enumerate(classes)}
    return X, np.array([ids[l] for l in labels]), classes, header[lc], [header[j] for j in cols]

def roc_auc(scores, positive):  # metrics.cpp roc_auc: Mann-Whitney U, average ranks for ties
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    rank_sum, pos, i, n = 0.0, 0, 0, len(scores)
    while i < n:
        j = i
        while j + 1 < n and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            if positive[order[k]]:
                rank_sum += 0.5 * (i + j) + 1.0; pos += 1
        i = j + 1
    neg = n - pos
    if pos == 0 or neg == 0:
        return math.nan
    return (rank_sum - 0.5 * pos * (pos + 1)) / (pos * neg)

def metrics(p, y, C, bins=15):  # metrics.cpp classification_metrics
    n = len(y)
    top = p.argmax(axis=1)
    ok = top == y
    logloss = -np.log(np.clip(p[np.arange(n), y], 1e-15, 1.0)).sum()
    brier = ((p - np.eye(C)[y]) ** 2).sum()
    conf = p[np.arange(n), top]
    b = np.minimum(bins - 1, (conf * bins).astype(int))
    ece = sum(abs(ok[b == k].sum() - conf[b == k].sum()) / n for k in range(bins) if (b == k).any())
    aucs = [roc_auc(list(p[:, c]), list(y == c)) for c in range(1 if C == 2 else 0, C)]
    aucs = [a for a in aucs if not math.isnan(a)]
    dn = max(1, n)
    return {"accuracy": ok.sum() / dn, "roc_auc": sum(aucs) / len(aucs) if aucs else math.nan,
            "log_loss": logloss / dn, "brier": brier / dn, "ece": float(ece), "examples": n}

result = {}
for entry in open(f"{out}/tables.tsv").read().splitlines():
    name, label, path = entry.split("\t", 2)
    X, y, classes, label_name, features = read_csv(path, label)
    C = len(classes)
    try:
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=fraction, stratify=y, random_state=seed)
    except ValueError as e:
        fail(f"{path}: no stratified split with test fraction {fraction}: {e}")
    gaps = np.isnan(Xtr).any() or np.isnan(Xte).any()
    if gaps:  # scikit-learn's SimpleImputer fitted on the training rows, as tt's data.impute: mean
        seen = ~np.isnan(Xtr).all(axis=0)
        if not seen.all():
            fail(f"{path} column '{features[int(np.argmin(seen))]}' "
                 "has no value in the training rows to impute from: drop the column")
        means = np.nanmean(Xtr, axis=0)
        Xtr = np.where(np.isnan(Xtr), means, Xtr)
        Xte = np.where(np.isnan(Xte), means, Xte)
    res = {"path": path, "label": label_name, "classes": C, "train_rows": len(ytr), "test_rows": len(yte)}
    k = min(5, len(ytr))
    for key, model in (("logreg", LogisticRegression(max_iter=5000)), ("knn5", KNeighborsClassifier(n_neighbors=k))):
        pipe = make_pipeline(StandardScaler(), model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pipe.fit(Xtr, ytr)
            q = pipe.predict_proba(Xte)
        p = np.zeros((len(yte), C))
        p[:, pipe.classes_] = q  # every class is in the training rows (stratified), but be exact
        res[key] = {k2: float(v) for k2, v in metrics(p, yte, C).items()}
    if k != 5:
        res["knn_k"] = k
    result[name] = res
json.dump(result, open(f"{out}/baselines.json", "w"), indent=1)
PY

if [ "$BASELINES_ONLY" = 0 ]; then
  if [ -z "$PRE" ]; then
    PRE="$OUT/pretrain"
    echo "bench-tabular: pretraining on the prior -> $PRE"
    "$TT" configs/tabular-pretrain.yaml ${PRE_STEPS:+trainer.max_steps=$PRE_STEPS} \
      ${PRE_STEPS:+trainer.eval_every=$PRE_STEPS} ${PRE_STEPS:+trainer.checkpoint_every=$PRE_STEPS} \
      --run-dir "$PRE" -q
  fi
  [ -d "$PRE/checkpoints" ] || [ -f "$PRE" ] ||
    { echo "bench-tabular: $PRE is neither a pretraining run (with checkpoints/) nor a weights file"; exit 1; }
  for t in ${TABLES[@]+"${TABLES[@]}"}; do
    d="${t%%$'\t'*}"; r="${t#*$'\t'}"; l="${r%%$'\t'*}"; f="${r#*$'\t'}"
    DATA_SET=("data.path=$f" "data.test_fraction=$FRACTION" "data.split_seed=$SPLIT_SEED" "data.impute=$IMPUTE")
    [ -z "$l" ] || DATA_SET+=("data.label=$l")
    C="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]]["classes"])' "$OUT/baselines.json" "$d")"
    for s in $STRATEGIES; do
      if [ "$s" != inference ] && [ "$C" -gt 10 ]; then continue; fi  # training takes at most 10 classes
      "$TT" "configs/tabular-$s.yaml" "${DATA_SET[@]}" "model.init_from=$PRE" ${SETS_TT[@]+"${SETS_TT[@]}"} \
        --run-dir "$OUT/$d-$s" --overwrite -q > "$OUT/$d-$s.log" 2>&1 || { cat "$OUT/$d-$s.log"; exit 1; }
    done
  done
fi

"$PY" - "$OUT" "$BASELINES_ONLY" "$FRACTION" "$SPLIT_SEED" "$STRATEGIES" <<'PY'
import json, math, os, sys
out, baselines_only = sys.argv[1], sys.argv[2] == "1"
base = json.load(open(f"{out}/baselines.json"))
def num(v, w, p):
    return f"{v:{w}.{p}f}" if v is not None and not math.isnan(v) else f"{'-':>{w}}"
if not base:
    sys.exit(0)  # --support-sweep alone
print(f"stratified split: test fraction {sys.argv[3]}, seed {sys.argv[4]}; baselines: scikit-learn on standardized features")
W = max([14] + [len(d) for d in base])
print(f"{'dataset':<{W}} {'strategy':<10} {'accuracy':>8} {'ROC-AUC':>8} {'log-loss':>9} {'Brier':>7} {'ECE':>7} {'step ms':>8}  test rows")
for d, b in base.items():
    rows = []
    if not baselines_only:
        for s in sys.argv[5].split():
            if not os.path.exists(f"{out}/{d}-{s}/summary.json"):
                print(f"{d:<{W}} {s:<10} (not run: training takes at most 10 classes, this table has {b['classes']})")
                continue
            sm = json.load(open(f"{out}/{d}-{s}/summary.json"))
            v = {k[4:]: x for k, x in sm["validation"].items() if k.startswith("val_")}
            ms = sm.get("median_step_seconds") or 0
            rows.append((s, v, ms * 1e3 if ms > 0 else None))
            if int(v.get("examples", b["test_rows"])) != b["test_rows"]:
                print(f"bench-tabular: warning: {d}: tt scored {int(v['examples'])} test rows, the baselines "
                      f"{b['test_rows']}", file=sys.stderr)
    knn = "knn5" if "knn_k" not in b else f"knn{b['knn_k']}"
    rows += [("logreg", b["logreg"], None), (knn, b["knn5"], None)]
    for s, v, ms in rows:
        print(f"{d:<{W}} {s:<10} {num(v['accuracy'], 8, 3)} {num(v['roc_auc'], 8, 3)} {num(v['log_loss'], 9, 4)} "
              f"{num(v['brier'], 7, 4)} {num(v['ece'], 7, 4)} {num(ms, 8, 1)}  {int(v.get('examples', 0))}")
PY

if [ -n "$SWEEP" ] && [ "$BASELINES_ONLY" = 0 ]; then
  # Inference against the support size: one prior table of S + 1000 rows (20 features, 5 classes),
  # the last 1000 rows the queries (test_fraction 1000 / (S + 1000), stratified).
  echo
  echo "inference against the support size (20 features, 5 classes, 1000 query rows; $(nproc) threads)"
  printf '%-14s %10s %12s %15s %9s\n' "support rows" "seconds" "eval s" "peak RSS" "accuracy"
  for S in $SWEEP; do
    f="$OUT/synthetic/support-$S.csv"; mkdir -p "$OUT/synthetic"
    "$TT_DATA" synth-table --features 20 --classes 5 --rows $((S + 1000)) --seed 1000000100 --node-target-share 0 --out "$f"
    frac="$("$PY" -c "print(1000 / ($S + 1000))")"
    # the process's own peak resident memory (getrusage of the child: the meter counts training
    # steps, and an inference-only run has none)
    "$PY" - "$TT" "$f" "$frac" "$PRE" "$OUT/support-$S" "$S" <<'PY' || { cat "$OUT/support-$S.log"; exit 1; }
import json, resource, subprocess, sys, time
tt, path, frac, pre, run_dir, S = sys.argv[1:7]
t0 = time.monotonic()
with open(run_dir + ".log", "w") as log:
    rc = subprocess.call([tt, "configs/tabular-inference.yaml", f"data.path={path}", f"data.test_fraction={frac}",
                          f"model.init_from={pre}", "--run-dir", run_dir, "--overwrite", "-q"], stdout=log, stderr=subprocess.STDOUT)
seconds = time.monotonic() - t0
if rc != 0:
    sys.exit(rc)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
s = json.load(open(run_dir + "/summary.json"))
v = s.get("validation", {})
print(f"{S:<14} {seconds:10.1f} {s['wall_seconds'] - s['setup_seconds']:12.1f} {peak / 2**20:11.1f} MiB "
      f"{v.get('val_accuracy', float('nan')):9.3f}")
PY
  done
fi

if [ "$MEMORY" = 1 ] && [ "$BASELINES_ONLY" = 0 ]; then
  "$TT" configs/compare-tabular.yaml --run-dir "$OUT/compare" --overwrite
fi
echo "bench-tabular: runs in $OUT"
