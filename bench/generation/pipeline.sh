#!/usr/bin/env bash
# Paper d (residual EBM generation) on two corpora, end to end on CPU: data, shared vocabulary,
# base LMs, untruncated negatives, a masked LM, energies (UniT, BiT from that MLM, BiT from MiniLM) trained by conditional
# NCE with appendix A.3's settings, RALM and BALM, the perplexity bounds, joint sampling and its
# judge. Every step is cached: a finished output is skipped, an interrupted one resumes, so the
# script can be stopped and started again (a later session continues it).
#
#   bash bench/generation/pipeline.sh WORK [STAGE...]
#   stages: base negatives energies baselines ppl judge generate      (default: all, in order)
#   CORPORA="news brown" WINDOWS=200 SAMPLES=1000 ... override the settings below
#   Beside other jobs (two corpora at once, ENERGY_SET halves), give each OMP_NUM_THREADS=1: two
#   2-thread jobs on 2 cores ran a step up to 13x slower here (docs/performance.md).
set -euo pipefail
W=${1:?usage: pipeline.sh WORK [STAGE...]}; shift || true
STAGES=${*:-base negatives energies baselines ppl judge generate}
T=${TEXTEBM:-textebm}
CORPORA=${CORPORA:-news brown}
PPL_ENERGIES=${PPL_ENERGIES:-}     # a subset of "unit bit bit-minilm" for `residual ppl` (into ppl/CORPUS-A+B)
JUDGED=${JUDGED:-news}            # corpora whose generations a detector of another base LM judges
WINDOWS=${WINDOWS:-200}           # test prefixes
SAMPLES=${SAMPLES:-1000}          # base-LM samples per prefix behind log Z
POSITIONS=${POSITIONS:-8}         # prefixes of the per-position estimate (eq. 5)
POS_SAMPLES=${POS_SAMPLES:-256}   # samples per position
N_GEN=${N_GEN:-100}               # candidates per prefix of joint sampling
EPOCHS=${EPOCHS:-8}                # of UniT and BiT over the 6,000 windows (each draws one of its 4 negatives)
PREC=${PREC:-auto}                # bf16 where the CPU multiplies it natively; metrics stay float64
mkdir -p "$W"; cd "$W"
has() { [[ " $STAGES " == *" $1 "* ]]; }
want() { [[ " ${ENERGY_SET:-mlm unit bit bit-minilm} " == *" $1 "* ]]; }  # ENERGY_SET: a subset, e.g. to run two at once
done_run() { [ -f "$1/metrics.json" ]; }
resume() { [ -f "$1/config.json" ] && echo --resume || true; }  # continue an interrupted run
Q="--no-progress"
# The base LM (and the judge's base LM, seed 1): 2 x 128 transformer, windows of 64 = 48 + 16.
LM="--arch transformer --layers 2 --width 128 --heads 4 --context 80 --chunk 64 --batch-size 32 --lr 0.002"
WIN="--length 64 --contexts 48 --stride 16"

if has base; then
  for c in $CORPORA; do [ -d data/$c ] || $T data prepare $c --out data/$c; done
  [ -d vocab ] || $T tokenizer train --data $(for c in $CORPORA; do echo data/$c; done) --vocab-size 8000 --out vocab
  for c in $CORPORA; do
    done_run base/$c-s0 || $T lm train --data data/$c --tokenizer vocab $LM --epochs 1 --seed 0 \
      --out base/$c-s0 $(resume base/$c-s0) $Q
  done
fi

if has negatives; then  # untruncated (top-k 0): eq. 3 and Theorem 1 need P_LM's full support
  mkdir -p neg
  for c in $CORPORA; do
    [ -f neg/$c-train.jsonl ] || $T negatives generate --data data/$c --generator base/$c-s0 --vocab vocab \
      --split train $WIN --k 4 --top-k 0 --max-windows 6000 --out neg/$c-train.jsonl $Q
    [ -f neg/$c-dev.jsonl ] || $T negatives generate --data data/$c --generator base/$c-s0 --vocab vocab \
      --split dev $WIN --k 4 --top-k 0 --max-windows 400 --out neg/$c-dev.jsonl $Q
  done
fi

