#!/usr/bin/env bash
# Paper d's table 1 for one corpus on a 2-core CPU (issue 35): pipeline-v2.sh's stages in two lanes
# of one thread each, ordered so that they end about together, then table 1 scored on both threads.
#
#   CORPORA=news bash bench/generation/two_lanes.sh WORK
#
# lane A: base LM, negatives, held-out negatives; the energies that need no MLM (the control,
#         UniT, BiT*); RALM; BiT*'s `residual ppl` on its own (PPL_NAME=bitstar)
# lane B: (once lane A's base stage has made WORK/data/CORPUS and WORK/vocab) the MLM behind BiT;
#         BALM; (once lane A's negatives exist) BiT from the MLM; (once lane A's energies are
#         trained) the `residual ppl` of every energy but BiT* (PPL_NAME=energies)
# then:   table 1, every energy with RALM and BALM (PPL_NAME=table1-bitstar; PPL_NAME=table1
#         without BiT*), on two threads: every energy's rows taken from the two runs above by
#         --reuse, so it scores only the LMs (minutes).
# From brown's steps as measured in runs/gen-v3 (1.2 M tokens, one thread each, AMD EPYC with
# avx512_bf16), an estimate: about 6 h a lane;
# news (2.4 M) about twice that. Every step is pipeline-v2's and cached, so the script can be
# stopped (or a session can end) and run again: it continues. The lanes log to WORK/lane-a.log and
# WORK/lane-b.log; pipeline-v2's settings (ENERGIES, SAMPLES, ...) pass through the environment.
set -euo pipefail
W=${1:?usage: CORPORA=CORPUS two_lanes.sh WORK}
P=$(cd "$(dirname "$0")" && pwd)/pipeline-v2.sh
c=${CORPORA:?two_lanes.sh: set CORPORA to one corpus}
[ "$(wc -w <<< "$c")" = 1 ] || { echo "two_lanes.sh: CORPORA: one corpus, got '$c'" >&2; exit 2; }
export CURVE=0
ENERGIES=${ENERGIES:-lmstats-held unit-cont bit-cont bit-minilm}
BASELINES=${BASELINES-ralm balm}
a_energies=""; b_energies=""; small=""  # small: the energies lane B scores (all but BiT*)
for e in $ENERGIES; do
  case $e in bit-cont*) b_energies="$b_energies $e" ;; *) a_energies="$a_energies $e" ;; esac
  [ "$e" = bit-minilm ] || small="$small $e"
done
has() { [[ " $1 " == *" $2 "* ]]; }
mkdir -p "$W"; W=$(cd "$W" && pwd)
rm -f "$W/.lanes-failed"
waitfor() {  # waitfor PATH...: until each exists (written atomically by textebm), or a lane failed
  for p in "$@"; do
    until [ -e "$p" ]; do
      [ -f "$W/.lanes-failed" ] && { echo "two_lanes.sh: the other lane failed" >&2; return 1; }
      sleep 20
    done
  done
}
waitdone() {  # waitdone RUN...: until each run's metrics.json says it completed, or a lane failed
  for r in "$@"; do
    until [ -f "$r/metrics.json" ] && grep -q '"completed": true' "$r/metrics.json"; do
      [ -f "$W/.lanes-failed" ] && { echo "two_lanes.sh: the other lane failed" >&2; return 1; }
      sleep 20
    done
  done
}
# Each lane stops at its first failing step (`|| return`: set -e does not hold in a function run
# under `||`), and marks the failure so that the other lane stops waiting for it.
lane_a() {
  bash "$P" "$W" base negatives held || return
  if [ -n "$a_energies" ]; then ENERGIES="$a_energies" bash "$P" "$W" energies || return; fi
  if has "$BASELINES" ralm; then BASELINES=ralm bash "$P" "$W" baselines || return; fi
  if has "$ENERGIES" bit-minilm; then ENERGIES=bit-minilm BASELINES= PPL_NAME=bitstar bash "$P" "$W" ppl || return; fi
}
lane_b() {
  waitfor "$W/data/$c" "$W/vocab" || return
  if [ -n "$b_energies" ]; then bash "$P" "$W" mlm || return; fi
  if has "$BASELINES" balm; then BASELINES=balm bash "$P" "$W" baselines || return; fi
  if [ -n "$b_energies" ]; then
    waitfor "$W/neg/$c-train.jsonl" "$W/neg/$c-dev.jsonl" || return
    ENERGIES="$b_energies" bash "$P" "$W" energies || return
  fi
  if [ -n "$small" ]; then  # lane B's steps are the shorter (brown v3: 5.5 h of one thread; lane A's 6.0 h and its negatives)
    waitdone $(for e in $small; do echo "$W/energy/$c-$e-w0"; done) || return
    ENERGIES="$small" BASELINES= PPL_NAME=energies bash "$P" "$W" ppl || return
  fi
}
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
( lane_a > "$W/lane-a.log" 2>&1 || { touch "$W/.lanes-failed"; exit 1; } ) & a=$!
( lane_b > "$W/lane-b.log" 2>&1 || { touch "$W/.lanes-failed"; exit 1; } ) & b=$!
ok=0; wait $a || ok=$?; wait $b || ok=$?
if [ $ok != 0 ]; then
  echo "two_lanes.sh: a lane failed: the end of $W/lane-a.log and $W/lane-b.log says why" >&2
  tail -n 5 "$W/lane-a.log" "$W/lane-b.log" >&2
  exit 1
fi
name=table1; reuse=""
if [ -n "$small" ]; then reuse=energies; fi
if has "$ENERGIES" bit-minilm; then name=table1-bitstar; reuse="bitstar $reuse"; fi
OMP_NUM_THREADS=2 ENERGIES="$ENERGIES" BASELINES="$BASELINES" PPL_NAME=$name PPL_REUSE=$reuse bash "$P" "$W" ppl
echo "two_lanes.sh: table 1 in $W/ppl/$c-$name-w0/report.md"
