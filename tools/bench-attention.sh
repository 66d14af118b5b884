#!/usr/bin/env bash
# Attention kernels, naive (core: the T x S score matrix) against chunked (plugins/attention:
# online softmax, tiles recomputed in backward): forward+backward time and peak tensor bytes as
# tt's meter counts them, B=1, H=4, D=64, causal, for each sequence length N. Naive's memory
# grows as N^2, chunked's as N: the "mem x" column (chunked / naive) falls as N grows.
#   tools/bench-attention.sh [--sizes "512 1024 2048 4096"] [--chunk 256] [--threads 2]
#                            [--repeat 3] [--build DIR]
# The machine may be shared: compare the ratios of one run, not absolute times across runs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"; SIZES="512 1024 2048 4096"; CHUNK=256; THREADS=2; REPEAT=3
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES="$2"; shift 2 ;; --chunk) CHUNK="$2"; shift 2 ;; --threads) THREADS="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;; --build) BUILD="$2"; shift 2 ;;
    *) echo "bench-attention: unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN="$BUILD/bin/tt_attention_bench"
[ -x "$BIN" ] || { echo "bench-attention: $BIN not found: ninja -C $BUILD tt_attention_bench" >&2; exit 1; }
exec "$BIN" --sizes "$(echo $SIZES | tr ' ' ',')" --chunk "$CHUNK" --threads "$THREADS" --repeat "$REPEAT"
