#!/usr/bin/env bash
# Paper d (residual EBM generation), issue 35: energies that learn from the user's own corpus,
# compared fairly with RALM. The same pipeline as pipeline.sh with what the issue asks:
#   - every model to its dev optimum: the base LM, RALM, BALM and the MLM behind BiT train with
#     --keep-best --patience (early stopping on the dev split), on the same tokens;
#   - every training window of the split (--max-windows 0), 8 negatives per prefix drawn by the
#     base LM untruncated (a pool: each epoch the loss takes one of them at random);
#   - energies on the continuation only (--pool continuation) beside the mean over the window,
#     early stopping on the dev conditional-NCE loss; a learning curve over 6,000 / 25,000 / all
#     training windows (--max-windows of detect train: a seeded subset, nested);
#   - the sceptic's control (--energy lmstats: linear in the base LM's statistics), trained alike on
#     windows of text the base LM did not train on (the dev split's, split by document: lmstats-held);
#   - residual ppl in fp32 with paired bootstrap intervals (--bootstrap).
# Every step is cached (an interrupted one resumes; a finished file output is skipped), so the script
# can be stopped and started again, and a later session continues it. A training run is called
# again with --resume, finished or not: its own check compares the options with its config.json, so a
# finished run trained with other settings stops the pipeline (exit 2, naming them) rather than
# being kept as if it were the one asked for.
#
#   bash bench/generation/pipeline-v2.sh WORK [STAGE...]
#   stages: base negatives held probe mlm energies baselines ppl table3 generate   (default: all, in order)
#   CORPORA="news" CURVE="6000 25000 0" ... override the settings below (the sizes too: tests/
#   test_pipeline.py runs every stage end to end on a toy corpus with tiny ones)
# Paper d's table 1 on a corpus (base LM, RALM, BALM and the joint models of the control and the
# training-split energies, on the same test windows) is the ppl stage over the full training split:
#   CORPORA=news CURVE=0 ENERGIES="lmstats-held unit-cont bit-cont" PPL_NAME=table1 \
#     bash bench/generation/pipeline-v2.sh WORK ppl                          -> WORK/ppl/news-table1-w0
# with MiniLM's BiT* (the paper's starred row: --pool mean over MiniLM's own word pieces, lr 5e-5,
# MINILM_STEPS x 16 training windows; about 40 min of training and 2 h of scoring on one CPU thread):
#   CORPORA=news CURVE=0 ENERGIES="lmstats-held unit-cont bit-cont bit-minilm" PPL_NAME=table1-bitstar \
#     bash bench/generation/pipeline-v2.sh WORK energies ppl
# or BiT*'s scoring first, on its own (beside other training), and the table taking its rows:
#   CORPORA=news CURVE=0 ENERGIES=bit-minilm BASELINES= PPL_NAME=bitstar bash ... WORK ppl
#   CORPORA=news CURVE=0 ENERGIES="lmstats-held unit-cont bit-cont bit-minilm" PPL_NAME=table1-bitstar \
#     PPL_REUSE=bitstar bash ... WORK ppl                      (--reuse WORK/ppl/news-bitstar-w0)
# or every stage of table 1 on a 2-core CPU, in two lanes of one thread: bench/generation/two_lanes.sh;
# and energies on text the base LM did not train on (the dev split's windows, split by document):
#   CORPORA=news CURVE=0 ENERGIES="lmstats-held unit-cont-held unit-cont" PPL_NAME=held \
#     bash bench/generation/pipeline-v2.sh WORK held energies ppl
set -euo pipefail
W=${1:?usage: pipeline-v2.sh WORK [STAGE...]}; shift || true
STAGES=${*:-base negatives held probe mlm energies baselines ppl table3 generate}
T=${TEXTEBM:-textebm}
PY=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
CORPORA=${CORPORA:-news brown}
CURVE=${CURVE:-6000 25000 0}       # training windows of the learning curve (0: all)
ENERGIES=${ENERGIES:-lmstats-held unit-cont unit-mean bit-cont}  # NAME-held: on held-out windows
BASELINES=${BASELINES-ralm balm}  # the baselines stage's LMs (and ppl's --compare; BASELINES= for none)
PPL_NAME=${PPL_NAME:-}             # ppl's output: ppl/CORPUS-[PPL_NAME-]wN (table 1: PPL_NAME=table1)
PPL_REUSE=${PPL_REUSE:-}           # PPL_NAMEs of finished ppl outputs (of each corpus and size) whose energies' rows are taken (--reuse)
WINDOWS=${WINDOWS:-300}            # test prefixes of residual ppl
SAMPLES=${SAMPLES:-1000}           # base-LM samples per prefix behind log Z
K=${K:-8}                          # negatives per training prefix (a pool; the loss draws one per epoch)
DEV_WINDOWS=${DEV_WINDOWS:-1000}   # dev windows with negatives (the energies' early stopping)
BOOT=${BOOT:-1000}                 # bootstrap resamples of ppl's and table 3's intervals
ENERGY_EPOCHS=${ENERGY_EPOCHS:-20}
for e in $ENERGIES; do  # every name checked before anything is written
  case ${e%-held} in lmstats|unit-cont|unit-mean|bit-cont|bit-minilm) ;; *)
    echo "pipeline-v2.sh: ENERGIES: unknown energy '$e' (lmstats, unit-cont, unit-mean, bit-cont, bit-minilm, each also with -held)" >&2
    exit 2 ;; esac
