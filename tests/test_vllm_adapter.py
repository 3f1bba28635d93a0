"""The ``vllm`` adapter's glue, without vLLM (docs/engines/vllm.md).

vLLM itself runs in its own environment, in CI's separate stage (adapters/vllm/ci.sh).
Here: the shim's own parts against the spec (its acceptance draws, its reading of
vLLM's output under the scheduler's stop rule), that it imports nothing from qconform,
and that a missing environment or a bad option is one line, not a run of errors.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from qconform.adapters import vllm
from qconform.adapters.vllm import shim
from qconform.spec.rng_abi import RngIdentity, accept_key, uniform32_draw

pytestmark = pytest.mark.rules("R11", "R22", "R23")


def test_the_shim_imports_nothing_from_qconform():
    tree = ast.parse(Path(shim.__file__).read_text(encoding="utf-8"))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported and not [name for name in imported if name.startswith("qconform")]


@pytest.mark.parametrize(
    "seed, generation, round_id, anchor, i", [(0, 0, 0, 0, 1), (2**64 - 1, 7, 3, 2**32 - 1, 2), (0x5E51, 1, 9, 100, 5)]
)
def test_acceptance_draws_are_the_rng_abi_ones(seed, generation, round_id, anchor, i):
    ident = RngIdentity(seed, generation, round_id, anchor)
    assert shim.accept_u32(seed, generation, round_id, anchor + i - 1) == uniform32_draw(accept_key(ident, i))


REQUEST = {"draft_tokens": [4, 5, 6], "anchor": 2**32 - 2, "stop_tokens": [5]}


@pytest.mark.parametrize(
    "tokens, budget, accepted, emitted, decisions",
    [
        ([4, 9], None, 1, [4, 9], ["accept", "reject"]),  # rejected at 2: correction 9
        ([4, 5, 6, 7], None, 2, [4, 5], ["accept", "accept"]),  # stop token 5 kept, the rest dropped
        ([4, 5, 6, 7], 1, 1, [4], ["accept"]),  # budget 1
        ([1], None, 0, [1], ["reject"]),  # rejected at 1
    ],
)
def test_vllm_output_read_as_the_scheduler_reads_it(tokens, budget, accepted, emitted, decisions):
    request = {**REQUEST, **({"budget": budget} if budget else {})}
    answer = shim.request_answer(request, tokens, [11, 22, 33])
    assert (answer["accepted"], answer["emitted"]) == (accepted, emitted)
    assert [d["decision"] for d in answer["draws"]] == decisions
    assert [d["position"] for d in answer["draws"]] == [(2**32 - 2 + i) % 2**32 for i in range(len(decisions))]
    assert all(d["domain"] == "ACCEPT" for d in answer["draws"])


def test_full_acceptance_reports_no_draw_for_the_bonus():
    answer = shim.request_answer({"draft_tokens": [4, 6], "anchor": 0}, [4, 6, 8], [1, 2])
    assert answer["accepted"] == 2 and answer["emitted"] == [4, 6, 8]
    assert [d["decision"] for d in answer["draws"]] == ["accept", "accept"]


def test_shapes_vllm_cannot_express_are_refused():
    row = {"representation": "dense", "counts": {"dtype": "u32", "b64": "", "shape": [0]}}
    request = {"seed": "1", "draft_tokens": [1], "q_rows": [row], "p_rows": {"probabilities": [["1"]]}}
    with pytest.raises(shim.Refusal, match="BAD_SHAPE"):
        shim.check_batch({"requests": [request]})
    with pytest.raises(shim.Refusal, match="BAD_SHAPE"):
        shim.check_batch({"requests": [{**request, "p_rows": {"probabilities": [["1"], ["1"]]}}] * 5})
    with pytest.raises(shim.Refusal, match="BAD_REQUEST_ID"):  # before the row counts (verification_round.md)
        shim.check_batch({"vocab": 1, "requests": [{k: v for k, v in request.items() if k != "seed"}]})


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


def test_run_without_the_environment_is_one_line_and_exit_2(tmp_path):
    env = {"QCONFORM_VLLM_PYTHON": str(tmp_path / "missing"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "qconform", "run", "--adapter", "vllm", "--family", "verification_round"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no vLLM environment" in lines[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize("request_id", ["req-0", "a request id", "ü"])
def test_unseeded_requests_take_the_rng_abi_seed(request_id):
    from qconform.spec.rng_abi import unseeded_request_seed

    assert shim.request_seed({"request_id": request_id}) == unseeded_request_seed(request_id)
    assert shim.request_seed({"seed": "7"}) == 7
