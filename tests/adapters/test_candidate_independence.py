"""A candidate that imports the spec proves nothing: it would check the spec against itself.

Each bundled candidate module is imported in a fresh interpreter, and no module of
``qconform.spec`` or ``qconform.generators`` may be loaded as a result, directly or
through anything it imports; nor ``qconform.sdk`` or ``qconform.replay``, the engine
SDK for users' engines, whose draw keys come from the spec (docs/sdk.md).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.rules("R21")

CANDIDATES = [
    "qconform.adapters.torch_candidate",
    "qconform.adapters.torch_adapter",
    "qconform.adapters.torch_mutants",
    "qconform.adapters.torch_native",
    "qconform.adapters.torch_tp",
    "qconform.adapters.tp_emulator.families",
    "qconform.adapters.tp_emulator.kernels",
    "qconform.adapters.tp_emulator.worker",
    "qconform.adapters.triton_candidate",
    "qconform.adapters.triton_adapter",
    "qconform.adapters.endpoint",
    "qconform.adapters.endpoint.worker",
    "qconform.adapters.endpoint.worker_mutants",
]
FORBIDDEN = ("qconform.spec", "qconform.generators", "qconform.sdk", "qconform.replay")

PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
forbidden = tuple(sys.argv[2:])
print(json.dumps(sorted(m for m in sys.modules if m in forbidden or m.startswith(tuple(f + "." for f in forbidden)))))
"""


def loaded_spec_modules(module: str) -> list[str]:
    command = [sys.executable, "-c", PROBE, module, *FORBIDDEN]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", CANDIDATES)
def test_candidate_never_loads_the_spec(module):
    pytest.importorskip("torch")
    if "triton" in module and importlib.util.find_spec("triton") is None:  # not imported: it reads TRITON_INTERPRET
        pytest.skip("triton is not installed")
    assert loaded_spec_modules(module) == []


def test_the_probe_sees_a_spec_import():
    assert "qconform.spec.philox" in loaded_spec_modules("qconform.spec.philox")
    assert "qconform.sdk" in loaded_spec_modules("qconform.replay")