done
[[ ${MINILM_STEPS:-500} =~ ^[1-9][0-9]*$ ]] || { echo "pipeline-v2.sh: MINILM_STEPS must be a positive number of steps, got '$MINILM_STEPS'" >&2; exit 2; }
for b in $BASELINES; do
  case $b in ralm|balm) ;; *) echo "pipeline-v2.sh: BASELINES: unknown baseline '$b' (ralm, balm)" >&2; exit 2 ;; esac
done
mkdir -p "$W"; cd "$W"
has() { [[ " $STAGES " == *" $1 "* ]]; }
done_run() { [ -f "$1/metrics.json" ] && grep -q '"completed": true' "$1/metrics.json"; }
resume() { [ -f "$1/config.json" ] && echo --resume || true; }
same_models() {  # same_models OUT RUN...: OUT/metrics.json (residual ppl) scored exactly these energies and LMs
  $PY -c '
import json, sys
from pathlib import Path
out, want = sys.argv[1], sorted(Path(r).name for r in sys.argv[2:])
m = json.loads(Path(out, "metrics.json").read_text())
have = sorted([Path(x["energy"]).parent.name for x in m["models"]] + [Path(x["model"]).parent.name for x in m["compare"]])
if have != want:
    sys.exit("pipeline-v2.sh: %s scored %s, not %s: set PPL_NAME to write the new set beside it"
             % (out, ", ".join(have), ", ".join(want)))
' "$@"
}
Q="--no-progress"
LM=${LM:---arch transformer --layers 2 --width 128 --heads 4 --context 80 --chunk 64 --batch-size 32 --lr 0.002}
STOP=${STOP:---epochs 30 --keep-best --patience 1}   # to the dev optimum
WIN=${WIN:---length 64 --contexts 48 --stride 16}
# the MLM: 30 epochs ended at the cap still improving on both corpora; 100 leave the stop to the dev loss
MLM=${MLM:---layers 2 --width 128 --heads 4 --max-len 80 --batch-size 32 --lr 0.0005 --epochs 100 --keep-best --patience 2}
RALM=${RALM:---layers 2 --width 128 --heads 4 --context 80 --chunk 64 --batch-size 32 --lr 0.002}   # phi: UniT's size
BALM=${BALM:---arch transformer --layers 3 --width 192 --heads 4 --context 80 --chunk 64 --batch-size 32 --lr 0.002}
TABLE3=${TABLE3:---examples 30 --candidates 10 --completions 100}
GEN=${GEN:---windows 200 --n 100 --top-k 10}   # Algorithm 1 on test prefixes: figures 2 (right) and 3
EBATCH=${EBATCH:-32}
MINILM_STEPS=${MINILM_STEPS:-500}  # bit-minilm (BiT*, external data): 500 x 16 windows drawn from all, as the first runs