if has energies; then  # conditional NCE: BCE on one of the k negatives at random; A.3's settings
  mkdir -p energy mlm
  for c in $CORPORA; do
    # BiT's body: a masked LM trained on the same corpus (the paper's BERT trained on its data)
    want mlm && { done_run mlm/$c || $T cloze train --data data/$c --tokenizer vocab --objective mlm --layers 2 \
      --width 128 --heads 4 --max-len 80 --batch-size 32 --lr 0.0005 --max-steps 1200 --out mlm/$c $(resume mlm/$c) $Q; }
    # --keep-best: the weights of the epoch of lowest conditional NCE loss on the dev windows (8
    # epochs over 6,000 windows overfit: the last epoch's energy made the joint model worse);
    # --patience 2 stops two epochs after the best
    common="--train neg/$c-train.jsonl --val neg/$c-dev.jsonl --vocab vocab --loss bce --negatives random \
      --schedule cosine --warmup 0.05 --keep-best --patience 2 --precision $PREC $Q"
    want unit && { done_run energy/$c-unit || $T detect train $common --energy unitransf --init base/$c-s0 \
      --grad-clip 10 --lr 0.0003 --batch-size 32 --epochs $EPOCHS --out energy/$c-unit $(resume energy/$c-unit); }
    want bit && { done_run energy/$c-bit || $T detect train $common --energy bitransf --pool mean --init mlm/$c \
      --grad-clip 0.25 --lr 0.0003 --batch-size 32 --epochs $EPOCHS --out energy/$c-bit $(resume energy/$c-bit); }
    want bit-minilm && { done_run energy/$c-bit-minilm || $T detect train $common --energy bitransf --pool mean --init minilm-l6 \
      --grad-clip 0.25 --lr 0.00005 --batch-size 16 --max-steps 500 --out energy/$c-bit-minilm \
      $(resume energy/$c-bit-minilm); }
  done
fi

if has baselines; then  # RALM (eq. 6, phi the size of UniT) and BALM (parameters of base + energy)
  mkdir -p baseline
  for c in $CORPORA; do
    done_run baseline/$c-ralm || $T lm train --data data/$c --residual-of base/$c-s0 --layers 2 --width 128 \
      --heads 4 --context 80 --chunk 64 --batch-size 32 --lr 0.002 --epochs 1 --out baseline/$c-ralm \
      $(resume baseline/$c-ralm) $Q
    done_run baseline/$c-balm || $T lm train --data data/$c --tokenizer vocab --arch transformer --layers 3 \
      --width 192 --heads 4 --context 80 --chunk 64 --batch-size 32 --lr 0.002 --epochs 1 --out baseline/$c-balm \
      $(resume baseline/$c-balm) $Q
  done
fi

if has ppl; then
  mkdir -p ppl
  for c in $CORPORA; do
    cmp=""; for b in ralm balm; do [ -f baseline/$c-$b/metrics.json ] && cmp="$cmp baseline/$c-$b"; done
    out=ppl/$c${PPL_ENERGIES:+-$(echo $PPL_ENERGIES | tr ' ' '+')}
    [ -f $out/metrics.json ] || $T residual ppl --base base/$c-s0 \
      --energy $(for e in ${PPL_ENERGIES:-unit bit bit-minilm}; do echo energy/$c-$e; done) ${cmp:+--compare $cmp} \
      --data data/$c --split test --windows $WINDOWS --samples $SAMPLES --positions $POSITIONS \
      --position-samples $POS_SAMPLES --precision $PREC --out $out
  done
fi

if has judge; then  # a paper-c detector trained on negatives of ANOTHER base LM (seed 1, top-k 10)
  for c in $JUDGED; do
    done_run base/$c-s1 || $T lm train --data data/$c --tokenizer vocab $LM --epochs 1 --seed 1 \
      --out base/$c-s1 $(resume base/$c-s1) $Q
    for s in train dev; do
      [ -f neg/$c-s1-$s.jsonl ] || $T negatives generate --data data/$c --generator base/$c-s1 --vocab vocab \
        --split $s $WIN --k 2 --top-k 10 --max-windows $([ $s = train ] && echo 4000 || echo 400) \
        --out neg/$c-s1-$s.jsonl $Q
    done
    done_run judge/$c || $T detect train --train neg/$c-s1-train.jsonl --val neg/$c-s1-dev.jsonl --vocab vocab \
      --energy unitransf --init base/$c-s1 --lr 0.0003 --batch-size 32 --epochs 1 --precision $PREC \
      --out judge/$c $(resume judge/$c) $Q
  done
fi

if has generate; then
  mkdir -p gen
  for c in $CORPORA; do
    for e in unit bit-minilm; do
      judge=""; [ -f judge/$c/detector.json ] && judge="--judge judge/$c"
      [ -f gen/$c-$e/metrics.json ] || $T residual generate --base base/$c-s0 --energy energy/$c-$e \
        --data data/$c --split test --windows $WINDOWS --n $N_GEN --top-k 10 --precision $PREC $judge \
        --out gen/$c-$e $Q
    done
  done
fi

