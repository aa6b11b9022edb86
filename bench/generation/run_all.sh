#!/usr/bin/env bash
# The whole of paper d's benchmark, one corpus at a time (news first, the CC-News analogue, then
# brown, the books analogue), every step cached and resumable: bash bench/generation/run_all.sh WORK
set -euo pipefail
here=$(dirname "$0")
for c in ${CORPORA:-news brown}; do
  CORPORA=$c bash "$here/pipeline.sh" "$1" base negatives energies baselines ppl judge generate
done
