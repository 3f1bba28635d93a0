"""The ``transformers`` adapter: Hugging Face transformers' ``_speculative_sampling``, run as a
shim in its own environment.

transformers pins its own tokenizers, safetensors and huggingface-hub and is installed
beside the machine's CPU torch, so it lives in a virtual environment of its own
(``adapters/transformers/install.sh``, docs/engines/transformers.md) and is driven over the
shim protocol by ``adapters/transformers/shim.py``, a program that imports nothing from
qconform. This module only finds that environment (adapters/engine_env.py) and builds the
shim's command line from the adapter name:

* ``transformers``: the library's function as released;
* ``transformers:strict-accept``: the same source with its acceptance test ``r_i <= p_i/q_i``
  read as ``r_i < p_i/q_i``, the fix docs/engines/transformers.md proposes.
"""

from __future__ import annotations

from pathlib import Path

from qconform.adapters import engine_env
from qconform.adapters.engine_env import EngineEnvironment

#: the adapter's name, and the name of its expectations file
NAME = "transformers"
#: adapter option -> the shim's arguments
OPTIONS = {"strict-accept": ["--patch", "strict-accept"]}
SHIM = Path(__file__).resolve().parent / "shim.py"
#: the environment install.sh makes (its version a parameter: QCONFORM_TRANSFORMERS_VERSION)
ENVIRONMENT = EngineEnvironment("transformers", "transformers", "5.23.0")
#: seconds the shim may take to answer ``get_config``: it imports torch and transformers first
START_TIMEOUT_S = 300.0


def shim_command(spec: str, device: str = "cpu") -> list[str]:
    """The shim command line of the adapter name ``spec`` (``transformers[:option,...]``) on ``device``."""
    return engine_env.shim_command(spec, NAME, OPTIONS, SHIM, ENVIRONMENT, device)
