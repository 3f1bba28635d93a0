"""Differential fuzzing (harness.fuzz, harness.fuzz_command): valid inputs, exact boundaries,
shrinking to a ready-to-commit vector, reproducibility, and the torch candidate surviving."""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from itertools import accumulate
from unittest import mock

import pytest
from click.testing import CliRunner
from harness_stubs import StubClient
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.adapters.reference import ReferenceAdapter
from qconform.cli.errors import UsageLineError
from qconform.cli.fuzz import fuzz as fuzz_command
from qconform.cli.fuzz import fuzz_families
from qconform.generators import fuzz_inputs
from qconform.generators.encoding import encode_blob
from qconform.generators.families.categorical_sampling import decode_qrow
from qconform.generators.families.verification_round import decode_request, encode_p_weights, request_json
from qconform.generators.registry import load_family
from qconform.harness.fuzz import driver as fuzzing
from qconform.spec import verification
from qconform.spec.constants import M
from qconform.spec.rng_abi import RngIdentity, accept_key, uniform32_draw

pytestmark = pytest.mark.rules("R03", "R06", "R07", "R08", "R11", "R22")

#: a reference adapter whose sampler takes the first cumulative count >= the draw (not >)
CUMULATIVE_GE_SHIM = """
import sys
from itertools import accumulate
from qconform.adapters.reference import ReferenceAdapter
from qconform.generators.families.categorical_sampling import decode_qrow
from qconform.harness.transport.host import Host, claim_stdio


class CumulativeGe(ReferenceAdapter):
    name = "cumulative-ge"

    def run_batch(self, family, inputs):
        if family != "categorical_sampling":
            return super().run_batch(family, inputs)
        return [{"tokens": first_at_or_above(inp)} for inp in inputs]


def first_at_or_above(inp):
    cumulative = list(accumulate(decode_qrow(inp["row"], inp["vocab"]).dense_counts()))
    return [next(v for v, c in enumerate(cumulative) if c >= u) for u in inp["draws"]]


proto_in, proto_out = claim_stdio()
sys.exit(Host(CumulativeGe()).serve(proto_in, proto_out))
"""


