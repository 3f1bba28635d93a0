"""The ``vllm`` adapter's glue, without vLLM (docs/engines/vllm.md).

vLLM itself runs in its own environment, in CI's separate stage (adapters/vllm/ci.sh).
Here: the shapes its shim refuses, and that a missing environment or a bad option is one
line, not a run of errors. The glue every engine shim shares (acceptance draws, the
scheduler's stop rule) is tested in tests/adapters/engines/test_engine_shim.py.
"""

from __future__ import annotations

import pytest

from qconform.adapters import vllm
from qconform.adapters.vllm import shim

pytestmark = pytest.mark.rules("R11", "R22", "R23")


def test_shapes_vllm_cannot_express_are_refused():
    row = {"representation": "dense", "counts": {"dtype": "u32", "b64": "", "shape": [0]}}
    request = {"seed": "1", "draft_tokens": [1], "q_rows": [row], "p_rows": {"probabilities": [["1"]]}}
    with pytest.raises(shim.es.Refusal, match="BAD_SHAPE"):
        shim.es.check_batch({"vocab": 1, "requests": [request]})
    with pytest.raises(shim.es.Refusal, match="BAD_SHAPE"):
        shim.es.check_batch({"vocab": 1, "requests": [{**request, "p_rows": {"probabilities": [["1"], ["1"]]}}] * 5})
    with pytest.raises(shim.es.Refusal, match="BAD_REQUEST_ID"):  # before the row counts (verification_round.md)
        shim.es.check_batch({"vocab": 1, "requests": [{k: v for k, v in request.items() if k != "seed"}]})


def test_adapter_names_and_a_missing_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("QCONFORM_VLLM_PYTHON", str(tmp_path / "python"))
    with pytest.raises(vllm.VllmSetupError, match="install.sh"):
        vllm.shim_command("vllm")
    (tmp_path / "python").touch()
    assert vllm.shim_command("vllm:triton,patch-expand", "cuda")[2:] == [
        "--kernels",
        "triton",
        "--patch",
        "expand",
        "--device",
        "cuda",
    ]
    with pytest.raises(vllm.VllmSetupError, match="unknown vllm option bogus"):
        vllm.shim_command("vllm:bogus")
    assert vllm.is_vllm("vllm") and vllm.is_vllm("vllm:triton") and not vllm.is_vllm("vllmx")
