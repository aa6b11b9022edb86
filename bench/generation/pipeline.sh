#!/usr/bin/env bash
# Paper d (residual EBM generation) on two corpora, end to end on CPU: data, shared vocabulary,
# base LMs, untruncated negatives, energies (UniT, BiT, BiT from MiniLM), RALM, BALM, and the
# perplexity bounds. Every step is cached: a finished output is skipped, an interrupted one
# resumes, so the script can be stopped and started again (a later session continues it).
#
#   bash bench/generation/pipeline.sh WORK [STAGE...]     stages: base negatives energies baselines ppl
set -euo pipefail
W=${1:?usage: pipeline.sh WORK [STAGE...]}; shift || true
STAGES=${*:-base negatives energies baselines ppl}
T=${TEXTEBM:-textebm}
CORPORA=${CORPORA:-news brown}
mkdir -p "$W"; cd "$W"
has() { [[ " $STAGES " == *" $1 "* ]]; }
done_run() { [ -f "$1/metrics.json" ]; }
resume() { [ -f "$1/config.json" ] && echo --resume || true; }  # continue an interrupted run
LM="--arch transformer --layers 2 --width 128 --heads 4 --context 80 --chunk 64 --batch-size 32 --lr 0.002"

if has base; then
  for c in $CORPORA; do [ -d data/$c ] || $T data prepare $c --out data/$c; done
  [ -d vocab ] || $T tokenizer train --data $(for c in $CORPORA; do echo data/$c; done) --vocab-size 8000 --out vocab
  for c in $CORPORA; do
    for s in 0 1; do  # seed 1: the judge's negatives come from another base LM
      done_run base/$c-s$s || $T lm train --data data/$c --tokenizer vocab $LM --epochs 1 --seed $s \
        --out base/$c-s$s $(resume base/$c-s$s)
    done
  done
fi
