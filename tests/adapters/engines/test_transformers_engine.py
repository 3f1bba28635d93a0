"""Hugging Face transformers' ``_speculative_sampling`` as a candidate (docs/engines/transformers.md).

Without the engine's environment: the seam (what ``torch.rand_like`` answers while the
function runs) and the ``strict-accept`` variant's one changed operator. With it (made by
``bash adapters/transformers/install.sh``; skipped otherwise, as on a machine that has not
made it): the library against the corpus in partial-injection mode, the zero-target bug
caught when its expectation is lifted, and the fixed comparison passing every valid case.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from qconform.adapters import transformers
from qconform.adapters.engine_env import EngineSetupError
from qconform.adapters.transformers import shim

pytestmark = pytest.mark.rules("R11", "R23")


def test_the_injected_draw_is_a_float32_uniform_torch_could_return():
    rand = shim.InjectedRand(torch)
    rand.pending = [0, 255, 256, 0xFFFFFFFF, 0x80000000]
    values = rand(torch.zeros(5, dtype=torch.float32))
    assert values.dtype == torch.float32
    assert values.tolist() == [0.0, 0.0, 2**-24, 1 - 2**-24, 0.5]  # top 24 bits: never above u32 / 2^32
    assert rand.pending is None


@pytest.mark.parametrize("pending, shape", [(None, (1,)), ([1, 2], (3,))])
def test_an_unexpected_draw_stops_the_shim(pending, shape):
    rand = shim.InjectedRand(torch)
    rand.pending = pending
    with pytest.raises(RuntimeError, match="unexpected torch.rand_like"):
        rand(torch.zeros(shape))


def accept_at(r_i, probability_ratio):
    is_accepted = r_i <= probability_ratio
    return is_accepted


def test_strict_accept_changes_only_the_acceptance_comparison():
    zero = torch.tensor([0.0])
    assert accept_at(zero, zero).item() and not shim.strict_accept_variant(accept_at)(zero, zero).item()
    assert shim.strict_accept_variant(accept_at)(zero, torch.tensor([1e-30])).item()

    def no_comparison(r_i, probability_ratio):
        return r_i < probability_ratio

    with pytest.raises(SystemExit, match="found 0"):
        shim.strict_accept_variant(no_comparison)


def environment() -> str | None:
    try:
        transformers.ENVIRONMENT.python()
    except EngineSetupError as exc:
        return str(exc)
    return None


needs_environment = pytest.mark.skipif(
    environment() is not None, reason=f"transformers' environment is absent: {environment()}"
)


def qconform_run(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "qconform", "run", "--family", "verification_round", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@needs_environment
def test_the_library_passes_with_its_expectations():
    result = qconform_run("--adapter", "transformers")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


@needs_environment
def test_the_zero_target_bug_is_caught_without_its_expectation():
    result = qconform_run("--adapter", "transformers", "-k", "zero_target", "--expectations", "/dev/null")
    assert result.returncode == 1
    assert "FAIL verification_round/zero_target/depth1-zero-draw" in result.stdout
    assert "expected 'reject', got 'accept'" in result.stdout


@needs_environment
def test_the_strict_comparison_passes_every_valid_case():
    result = qconform_run(
        "--adapter",
        "transformers:strict-accept",
        "-k",
        "not INVALID_REQUEST and not REFUSAL_PRECEDENCE",
        "--expectations",
        "/dev/null",
    )
    assert result.returncode == 0, result.stdout[-2000:]
