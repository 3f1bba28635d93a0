"""The glue every engine shim shares (adapters/engine_shared/engine_shim.py), without an engine.

Its acceptance draws against the spec's RNG ABI, its reading of an engine's output under
the caller's stop rule, and that no engine shim imports anything from qconform.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from qconform.spec.rng_abi import RngIdentity, accept_key, uniform32_draw, unseeded_request_seed

ADAPTERS = Path(__file__).resolve().parents[3] / "adapters"
SHIMS = [
    ADAPTERS / "engine_shared" / "engine_shim.py",
    ADAPTERS / "vllm" / "shim.py",
    ADAPTERS / "transformers" / "shim.py",
]

pytestmark = pytest.mark.rules("R11", "R22", "R23")


def load_glue():
    spec = importlib.util.spec_from_file_location("engine_shim_under_test", SHIMS[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


es = load_glue()


@pytest.mark.parametrize("path", SHIMS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_engine_shims_import_nothing_from_qconform(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported and not [name for name in imported if name.startswith("qconform")]


@pytest.mark.parametrize(
    "seed, generation, round_id, anchor, i", [(0, 0, 0, 0, 1), (2**64 - 1, 7, 3, 2**32 - 1, 2), (0x5E51, 1, 9, 100, 5)]
)
def test_acceptance_draws_are_the_rng_abi_ones(seed, generation, round_id, anchor, i):
    ident = RngIdentity(seed, generation, round_id, anchor)
    assert es.accept_u32(seed, generation, round_id, anchor + i - 1) == uniform32_draw(accept_key(ident, i))
    request = {
        "seed": str(seed),
        "generation": generation,
        "round": round_id,
        "anchor": anchor,
        "draft_tokens": [0] * i,
    }
    assert es.request_accept_u32s(request)[i - 1] == uniform32_draw(accept_key(ident, i))


@pytest.mark.parametrize("request_id", ["req-0", "a request id", "ü"])
def test_unseeded_requests_take_the_rng_abi_seed(request_id):
    assert es.request_seed({"request_id": request_id}) == unseeded_request_seed(request_id)
    assert es.request_seed({"seed": "7"}) == 7


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
def test_engine_output_read_as_the_scheduler_reads_it(tokens, budget, accepted, emitted, decisions):
    request = {**REQUEST, **({"budget": budget} if budget else {})}
    answer = es.request_answer(request, tokens, [11, 22, 33])
    assert (answer["accepted"], answer["emitted"]) == (accepted, emitted)
    assert [d["decision"] for d in answer["draws"]] == decisions
    assert [d["position"] for d in answer["draws"]] == [(2**32 - 2 + i) % 2**32 for i in range(len(decisions))]
    assert all(d["domain"] == "ACCEPT" for d in answer["draws"])


def test_full_acceptance_reports_no_draw_for_the_bonus():
    answer = es.request_answer({"draft_tokens": [4, 6], "anchor": 0}, [4, 6, 8], [1, 2])
    assert answer["accepted"] == 2 and answer["emitted"] == [4, 6, 8]
    assert [d["decision"] for d in answer["draws"]] == ["accept", "accept"]


def test_statistical_outcomes_count_after_the_stop_rule():
    histogram: dict[tuple, int] = {}
    es.outcome_histogram([[4, 5, 6, 7], [4, 9], [4, 9]], REQUEST, histogram)
    assert es.histogram_outcomes(histogram) == {
        "outcomes": [{"accepted": 1, "emitted": [4, 9], "count": 2}, {"accepted": 2, "emitted": [4, 5], "count": 1}]
    }


ROW = {"representation": "dense", "counts": {"dtype": "u32", "b64": "AAAAAQ==", "shape": [1]}}


@pytest.mark.parametrize(
    "request_",
    [
        {"draft_tokens": [], "q_rows": [], "p_rows": {"probabilities": [["1"]]}},  # K = 0
        {"draft_tokens": [0], "q_rows": [ROW], "p_rows": {"probabilities": [["1"]]}},  # K rows of p, not K + 1
        {"draft_tokens": [0], "q_rows": [], "p_rows": {"probabilities": [["1"], ["1"]]}},  # no q row
        {"draft_tokens": [0], "q_rows": [ROW], "p_rows": {"probabilities": [["1"], ["1", "0"]]}},  # a row of 2 in V = 1
    ],
)
def test_shapes_no_sampler_tensor_can_hold_are_refused(request_):
    with pytest.raises(es.Refusal, match="BAD_SHAPE"):
        es.check_batch({"vocab": 1, "requests": [{**request_, "seed": "1"}]})
    valid = {"seed": "1", "draft_tokens": [0], "q_rows": [ROW], "p_rows": {"probabilities": [["1"], ["1"]]}}
    es.check_batch({"vocab": 1, "requests": [valid]})
