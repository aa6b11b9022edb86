#!/usr/bin/env bash
# Paper d's energies trained on text the base LM did not train on (issue 35). The base LM of
# pipeline-v2.sh fits its training split 0.5 nats a token better than new text (news: 4.00 against
# 4.51 on dev), so an energy trained on that split's windows learns a gap that test text does not
# have. Here the energy's windows are the dev split's (which the base LM only early-stopped on),
# split by document into the energy's training and validation windows; residual ppl on test.
#
#   bash bench/generation/heldout.sh WORK [CORPUS]      (WORK: a pipeline-v2.sh folder with base/ and vocab/)
# Every step is cached (a finished output is skipped, an interrupted one resumes). EXTRA_ENERGIES:
# more energy folders for residual ppl (e.g. a checkpoint of an energy trained on the train split).
set -euo pipefail
W=${1:?usage: heldout.sh WORK [CORPUS]}; C=${2:-news}
T=${TEXTEBM:-textebm}
HERE=$(cd "$(dirname "$0")" && pwd)
WINDOWS=${WINDOWS:-300}; SAMPLES=${SAMPLES:-1000}
cd "$W"
done_run() { [ -f "$1/metrics.json" ] && grep -q '"completed": true' "$1/metrics.json"; }
resume() { [ -f "$1/config.json" ] && echo --resume || true; }
Q="--no-progress"
mkdir -p neg energy ppl-held
CORPORA=$C bash "$HERE/pipeline-v2.sh" . held   # the dev split's windows, split by document (cached)
common="--train neg/$C-held-train.jsonl --val neg/$C-held-val.jsonl --vocab vocab --loss bce --negatives random \
  --schedule cosine --warmup 0.05 --keep-best --patience 2 --epochs 20 --precision fp32 $Q"
out=energy/$C-lmstats-held
done_run $out || $T detect train $common --energy lmstats --base base/$C --lr 0.01 --batch-size 64 --out $out $(resume $out)
out=energy/$C-unit-cont-held
done_run $out || $T detect train $common --energy unitransf --init base/$C --pool continuation --dropout 0.1 \
  --grad-clip 10 --lr 0.0003 --batch-size 32 --out $out $(resume $out)
es="energy/$C-lmstats-held energy/$C-unit-cont-held"
done_run energy/$C-unit-cont-w0 && es="$es energy/$C-unit-cont-w0"   # the same energy trained on the LM's own text
es="$es ${EXTRA_ENERGIES:-}"                                           # any other energy folders to compare
[ -f ppl-held/$C/metrics.json ] || $T residual ppl --base base/$C --energy $es --data data/$C --split test \
  --windows $WINDOWS --samples $SAMPLES --precision fp32 --bootstrap 1000 --out ppl-held/$C