@pytest.fixture(scope="module")
def cumulative_ge(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("shim") / "cumulative_ge.py"
    path.write_text(CUMULATIVE_GE_SHIM)
    return f"shim:{sys.executable} {path}"


def invoke(*args: str):
    return CliRunner().invoke(fuzz_command, list(args), catch_exceptions=False)


def reference_client(answer=None) -> StubClient:
    """The spec as an in-process client; ``answer(family, input)`` may override it."""
    adapter = ReferenceAdapter()
    return StubClient(adapter.config(), answer or (lambda family, inp: adapter.run_batch(family, [inp])[0]))


# --- strategies -------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", fuzzing.fuzz_families())
def test_strategies_draw_valid_inputs_that_make_valid_vectors(family):
    @settings(max_examples=12, database=None, deadline=None)
    @given(fuzzing.fuzz_hooks(family).inputs())
    def check(case_input):
        case = fuzzing.spec_case(family, case_input)
        assert case["result"] == "valid", case["expected"]
        assert "error" not in case["expected"]
        assert fuzzing.vector_problems({k: case[k] for k in fuzzing.VECTOR_KEYS}) == []

    check()


@settings(max_examples=25, database=None, deadline=None)
@given(st.data(), st.integers(3, 8), st.integers(1, 5))
def test_boundary_requests_put_the_draft_exactly_on_the_acceptance_boundary(data, vocab, depth):
    ident = RngIdentity(data.draw(st.integers(0, (1 << 64) - 1)), 1, 2, 3)
    ident, drafts, q_rows, p_bits = fuzz_inputs.draw_boundary_request(data.draw, vocab, depth, ident)
    body = request_json(verification.RoundInput(ident, drafts, q_rows, []), encode_p_weights(p_bits))
    request = decode_request(body, vocab)
    position = next(
        i
        for i in range(1, depth + 1)
        if request.p_rows[i - 1] != [Fraction(c, M) for c in q_rows[i - 1].dense_counts()]
    )
    token = drafts[position - 1]
    u32 = uniform32_draw(accept_key(ident, position))
    # exactly on the boundary: u32 * q(x) = p(x) * 2^32, which rejects (R11); '<=' would accept
    assert u32 * request.q_rows[position - 1].q(token) == request.p_rows[position - 1][token] * (1 << 32)
    result = verification.verify_round(request)
    assert result.accepted == position - 1
    boundary = result.draws[position - 1]
    assert (boundary.decision, boundary.margin) == ("reject", 0)


@pytest.mark.parametrize(
    "counts, draws, flags",
    [
        ([1, M - 1], [1], ["RANDOM_ROW", "CUMULATIVE_BOUNDARY"]),  # C_0 = 1: the draw 1 picks token 1
        ([1, M - 1], [0], ["RANDOM_ROW", "EXTREME_DRAW", "CUMULATIVE_BOUNDARY"]),  # 0 = C_0 - 1
        ([M // 2, M // 2], [5, M // 2 + 1], ["RANDOM_ROW"]),
        ([M // 2, M // 2], [M // 2 - 1], ["RANDOM_ROW", "CUMULATIVE_BOUNDARY"]),
        ([M], [M - 1, 7], ["RANDOM_ROW", "EXTREME_DRAW"]),  # one token: no boundary below M
        ([0, M], [0], ["RANDOM_ROW", "EXTREME_DRAW", "ZERO_COUNT"]),  # C_0 = 0 is no boundary
    ],
)
def test_categorical_flags_name_the_edges_the_draws_hit(counts, draws, flags):
    case_input = {
        "vocab": len(counts),
        "row": {"representation": "dense", "counts": encode_blob("u32", counts)},
        "draws": draws,
    }
    case = fuzzing.spec_case("categorical_sampling", case_input)
    assert case["flags"] == flags
    assert fuzzing.vector_problems({k: case[k] for k in fuzzing.VECTOR_KEYS}) == []


# --- the driver, in process ---------------------------------------------------------------------------


def test_a_run_is_reproducible_from_its_seed():
    def inputs_seen(seed: int) -> list:
        seen = []
        reference = reference_client()

        def answer(family, inp):
            seen.append((family, inp))
            return reference.answer(family, inp)

        report = fuzzing.fuzz(reference_client(answer), "reference", ["rng_abi", "categorical_sampling"], 15, seed)
        assert report.finding is None and report.counts == {"pass": len(seen)}
        return seen

    assert inputs_seen(7) == inputs_seen(7)
    assert inputs_seen(7) != inputs_seen(8)


def test_precision_is_not_a_finding():
    """An adapter whose every answer is judged ``precision`` survives."""
    client = reference_client()
    with mock.patch.object(
        fuzzing,
        "judge",
        lambda case, outcome, config: fuzzing.Verdict(fuzzing.VerdictClass.PRECISION, case["id"], "inside margins"),
    ):
        report = fuzzing.fuzz(client, "reference", ["rng_abi"], 10, 0)
    assert report.finding is None and report.counts == {"precision": report.cases}


def test_an_adapter_that_fails_an_input_once_is_reported_nondeterministic():
    seen = set()
    reference = reference_client()

    def answer(family, inp):
        key = json.dumps(inp, sort_keys=True)
        first = key not in seen
        seen.add(key)
        return {"error": "BAD_SHAPE"} if first and len(seen) > 3 else reference.answer(family, inp)

    report = fuzzing.fuzz(reference_client(answer), "once", ["rng_abi"], 20, 0)
    assert report.finding is None and report.flaky is not None
    assert "failed, then passed when replayed: FAIL rng_abi/fuzz/found-" in report.flaky
    assert report.summary().endswith("FINDING nondeterministic adapter")


def at_or_below(u32: int, p: Fraction, q: Fraction) -> bool:
    return u32 * q <= p * (1 << 32)


def le_client() -> StubClient:
    """An exact verifier (the spec) whose acceptance test is '<=': wrong only on the boundary."""
    reference = ReferenceAdapter()

    def answer(family, inp):
        with mock.patch.object(verification, "acceptance_test", at_or_below):
            return reference.run_batch(family, [inp])[0]

    return StubClient(reference.config(), answer)


def check_le_finding(report: fuzzing.FuzzReport) -> dict:
    finding = report.finding
    assert finding is not None and finding.verdict.cls == fuzzing.VerdictClass.FAIL
    assert "decision: expected 'reject', got 'accept'" in finding.verdict.line()
    vector = fuzzing.vector_of(report)
    assert "ACCEPT_BOUNDARY" in vector["flags"] and fuzzing.vector_problems(vector) == []
    solve = load_family("verification_round").solve
    assert solve is not None and vector["expected"] == solve(vector["input"])
    return vector


def test_le_acceptance_is_found_on_the_exact_boundary():
    """Found within a few examples, thanks to the boundary requests (not shrunk: fast)."""
    report = fuzzing.fuzz(le_client(), "le", ["verification_round"], 20, 0, shrink=False)
    check_le_finding(report)
    assert report.examples <= 20 and not report.shrunk


@pytest.mark.slow
def test_le_acceptance_shrinks_to_one_depth_1_request():
    vector = check_le_finding(fuzzing.fuzz(le_client(), "le", ["verification_round"], 20, 4))
    (body,) = vector["input"]["requests"]
    assert len(body["draft_tokens"]) == 1 and vector["input"]["vocab"] == 3


# --- the command --------------------------------------------------------------------------------------


def test_the_command_finds_a_seeded_bug_and_prints_a_valid_minimal_vector(cumulative_ge, tmp_path):
    out = tmp_path / "vector.json"
    result = invoke(
        "--adapter",
        cumulative_ge,
        "--family",
        "categorical_sampling",
        "--examples",
        "60",
        "--seed",
        "0",
        "--vector-out",
        str(out),
    )
    assert result.exit_code == 1, result.output
    assert "FINDING fail in categorical_sampling" in result.output.splitlines()[-1]
    vector = json.loads(out.read_text())
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("minimal failing case"))
    assert json.loads("\n".join(lines[start + 1 : -1])) == vector  # printed as written
    assert list(vector) == list(fuzzing.VECTOR_KEYS)
    assert vector["id"].startswith("categorical_sampling/fuzz/found-") and vector["result"] == "valid"
    assert fuzzing.vector_problems(vector) == []
    case_input = vector["input"]
    solve = load_family("categorical_sampling").solve
    assert solve is not None and vector["expected"] == solve(case_input)
    # the spec's tokens are the first cumulative count > draw; the seeded bug's differ here
    cumulative = list(accumulate(decode_qrow(case_input["row"], case_input["vocab"]).dense_counts()))
    buggy = [next(v for v, c in enumerate(cumulative) if c >= u) for u in case_input["draws"]]
    assert buggy != vector["expected"]["tokens"]
    assert len(case_input["draws"]) == 1 and case_input["vocab"] <= 2  # shrunk


def test_the_torch_candidate_survives_a_short_run():
    pytest.importorskip("torch")
    result = invoke("--adapter", "torch", "--examples", "30", "--seed", "0")
    assert result.exit_code == 0, result.output
    summary = result.output.splitlines()[-1]
    assert summary.startswith("fuzz: 30 examples") and summary.endswith("no finding")
    for family in fuzzing.fuzz_families():
        assert family in summary


@pytest.mark.parametrize(
    "args, message",
    [
        (["--family", "distribution"], "cannot fuzz family distribution"),
        (["--adapter", "no-such-adapter"], "unknown adapter 'no-such-adapter'"),
    ],
)
def test_usage_errors_exit_2(args, message):
    result = invoke("--adapter", "reference", *args)
    assert result.exit_code == 2 and message in result.output


def test_families_are_those_requested_that_the_adapter_declares():
    declared = ("rng_abi", "categorical_sampling", "proposal_chain")
    assert fuzz_families((), declared) == ("categorical_sampling", "rng_abi")
    assert fuzz_families(("rng_abi", "rng_abi"), declared) == ("rng_abi",)
    with pytest.raises(UsageLineError, match="does not declare family allocation_dense"):
        fuzz_families(("allocation_dense",), declared)
    with pytest.raises(UsageLineError, match="declares none of the fuzzed families"):
        fuzz_families((), ("proposal_chain",))