if has base; then
  for c in $CORPORA; do [ -d data/$c ] || $T data prepare $c --out data/$c; done
  [ -d vocab ] || $T tokenizer train --data $(for c in $CORPORA; do echo data/$c; done) --vocab-size 8000 --out vocab
  for c in $CORPORA; do
    $T lm train --data data/$c --tokenizer vocab $LM $STOP --seed 0 --out base/$c $(resume base/$c) $Q
  done
fi

if has negatives; then  # untruncated (top-k 0): eq. 3 and Theorem 1 need P_LM's full support
  mkdir -p neg
  for c in $CORPORA; do
    [ -f neg/$c-train.jsonl ] || $T negatives generate --data data/$c --generator base/$c --vocab vocab \
      --split train $WIN --k $K --top-k 0 --max-windows 0 --out neg/$c-train.jsonl $Q
    [ -f neg/$c-dev.jsonl ] || $T negatives generate --data data/$c --generator base/$c --vocab vocab \
      --split dev $WIN --k $K --top-k 0 --max-windows $DEV_WINDOWS --out neg/$c-dev.jsonl $Q
  done
fi

if has held; then  # text the base LM did not train on, for NAME-held energies (docs/residual.md, "The
  mkdir -p neg     # energy's windows"): every dev window, split by document into training and validation
  for c in $CORPORA; do
    [ -f neg/$c-devall.jsonl ] || $T negatives generate --data data/$c --generator base/$c --vocab vocab \
      --split dev $WIN --k $K --top-k 0 --max-windows 0 --out neg/$c-devall.jsonl $Q
    [ -f neg/$c-held-train.jsonl ] || $PY "$HERE/split_windows.py" neg/$c-devall.jsonl --fraction 0.8 --seed 0 \
      --out neg/$c-held-train.jsonl neg/$c-held-val.jsonl
  done
fi

if has probe; then  # how much signal exists: zero-shot detectors from the base LM on the same untruncated negatives
  mkdir -p probe
  for c in $CORPORA; do
    for z in loglik fastdetectgpt; do
      [ -f probe/$c-$z/detector.json ] || $T detect fit --zeroshot $z --model base/$c --val neg/$c-dev.jsonl \
        --vocab vocab --out probe/$c-$z
    done
  done
fi

if has mlm; then  # BiT's body: a masked LM of the corpus, to its dev optimum
  for c in $CORPORA; do
    $T cloze train --data data/$c --tokenizer vocab --objective mlm $MLM --out mlm/$c $(resume mlm/$c) $Q
  done
fi

energy() {  # energy NAME CORPUS WINDOWS: one energy of the learning curve
  local e=$1 c=$2 n=$3 out=energy/$2-$1-w$3 windows="--train neg/$2-train.jsonl --val neg/$2-dev.jsonl"
  [[ $e == *-held ]] && windows="--train neg/$c-held-train.jsonl --val neg/$c-held-val.jsonl"
  local common="$windows --vocab vocab --loss bce --negatives random \
    --max-windows $n --schedule cosine --warmup 0.05 --keep-best --patience 2 --epochs $ENERGY_EPOCHS --precision fp32 $Q"
  case ${e%-held} in
    lmstats) $T detect train $common --energy lmstats --base base/$c --lr 0.01 --batch-size 64 \
      --out $out $(resume $out) ;;
    unit-cont) $T detect train $common --energy unitransf --init base/$c --pool continuation --dropout 0.1 \
      --grad-clip 10 --lr 0.0003 --batch-size $EBATCH --out $out $(resume $out) ;;
    unit-mean) $T detect train $common --energy unitransf --init base/$c --dropout 0.1 \
      --grad-clip 10 --lr 0.0003 --batch-size $EBATCH --out $out $(resume $out) ;;
    bit-cont) $T detect train $common --energy bitransf --init mlm/$c --pool continuation --dropout 0.1 \
      --grad-clip 0.25 --lr 0.0003 --batch-size $EBATCH --out $out $(resume $out) ;;
    bit-minilm) $T detect train $common --energy bitransf --init minilm-l6 --pool mean --dropout 0.1 \
      --grad-clip 0.25 --lr 0.00005 --batch-size 16 --max-steps $MINILM_STEPS --out $out $(resume $out) ;;
  esac
}

