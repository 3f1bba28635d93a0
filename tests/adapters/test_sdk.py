"""The in-process adapter API (qconform/sdk.py) and its example engine (examples/sdk/numpy_engine.py)."""

from __future__ import annotations

import base64
import importlib.util
import shlex
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from qconform import sdk
from qconform.generators.corpus import default_vectors_dir
from qconform.generators.validation import iter_cases
from qconform.harness.adapter import AdapterError, Unimplemented
from qconform.harness.judging.judge import judge
from qconform.harness.run.case_runner import CaseRunner
from qconform.harness.transport.client import open_adapter
from qconform.harness.verdicts import VerdictClass

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sdk" / "numpy_engine.py"


def load_example():
    spec = importlib.util.spec_from_file_location("numpy_engine", EXAMPLE)
    assert spec is not None and spec.loader is not None, EXAMPLE
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(family: str) -> list[dict]:
    return [
        {"id": c.id, "result": c.result, "input": c.input, "expected": c.expected, "flags": list(c.flags)}
        for c in iter_cases(default_vectors_dir(), [family])
    ]


def verdicts(adapter, family: str) -> dict[str, VerdictClass]:
    config = adapter.config()
    batch = cases(family)
    return {
        case["id"]: judge(case, outcome, config).cls
        for case, outcome in zip(batch, adapter.run_batch(family, [c["input"] for c in batch]))
    }


@pytest.mark.rules("R08", "R22")
def test_the_example_engine_passes_its_families_through_the_shim():
    """Served by sdk.serve as a shim, started with the interpreter's absolute path."""
    command = f"shim:{shlex.quote(sys.executable)} {shlex.quote(str(EXAMPLE))}"
    runner = CaseRunner(lambda: open_adapter(command))
    try:
        sampling = runner.run(cases("categorical_sampling"))
        rng = runner.run(cases("rng_abi"))
        assert runner.config is not None
        assert runner.config.name == "numpy-engine"
        assert sorted(runner.config.capabilities.families) == ["categorical_sampling", "rng_abi"]
    finally:
        runner.close()
    assert {v.cls for v in sampling} == {VerdictClass.PASS}, [v.line() for v in sampling if v.cls != "pass"]
    by_group = {(v.case_id.split("/")[1], v.cls) for v in rng}
    assert by_group - {("fuzz", VerdictClass.PASS)} == {
        ("draw_keys", VerdictClass.PASS),
        ("invalid_fields", VerdictClass.PASS),
        ("precedence", VerdictClass.PASS),
        ("philox_kat", VerdictClass.UNSUPPORTED),
        ("round_schedule", VerdictClass.UNSUPPORTED),
        ("unseeded_requests", VerdictClass.UNSUPPORTED),
    }


@pytest.mark.rules("R08")
def test_a_seeded_bug_in_the_example_fails():
    """The same engine taking the first cumulative count >= the draw (the cumulative-ge bug)."""
    module = load_example()
    searchsorted = np.searchsorted

    class Buggy(module.NumpyEngine):
        def categorical_sampling(self, case):
            np.searchsorted = lambda a, v, side: searchsorted(a, v, side="left")
            try:
                return super().categorical_sampling(case)
            finally:
                np.searchsorted = searchsorted

    found = verdicts(Buggy(), "categorical_sampling")
    assert VerdictClass.FAIL in found.values()
    assert set(verdicts(module.NumpyEngine(), "categorical_sampling").values()) == {VerdictClass.PASS}


@pytest.mark.rules()
def test_inputs_arrive_as_arrays():
    raw = {
        "row": {
            "representation": "dense",
            "counts": {
                "dtype": "u32",
                "shape": [2, 2],
                "b64": base64.b64encode(np.arange(4, dtype="<u4").tobytes()).decode(),
            },
        },
        "seed": "12",
        "draws": [1, 2],
    }
    decoded = sdk.decode(raw)
    counts = decoded["row"]["counts"]
    assert isinstance(counts, np.ndarray) and counts.dtype == np.uint32 and counts.shape == (2, 2)
    assert counts.tolist() == [[0, 1], [2, 3]] and decoded["seed"] == "12" and decoded["draws"] == [1, 2]
    assert sdk.word32("0x6627e8d5") == 0x6627E8D5 and sdk.u64("18446744073709551615") == (1 << 64) - 1


