#!/usr/bin/env bash
# Paper d's baselines on a lent GPU (issue 35): the news RALM and BALM and the brown base LM, each
# by bench/generation/pipeline-v2.sh's own stages and settings (LM, RALM, BALM, STOP: to the dev
# optimum), trained side by side on one GPU. The CPU would need about 3 hours for each.
#   here:   bash bench/gpu/baselines.sh pack WORK         (WORK: pipeline-v2's folder; writes .gpu/pack.tar)
#   there:  OUT=... bash bench/gpu/baselines.sh run WORK SECONDS
# `run` unpacks at WORK's absolute path (a RALM records its base's path), trains for at most SECONDS
# and writes one tar per run to $OUT: a finished run's model, config and metrics, or an unfinished
# one's folder without `last/` (its checkpoint, for `--resume`). `cat RUN.tar.part* | tar -x -C WORK` here.
set -uo pipefail
cmd=${1:?pack|run}; W=$(realpath -m "${2:?WORK}")
HERE=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-baseline/news-ralm baseline/news-balm base/brown}
if [ "$cmd" = pack ]; then
  mkdir -p "$HERE/.gpu"
  tar -C "$W" -cf "$HERE/.gpu/pack.tar" --exclude='*/test.jsonl' data/news data/brown vocab \
    base/news/model base/news/config.json base/news/metrics.json $(cd "$W" && ls -d base/brown/model base/brown/*.json 2>/dev/null)
  gzip -f -1 "$HERE/.gpu/pack.tar"; ls -la "$HERE/.gpu"; exit 0
fi
S=${3:?SECONDS}; O=${OUT:?set OUT}
[ -f "$W/vocab/tokenizer.json" ] || { mkdir -p "$W" && tar -C "$W" -xzf "$HERE/.gpu/pack.tar.gz"; } || exit 1
export PYTHONPATH=$HERE/src PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2
export TEXTEBM="python3 -m textebm" PYTHON=python3
cd "$W" && mkdir -p baseline
nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
t0=$(date +%s)
train() {  # train RUN (base/CORPUS or baseline/CORPUS-ralm|balm) by pipeline-v2's own stage and settings
  local c=${1#*/}; c=${c%%-*}
  case $1 in
    baseline/*) CORPORA=$c BASELINES=${1##*-} bash "$HERE/bench/generation/pipeline-v2.sh" . baselines ;;
    base/*) CORPORA=$c bash "$HERE/bench/generation/pipeline-v2.sh" . base ;;
  esac
}
for r in $RUNS; do timeout "$S" bash -c "$(declare -f train); HERE='$HERE' train $r" > $(echo $r | tr / -).log 2>&1 & done
wait; pkill -f "python3 -m textebm lm train" && sleep 2   # timeout ends the shells; their LMs too
echo "trained for $(( $(date +%s) - t0 )) s"
# what comes back: at most 8 files of 15 MiB, 60 MiB in all (the device tool's limits), runs in order
mkdir -p /tmp/pack; n=0; total=0
for r in $RUNS; do
  name=$(echo $r | tr / -); log=$name.log
  if grep -q '"completed": true' $r/metrics.json 2>/dev/null; then
    tar -cf /tmp/pack/$name.tar $r/model $r/config.json $r/metrics.json $log
  else
    tar -cf /tmp/pack/$name.tar --exclude="$r/last" $r $log
  fi
  split -b 15M -d /tmp/pack/$name.tar /tmp/pack/$name.tar.part && rm /tmp/pack/$name.tar
  size=$(du -cm /tmp/pack/$name.tar.part* | tail -n 1 | cut -f1); parts=$(ls /tmp/pack/$name.tar.part* | wc -l)
  if [ $((n + parts)) -le 8 ] && [ $((total + size)) -le 60 ]; then
    mv /tmp/pack/$name.tar.part* "$O/"; n=$((n + parts)); total=$((total + size)); echo "== $r: $size MiB back"
  else echo "== $r: $size MiB LEFT BEHIND (limits)"; fi
  grep -E "validation|stopped|step [0-9]+0{3}/" $log | tail -n 14
done
