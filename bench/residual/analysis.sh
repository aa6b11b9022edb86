#!/usr/bin/env bash
# Paper c's figures 1 and 2 on sotu, after `residual matrix --config bench/residual/cpu.json --out OUT`
# (it reuses OUT's vocabulary and generators): negatives whose contexts vary from 16 to 56 of 64
# tokens, a UniTransf energy trained on them, then `residual analyze`. Every step is cached / resumable.
#   bash bench/residual/analysis.sh [OUT]        (default runs/residual)
set -euo pipefail
OUT=${1:-runs/residual}
A=$OUT/analysis
X="${TEXTEBM:-.venv/bin/textebm}"
mkdir -p "$A"
neg() {  # split generator-seed
  local f=$A/sotu-$1.jsonl
  [ -f "$f" ] || $X negatives generate --data "$OUT/data/sotu" --generator "$OUT/gen/sotu-tf-l2r-s$2" \
      --vocab "$OUT/vocab" --split "$1" --contexts 16 24 32 40 48 56 --stride 16 \
      --max-windows "$3" --k 3 --top-k 10 --out "$f" --no-progress
}
neg train 0 3000
neg dev 0 600
neg test 1 1200
RUN=$A/unitransf
R=""; [ -f "$RUN/config.json" ] && R=--resume
[ -f "$RUN/detector.json" ] || $X residual train --train "$A/sotu-train.jsonl" --val "$A/sotu-dev.jsonl" \
    --vocab "$OUT/vocab" --energy unitransf --init "$OUT/gen/sotu-tf-l2r-s0" --max-steps 400 --lr 1e-3 \
    --batch-size 16 --out "$RUN" --no-progress $R
[ -f "$A/figures/analysis.json" ] || $X residual analyze --model "$RUN" --test "$A/sotu-test.jsonl" \
    --lm "$OUT/gen/sotu-tf-l2r-s0" --windows 150 --positions 12 --out "$A/figures"
