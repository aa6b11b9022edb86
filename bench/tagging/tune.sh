#!/usr/bin/env bash
# Tune the tagging grid's per-method settings on dev (paper e: hyper-parameters tuned per method,
# then fixed for every cell), on one cell: 2 % of the 2,500-sentence labelled set, U/L 50, seed 0,
# the grid's pool (Brown + sotu, news, shakespeare). Each variant is a `tag train` run in WORK
# (skipped when finished); WORK/tune.tsv gets one line per variant: name, options, dev accuracy.
#
#   bash bench/tagging/tune.sh WORK DATA      # DATA holds brown-pos, sotu, news, shakespeare
set -euo pipefail
W=${1:?usage: tune.sh WORK DATA}; D=${2:?usage: tune.sh WORK DATA}
T=${TEXTEBM:-textebm}
mkdir -p "$W"
COMMON="--data $D/brown-pos --labelled 2500 --proportion 0.02 --seed 0 --split-seed 0 --batch-size 32 --no-progress"
SIZE="--embed 64 --hidden 100"  # joint takes its --init's
SSL="--ratio 50 --noise-embed 64 --noise-hidden 100 --unlabelled $D/sotu $D/news $D/shakespeare"
run() {  # NAME OPTIONS...
  local name=$1; shift
  [ -f "$W/$name/metrics.json" ] || $T tag train $COMMON "$@" --out "$W/$name" $( [ -f "$W/$name/config.json" ] && echo --resume )
  python3 -c "import json,sys; m=json.load(open('$W/$name/metrics.json')); print('$name', ' '.join(sys.argv[1:]), round(m['eval']['dev_accuracy'], 4), sep='\t')" "$@" >> "$W/tune.tsv"
}
: > "$W/tune.tsv"
run sup --method supervised $SIZE --epochs 40 --max-steps 600 --lr 0.01
# joint from the supervised tagger: the unlabelled loss's weight, its ramp, the learning rate, passes
for v in "j-w0.1-r1000-lr1e-3 0.1 1000 0.001 1" "j-w0.1-r0-lr1e-3 0.1 0 0.001 1" "j-w1-r0-lr1e-3 1 0 0.001 1" \
         "j-w0.1-r0-lr3e-3 0.1 0 0.003 1" "j-w1-r0-lr3e-3-e3 1 0 0.003 3" "j-w0.1-r0-lr3e-3-e3 0.1 0 0.003 3"; do
  set -- $v
  run "$1" --method joint --init "$W/sup" $SSL --unlabelled-weight "$2" --ramp-steps "$3" --lr "$4" --epochs "$5"
done
# pre-training: stage 1's and stage 2's learning rates
for v in "p-plr1e-2-lr1e-2 0.01 0.01" "p-plr3e-3-lr1e-2 0.003 0.01" "p-plr1e-2-lr3e-2 0.01 0.03"; do
  set -- $v
  run "$1" --method pretrain $SIZE $SSL --pretrain-epochs 1 --pretrain-lr "$2" --epochs 40 --max-steps 600 --lr "$3"
done
column -t -s $'\t' "$W/tune.tsv"
