#!/usr/bin/env bash
# The GPU path in one short run (for a lent CUDA machine; never part of `make test`):
#   1. the whole test suite with a CUDA GPU visible: training goes through accelerate, which puts
#      every model on the GPU; inference picks the GPU too (precision.inference_device);
#   2. paper d's residual pipeline on real data on the GPU: negatives from the base LM, a UniT
#      energy trained by conditional NCE, `residual ppl` in fp32, and the base LM's test NLL in fp32
#      and in bf16 (the bf16 offset on a GPU), each step timed.
# Usage (repo root; WORK holds data/news, base/news and vocab from bench/generation/pipeline-v2.sh):
#   OUT=results/ WORK=runs/gen-v2 bash bench/gpu/check.sh [SUITE_SECONDS] [PIPELINE_SECONDS]
set -uo pipefail
O=${OUT:?set OUT}; W=${WORK:?set WORK}
A=${1:-220}; B=${2:-150}
NTRAIN=${NTRAIN:-4000}; NDEV=${NDEV:-500}; NTEST=${NTEST:-100}; SAMPLES=${SAMPLES:-500}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
# packages the device image lacks (jiwer for rerank, gguf), carried as wheels in .whl (device README)
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
{ date -u; nvidia-smi -L; $PY -c "import sys, torch; print(sys.version.split()[0], torch.__version__,
  torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda',
  'bf16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else '')"; } > $O/env.txt 2>&1
cat $O/env.txt

# 1. the suite on CUDA (workers share the GPU); then the failures alone, serially
if [ "$A" -gt 0 ]; then t0=$(date +%s)
OMP_NUM_THREADS=1 timeout $A $PY -m pytest -q -n 12 -p no:randomly --durations=15 tests > $O/suite.txt 2>&1
echo "suite rc=$? in $(( $(date +%s) - t0 )) s" | tee -a $O/suite.txt
tail -25 $O/suite.txt
if grep -q "failed\|error" $O/suite.txt; then
  OMP_NUM_THREADS=1 timeout 60 $PY -m pytest -q --lf --tb=short -p no:randomly tests > $O/suite-rerun.txt 2>&1
  echo "rerun rc=$?" | tee -a $O/suite-rerun.txt; tail -40 $O/suite-rerun.txt
fi; fi

[ "$B" -gt 0 ] || exit 0
# 2. paper d on the GPU, real data (news)
G=${G:-/tmp/gpu-d}; rm -rf $G; mkdir -p $G; T="$PY -m textebm"
WIN="--length 64 --contexts 48 --stride 16"
step() { local name=$1; shift; local s=$(date +%s.%N)
  timeout $B "$@" > $G/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s" | tee -a $O/pipeline.txt
  tail -3 $G/$name.log; return $rc; }
cd $W
step neg-train $T negatives generate --data data/news --generator base/news --vocab vocab --split train $WIN \
  --k 8 --top-k 0 --max-windows $NTRAIN --batch-size 512 --precision fp32 --out $G/train.jsonl --no-progress &&
step neg-dev $T negatives generate --data data/news --generator base/news --vocab vocab --split dev $WIN \
  --k 8 --top-k 0 --max-windows $NDEV --batch-size 512 --precision fp32 --out $G/dev.jsonl --no-progress &&
step energy $T detect train --train $G/train.jsonl --val $G/dev.jsonl --vocab vocab --loss bce --negatives random \
  --energy unitransf --init base/news --pool continuation --dropout 0.1 --lr 0.0003 --batch-size 64 \
  --epochs 2 --precision fp32 --out $G/energy --no-progress &&
step ppl $T residual ppl --base base/news --energy $G/energy --data data/news --split test --windows $NTEST \
  --samples $SAMPLES --precision fp32 --bootstrap 200 --out $G/ppl
# the base LM's token log-probabilities in bf16 against fp32 on this device (the bf16 offset)
step bf16-offset $PY $OLDPWD/bench/gpu/bf16_offset.py base/news/model data/news --windows 400 --out $G/bf16-offset.json
for f in energy/metrics.json ppl/metrics.json bf16-offset.json; do
  [ -f $G/$f ] && cp $G/$f $O/$(echo $f | tr / -)
done
cat $O/pipeline.txt
