#!/usr/bin/env bash
# Paper c's figures 1 and 2 on sotu, after `detect matrix --config bench/detection/cpu.json --out OUT`
# (it reuses OUT's vocabulary and generators): negatives whose contexts vary from 16 to 56 of 64
# tokens, a UniTransf energy trained on them for one epoch (3,000 windows: 188 steps of 16; the
# recorded figures' run said --max-steps 400, which one epoch never reached), then `detect
# analyze`. Every step is cached / resumable.
#   bash bench/detection/analysis.sh [OUT]        (default runs/residual)
set -euo pipefail
OUT=${1:-runs/residual}
A=$OUT/analysis
X="${TEXTEBM:-.venv/bin/textebm}"
mkdir -p "$A"
gen() {  # the matrix's tf generator (l2r) of sotu with seed $1: OUT/gen/sotu-tf-l2r-s$1-KEY
  local g=("$OUT"/gen/sotu-tf-l2r-s"$1"-*/)
  if [ ${#g[@]} -ne 1 ] || [ ! -d "${g[0]}" ]; then
    echo "expected one generator $OUT/gen/sotu-tf-l2r-s$1-* (run the matrix first)" >&2; exit 2
  fi
  echo "${g[0]%/}"
}
G0=$(gen 0)
G1=$(gen 1)
neg() {  # split generator max-windows
  local f=$A/sotu-$1.jsonl
  [ -f "$f" ] || $X negatives generate --data "$OUT/data/sotu" --generator "$2" \
      --vocab "$OUT/vocab" --split "$1" --contexts 16 24 32 40 48 56 --stride 16 \
      --max-windows "$3" --k 3 --top-k 10 --out "$f" --no-progress
}
neg train "$G0" 3000
neg dev "$G0" 600
neg test "$G1" 1200
RUN=$A/unitransf
R=""; [ -f "$RUN/config.json" ] && R=--resume
[ -f "$RUN/detector.json" ] || $X detect train --train "$A/sotu-train.jsonl" --val "$A/sotu-dev.jsonl" \
    --vocab "$OUT/vocab" --energy unitransf --init "$G0" --epochs 1 --lr 1e-3 \
    --batch-size 16 --out "$RUN" --no-progress $R
[ -f "$A/figures/analysis.json" ] || $X detect analyze --model "$RUN" --test "$A/sotu-test.jsonl" \
    --lm "$G0" --windows 150 --positions 12 --out "$A/figures"
