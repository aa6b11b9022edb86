#!/usr/bin/env bash
# Paper d's table 1 on one corpus of pipeline-v2 (issue 35): the base LM, RALM and BALM (--compare)
# and the joint models of the control energy (lmstats trained on held-out windows) and of the
# training-split UniT at its dev optimum, by `residual ppl` on the same test windows, fp32, with
# paired bootstrap intervals. Cached: a finished output is skipped.
#   [NAME=... EXTRA_ENERGIES=...] bash bench/generation/table1.sh WORK CORPUS        (after pipeline-v2.sh's base negatives held
#                                                       energies baselines; or heldout.sh for news)
set -euo pipefail
W=${1:?usage: table1.sh WORK CORPUS}; C=${2:?corpus}
T=${TEXTEBM:-textebm}
WINDOWS=${WINDOWS:-300}; SAMPLES=${SAMPLES:-1000}; BOOT=${BOOT:-1000}
cd "$W"
done_run() { [ -f "$1/metrics.json" ] && grep -q '"completed": true' "$1/metrics.json"; }
ctl=energy/$C-lmstats-held-w0; done_run $ctl || ctl=energy/$C-lmstats-held   # heldout.sh's name
es=""; for e in $ctl energy/$C-unit-cont-w0 ${EXTRA_ENERGIES:-}; do
  done_run $e && es="$es $e" || echo "table1: $e is not trained yet; left out" >&2
done
cmp=""; for b in ralm balm; do done_run baseline/$C-$b && cmp="$cmp baseline/$C-$b"; done
out=ppl/$C-${NAME:-table1}
mkdir -p ppl
[ -f $out/metrics.json ] || $T residual ppl --base base/$C --energy $es ${cmp:+--compare $cmp} --data data/$C \
  --split test --windows $WINDOWS --samples $SAMPLES --precision fp32 --bootstrap $BOOT --out $out --no-progress
