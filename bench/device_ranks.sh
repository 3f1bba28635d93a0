#!/usr/bin/env bash
# Ranks on real cores, on a lent device machine (bench/README.md, "GPU check"): issue #24's rows
# at N = 10^6, 2 forked ranks on 2 physical cores and 4 on 4 (taskset, one hardware thread a core),
# each against 1 rank on the same cores, with --phases (the timeline and the adapter zygote's decisions, docs/distributed.md rule 7).
# Run after bench/device_run.sh in the same warm machine (its install is kept), or alone (carry .whl).
#
#   bash bench/device_ranks.sh            # --repeat 5 (about 115 s a core set on the H200, 70 s at 3)
#   bash bench/device_ranks.sh 3          # fewer repeats
#   bash bench/device_ranks.sh 2 4        # 2 repeats, the 4-core set only
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/results}"
repeat="${1:-5}"
sets="${2:-2 4}"   # the core sets to run: 2 (2 forked ranks) and 4 (4 ranks)
mkdir -p "$out"
source bench/device_install.sh
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
status=0
# The first N CPUs that are each a physical core's first hardware thread (its thread_siblings_list
# begins with itself): 4 ranks on "cpus 0-3" were 2 cores if 0-1 and 2-3 were hyperthread pairs.
# (QCONFORM_SYS_CPU: another sysfs cpu folder, for tests/bench/test_device_scripts.py)
physical_cpus() {
  local want=$1 found=() cpu path first root="${QCONFORM_SYS_CPU:-/sys/devices/system/cpu}"
  for path in "$root"/cpu[0-9]*/topology/thread_siblings_list; do
    cpu=${path#"$root"/cpu}; cpu=${cpu%%/*}
    first=$(sed 's/[-,].*//' "$path")
    [ "$first" = "$cpu" ] && found+=("$cpu")
  done
  mapfile -t found < <(printf '%s\n' "${found[@]}" | sort -n)
  [ "${#found[@]}" -ge "$want" ] || { echo "device: fewer than $want physical cores" >&2; return 1; }
  (IFS=,; echo "${found[*]:0:$want}")
}
# file names under $OUT: letters, digits, '.', '_' and '-' only, or the device tool leaves them behind
for cores in $sets; do
  case $cores in 2) mode=forked ;; 4) mode=4 ;; *) echo "device: no core set $cores (2 or 4)"; status=1; continue ;; esac
  cpus=$(physical_cpus "$cores") || { status=1; continue; }
  echo "ranks on $cores physical cores: CPUs $cpus (siblings: $(for c in ${cpus//,/ }; do printf '%s ' "$(cat "${QCONFORM_SYS_CPU:-/sys/devices/system/cpu}/cpu$c/topology/thread_siblings_list")"; done))" | tee "$out/cpus-${cores}cores.log"
  timeout "$((45 * repeat + 30))" taskset -c "$cpus" python3 bench/bench_accumulate_ranks.py \
    --count 1000000 --repeat "$repeat" --mode "$mode" --phases 2>&1 | tee "$out/ranks-${cores}cores.log" || status=1
done
exit $status
