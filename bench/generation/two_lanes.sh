#!/usr/bin/env bash
# Paper d's table 1 for one corpus on a 2-core CPU (issue 35): pipeline-v2.sh's stages in two lanes
# of one thread each, ordered so that they end about together, then table 1 scored on both threads.
#
#   CORPORA=news bash bench/generation/two_lanes.sh WORK
#
# lane A: base LM, negatives, held-out negatives; the energies that need no MLM (the control,
#         UniT, BiT*); BiT*'s `residual ppl` on its own (PPL_NAME=bitstar)
# lane B: (once lane A's base stage has made WORK/data/CORPUS and WORK/vocab) the MLM behind BiT;
#         BALM; (once lane A's negatives exist) BiT from the MLM; (once lane A's base LM is trained)
#         RALM; (once lane A's energies are trained) the `residual ppl` of every energy but BiT*
#         (PPL_NAME=energies)
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
  case $e in bit-minilm*) ;; *) small="$small $e" ;; esac
done
has() { [[ " $1 " == *" $2 "* ]]; }
mkdir -p "$W"; W=$(cd "$W" && pwd)
rm -f "$W/.lanes-failed"
go_on() {  # before each step of a lane: not if the other lane failed
  [ ! -f "$W/.lanes-failed" ] || { echo "two_lanes.sh: the other lane failed" >&2; return 1; }
}
made() { [ -e "$W/$1" ]; }  # made PATH: lane A wrote it (textebm writes atomically)
finished() {  # finished RUN: lane A's training of WORK/RUN completed
  [ -f "$W/$1/metrics.json" ] && grep -q '"completed": true' "$W/$1/metrics.json"
}
waitfor() {  # waitfor TEST ARG...: (lane B) until `TEST ARG` holds for each ARG; 1 if lane A failed or ended without it
  local test=$1 x; shift
  for x in "$@"; do
    until $test "$x"; do
      go_on || return
      if ! kill -0 "$a" 2>/dev/null; then  # lane A is over (or was killed): one last look
        $test "$x" && break
        echo "two_lanes.sh: lane A ended without making what lane B waits for ($test $x)" >&2
        return 1
      fi
      sleep 20
    done
  done
}
# Each lane stops at its first failing step (`|| return`: set -e does not hold in a function run
# under `||`), and marks the failure so that the other lane stops before its next step.
lane_a() {
  go_on && bash "$P" "$W" base negatives held || return
  if [ -n "$a_energies" ]; then go_on && ENERGIES="$a_energies" bash "$P" "$W" energies || return; fi
  if has "$ENERGIES" bit-minilm; then
    go_on && ENERGIES=bit-minilm BASELINES= PPL_NAME=bitstar bash "$P" "$W" ppl || return
  fi
}
lane_b() {
  waitfor made "data/$c" vocab || return
  if [ -n "$b_energies" ]; then go_on && bash "$P" "$W" mlm || return; fi
  if has "$BASELINES" balm; then go_on && BASELINES=balm bash "$P" "$W" baselines || return; fi
  if [ -n "$b_energies" ]; then
    waitfor made "neg/$c-train.jsonl" "neg/$c-dev.jsonl" || return
    go_on && ENERGIES="$b_energies" bash "$P" "$W" energies || return
  fi
  if has "$BASELINES" ralm; then
    waitfor finished "base/$c" || return
    go_on && BASELINES=ralm bash "$P" "$W" baselines || return
  fi
  # the energies' rows for table 1. RALM is lane B's for news: there lane A's UniT and BiT*
  # scoring double with the corpus while the MLM stops on its dev loss (an estimate from brown v3's
  # seconds of one thread, news twice: lane A about 50,000 with RALM's 4,400, lane B about 38,000).
  # On brown v3 itself lane B (12,830 + 3,664 + 3,323 + 2,353, and RALM's 2,179) ends about 0.8 h
  # after lane A (19,523 and its negatives, about 2,000).
  if [ -n "$small" ]; then
    waitfor finished $(for e in $small; do echo "energy/$c-$e-w0"; done) || return
    go_on && ENERGIES="$small" BASELINES= PPL_NAME=energies bash "$P" "$W" ppl || return
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
