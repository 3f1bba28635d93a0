#!/usr/bin/env bash
# Ranks on real cores, on a lent device machine (bench/README.md, "GPU check"): issue #24's rows
# at N = 10^6, 2 forked ranks on 2 cores and 4 on 4 (taskset), each against 1 rank on the same
# cores, with --phases (the timeline and the adapter zygote's decisions, docs/distributed.md rule 7).
# Run after bench/device_run.sh in the same warm machine (its install is kept), or alone (carry .whl).
#
#   bash bench/device_ranks.sh            # --repeat 5 (about 200 s a core set where import torch takes 5 s)
#   bash bench/device_ranks.sh 3          # fewer repeats
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/results}"
repeat="${1:-5}"
mkdir -p "$out"
source bench/device_install.sh
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
status=0
# file names under $OUT: letters, digits, '.', '_' and '-' only, or the device tool leaves them behind
for set in "2:0-1:forked" "4:0-3:4"; do
  IFS=: read -r cores cpus mode <<<"$set"
  timeout "$((45 * repeat + 30))" taskset -c "$cpus" python3 bench/bench_accumulate_ranks.py \
    --count 1000000 --repeat "$repeat" --mode "$mode" --phases 2>&1 | tee "$out/ranks-${cores}cores.log" || status=1
done
exit $status
