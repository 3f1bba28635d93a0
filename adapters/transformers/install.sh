#!/usr/bin/env bash
# Make Hugging Face transformers' own virtual environment for the `transformers` adapter
# (docs/engines/transformers.md).
#
#   bash adapters/transformers/install.sh [ENV_DIR]   (default: .venv-transformers in the checkout)
#
# The version is a parameter: QCONFORM_TRANSFORMERS_VERSION (default 5.23.0). torch is pinned
# to the machine's CPU wheel, torch==2.13.0+cpu (QCONFORM_TORCH_PIN to change it): a looser pin lets
# pip resolve the multi-GB CUDA build from PyPI. A cache folder keeps a finished environment
# between runs: QCONFORM_ENGINE_CACHE (default ~/.cache/qconform) holds
# transformers-<version>/, and ENV_DIR becomes a link to it.
set -euo pipefail
VERSION="${QCONFORM_TRANSFORMERS_VERSION:-5.23.0}"
TORCH_PIN="${QCONFORM_TORCH_PIN:-torch==2.13.0+cpu}"
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
ENV_DIR="${1:-$ROOT/.venv-transformers}"
CACHE="${QCONFORM_ENGINE_CACHE:-$HOME/.cache/qconform}/transformers-$VERSION"
PYTHON="${PYTHON:-python3.11}"

if [ ! -x "$CACHE/bin/python" ] || [ ! -f "$CACHE/.qconform-complete" ]; then
    rm -rf "$CACHE"
    mkdir -p "$(dirname "$CACHE")"
    "$PYTHON" -m venv "$CACHE"
    # one resolution with both pins: the +cpu local version is found in pip's find-links (this
    # machine: /opt/wheels) or in the index of QCONFORM_TORCH_INDEX (https://download.pytorch.org/whl/cpu)
    "$CACHE/bin/pip" install -q ${QCONFORM_TORCH_INDEX:+--extra-index-url "$QCONFORM_TORCH_INDEX"} \
        "$TORCH_PIN" "transformers==$VERSION"
    "$CACHE/bin/python" -c "import torch, transformers.generation.utils; assert '+cpu' in torch.__version__ or not torch.version.cuda, torch.__version__"
    touch "$CACHE/.qconform-complete"
fi
if [ "$ENV_DIR" != "$CACHE" ]; then
    rm -rf "$ENV_DIR"
    ln -s "$CACHE" "$ENV_DIR"
fi
echo "transformers $VERSION environment: $ENV_DIR -> $CACHE"
