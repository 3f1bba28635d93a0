#!/usr/bin/env bash
# The whole call for a lent CUDA device machine (bench/README.md, "GPU check"):
# install this checkout into the machine's Python (its torch and Triton), then run
# bench/gpu_check.py once. The table and the log go to $OUT (the folder the device
# tool brings back) or, without it, to bench/results/.
#
#   bash bench/device_run.sh            # on the device machine
#   bash bench/device_run.sh --smoke    # rehearsal on a CPU machine (gpu_check --smoke)
#   GPU_CHECK_LIMIT_S=470 bash bench/device_run.sh --accumulate-ratio   # the script's limit (default 295 s)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/results}"
mkdir -p "$out"
source bench/device_install.sh
set -o pipefail
PYTHONUNBUFFERED=1 timeout "${GPU_CHECK_LIMIT_S:-295}" python3 bench/gpu_check.py --out-dir "$out" "$@" 2>&1 | tee "$out/gpu_check.log"