@pytest.mark.rules()
def test_outputs_become_blobs_only_where_the_schema_has_a_blob():
    schema = sdk.expected_schema("allocation_dense")
    answer = {
        "counts": np.array([3, 5], dtype=np.uint32),
        "remaining": np.int64(2),
        "tie_gap": Fraction(1, 3),
        "fp64_may_differ": np.bool_(False),
    }
    out = sdk.encode(answer, [schema], schema["$defs"])
    assert out["counts"] == {"dtype": "u32", "shape": [2], "b64": base64.b64encode(b"\3\0\0\0\5\0\0\0").decode()}
    assert out["remaining"] == 2 and type(out["remaining"]) is int and out["tie_gap"] == "1/3"
    assert out["fp64_may_differ"] is False
    tokens = sdk.expected_schema("categorical_sampling")
    assert sdk.encode({"tokens": np.array([4, 1], dtype=np.int32)}, [tokens], tokens["$defs"]) == {"tokens": [4, 1]}
    with pytest.raises(TypeError, match="no blob encoding"):
        sdk.blob(np.zeros(2, dtype=np.float16))


@pytest.mark.rules()
def test_torch_tensors_are_answered_like_arrays():
    torch = pytest.importorskip("torch")
    schema = sdk.expected_schema("allocation_dense")
    out = sdk.encode({"counts": torch.tensor([3, 5], dtype=torch.int32)}, [schema], schema["$defs"])
    assert out["counts"]["dtype"] == "i32" and out["counts"]["shape"] == [2]

    class TorchEngine(sdk.EngineAdapter):
        arrays = "torch"

        def categorical_sampling(self, case):
            counts = case["row"]["counts"]
            assert isinstance(counts, torch.Tensor)
            return {
                "tokens": torch.searchsorted(torch.cumsum(counts.long(), 0), torch.tensor(case["draws"]), right=True)
            }

    found = verdicts(TorchEngine(), "categorical_sampling")
    assert found["categorical_sampling/boundaries/dense-v4"] is VerdictClass.PASS


@pytest.mark.rules()
def test_refusals_unsupported_mapped_and_unmapped_errors():
    class Engine(sdk.EngineAdapter):
        error_map = {KeyError: "BAD_SHAPE"}  # noqa: RUF012

        def categorical_sampling(self, case):
            kind = case["kind"]
            if kind == "refuse":
                raise sdk.Refusal("WRONG_TOTAL_MASS", "sums to M - 1")
            if kind == "unsupported":
                raise sdk.Unsupported("sparse rows")
            if kind == "mapped":
                return case["missing"]
            if kind == "returned":
                return sdk.refusal("ZERO_MASS")
            raise RuntimeError("kernel launch failed")

    engine = Engine()
    assert engine.capabilities().families == ("categorical_sampling",)
    out = engine.run_batch(
        "categorical_sampling", [{"kind": k} for k in ("refuse", "unsupported", "mapped", "returned", "crash")]
    )
    assert out == [
        {"error": "WRONG_TOTAL_MASS"},
        Unimplemented("sparse rows"),
        {"error": "BAD_SHAPE"},
        {"error": "ZERO_MASS"},
        AdapterError("RuntimeError: kernel launch failed"),
    ]
    assert set(sdk.refusal_codes()) >= {"WRONG_TOTAL_MASS", "BAD_SHAPE", "ZERO_MASS", "BAD_RNG_FIELD"}


@pytest.mark.rules("R22", "R23")
def test_draw_keys_and_round_draws_match_the_rng_abi_vectors():
    checked = 0
    for case in cases("rng_abi"):
        given = case["input"]
        if "draw_counter" in given and case["result"] == "valid":
            key = sdk.draw_key(
                int(given["seed"]),
                given["generation"],
                given["round"],
                given["position"],
                given["domain"],
                given["draw_counter"],
            )
            assert [f"0x{w:08x}" for w in key.counter] == case["expected"]["counter"]
            assert (key.u24, key.u32) == (case["expected"]["u24"], case["expected"]["u32"])
            checked += 1
        elif "anchor" in given:
            draws = sdk.round_draws(
                int(given["seed"]), given["generation"], given["round"], given["anchor"], given["depth"]
            )
            for name in ("proposal", "accept", "correction"):
                assert draws[name].tolist() == [d["value"] for d in case["expected"][name]]
            checked += 1
        elif case["result"] == "invalid":
            with pytest.raises(sdk.Refusal, match="BAD_RNG_FIELD"):
                sdk.draw_key(
                    int(given["seed"]),
                    given["generation"],
                    given["round"],
                    given["position"],
                    given["domain"],
                    given["draw_counter"],
                )
    assert checked >= 10