if has energies; then
  mkdir -p energy
  for c in $CORPORA; do
    for n in $CURVE; do
      for e in $ENERGIES; do energy $e $c $n; done
    done
  done
fi

if has baselines; then  # RALM (eq. 6, phi the size of UniT) and BALM (parameters of base + energy), to the dev optimum
  mkdir -p baseline
  for c in $CORPORA; do
    for b in $BASELINES; do
      out=baseline/$c-$b
      case $b in
        ralm) $T lm train --data data/$c --residual-of base/$c $RALM $STOP --out $out $(resume $out) $Q ;;
        balm) $T lm train --data data/$c --tokenizer vocab $BALM $STOP --out $out $(resume $out) $Q ;;
      esac
    done
  done
fi

if has ppl; then  # fp32: the effects are small; paired bootstrap intervals over the test windows
  mkdir -p ppl
  for c in $CORPORA; do
    for n in $CURVE; do
      out=ppl/$c-${PPL_NAME:+$PPL_NAME-}w$n
      cmp=""; for b in $BASELINES; do
        if done_run baseline/$c-$b; then cmp="$cmp baseline/$c-$b"; else echo "ppl: baseline/$c-$b not trained; left out" >&2; fi
      done
      es=""; for e in $ENERGIES; do
        if done_run energy/$c-$e-w$n; then es="$es energy/$c-$e-w$n"; else echo "ppl: energy/$c-$e-w$n not trained; left out" >&2; fi
      done
      [ -n "$es" ] || continue
      if [ -f $out/metrics.json ]; then  # done: with exactly these models, or another PPL_NAME is needed
        same_models $out $es $cmp || exit 2
        continue
      fi
      reuse=""; for r in $PPL_REUSE; do reuse="$reuse ppl/$c-$r-w$n"; done
      $T residual ppl --base base/$c --energy $es ${cmp:+--compare $cmp} --data data/$c --split test \
        --windows $WINDOWS --samples $SAMPLES --precision fp32 --bootstrap $BOOT ${reuse:+--reuse $reuse} --out $out
    done
  done
fi

if has table3; then  # the paper's table 3: P(x_t | x_<t) of the base LM and the joint model where a sample repeats a token
  mkdir -p table3
  for c in $CORPORA; do
    for e in bit-cont unit-cont; do
      done_run energy/$c-$e-w0 || continue
      [ -f table3/$c-$e/metrics.json ] || $T residual repetitions --base base/$c --energy energy/$c-$e-w0 \
        --data data/$c --split test $TABLE3 --bootstrap $BOOT \
        --out table3/$c-$e || echo "table3: $c $e did not finish (see above); the pipeline goes on" >&2
    done
  done
fi

if has generate; then  # Algorithm 1 (top-k candidates resampled by exp(-E)) beside the base LM's own samples
  mkdir -p gen
  for c in $CORPORA; do
    for e in bit-cont unit-cont; do
      done_run energy/$c-$e-w0 || continue
      [ -f gen/$c-$e/metrics.json ] || $T residual generate --base base/$c --energy energy/$c-$e-w0 --data data/$c \
        --split test $GEN --precision fp32 --out gen/$c-$e $Q \
        || echo "generate: $c $e did not finish (see above); the pipeline goes on" >&2
    done
  done
fi
