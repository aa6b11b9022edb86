#!/usr/bin/env bash
# The test suite's wall time, side by side in one run: on pytest-xdist workers (one per core, one
# thread each, a file per worker: what `make test` runs) and in one process on every core.
# Run it with nothing else on the machine: `bash bench/quiet.sh bash bench/suite_time.sh`.
# Writes bench/results/performance/suite_time.md (the two times, the CPU, the 25 slowest tests).
set -u
cd "$(dirname "$0")/.."
out=bench/results/performance/suite_time.md
n=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # the cores, whatever OMP_NUM_THREADS says
log=$(mktemp -d); trap 'rm -rf "$log"' EXIT
run() {  # NAME THREADS PYTEST-ARGS...
  local name=$1 threads=$2; shift 2
  local s=$(date +%s)
  OMP_NUM_THREADS=$threads .venv/bin/python -m pytest -q --durations=25 -p no:cacheprovider "$@" > $log/$name.log 2>&1
  echo "$? $(( $(date +%s) - s ))"
}
read xrc xs < <(run xdist 1 -n $n --dist loadfile)
read src ss < <(run serial $n -n 0)
{
  echo "# Test suite wall time, $(date -u +%F)"
  echo
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $n cores, $(lscpu | grep -o 'avx512_bf16\|amx_bf16' | sort -u | tr '\n' ' ')"
  echo "(empty: no native bf16); torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')."
  echo
  echo "| how | exit | wall time | result |"
  echo "|---|---:|---:|---|"
  echo "| \`make test\`: $n xdist workers x 1 thread, --dist loadfile | $xrc | $xs s | $(tail -1 $log/xdist.log) |"
  echo "| one process, $n threads | $src | $ss s | $(tail -1 $log/serial.log) |"
  echo
  echo "Ratio: $(awk "BEGIN{printf \"%.2f\", $ss/$xs}")x."
  for name in xdist serial; do
    echo; echo "## 25 slowest, $name"; echo; echo '```'
    sed -n '/slowest 25 durations/,/^$/p' $log/$name.log | grep -E '^[0-9.]+s (call|setup|teardown) '
    echo '```'
  done
} > $out
cat $out
