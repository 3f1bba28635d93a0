"""Batch invariance (harness.run.batch_invariance, cli.batch_invariance): the re-batchings, the torch candidate keeping
every answer, and adapters whose answers depend on the batch being caught."""

from __future__ import annotations

import copy
import sys
from collections import Counter

import pytest
from click.testing import CliRunner
from harness_stubs import StubClient, adapter_config, family_cases

from qconform.cli.batch_invariance import batch_invariance
from qconform.generators.registry import load_family
from qconform.harness.run.batch_invariance import (
    AnswerLog,
    Request,
    check_batch_invariance,
    corpus_requests,
    rebatchings,
)

pytestmark = pytest.mark.rules("R22", "R27")

#: small-vocabulary cases only: the production-vocabulary ones cost seconds in the spec
SMALL = "verification_round/[!p]*"

#: a reference adapter whose RNG is keyed by batch row (FlashInfer's bug class): every
#: request draws under the batch's first seed plus its row, so row 0 is right and the rest wrong
ROW_KEYED_SHIM = """
import sys
from qconform.adapters.reference import ReferenceAdapter
from qconform.spec.rng_abi import request_seed
from qconform.harness.transport.host import Host, claim_stdio


class RowKeyed(ReferenceAdapter):
    name = "row-keyed"

    def run_batch(self, family, inputs):
        if family == "verification_round":
            inputs = [rekeyed(inp) for inp in inputs]
        return super().run_batch(family, inputs)


def rekeyed(inp):
    head = inp["requests"][0]  # an unseeded request's seed comes from its ID
    first = request_seed(int(head["seed"]) if "seed" in head else None, head.get("request_id"))
    # a request carries one of seed and request_id (BAD_REQUEST_ID otherwise): the ID gives way to the seed
    requests = [
        dict({k: v for k, v in r.items() if k != "request_id"}, seed=str((first + row) % 2**64))
        for row, r in enumerate(inp["requests"])
    ]
    return dict(inp, requests=requests)


proto_in, proto_out = claim_stdio()
sys.exit(Host(RowKeyed()).serve(proto_in, proto_out))
"""


@pytest.fixture(scope="module")
def requests() -> list[Request]:
    return corpus_requests(c for c in family_cases("verification_round") if "/production_vocab/" not in c["id"])


def solve_batch(inp: dict) -> dict:
    solve = load_family("verification_round").solve
    assert solve is not None
    return solve(inp)


def invoke(*args: str):
    return CliRunner().invoke(batch_invariance, list(args), catch_exceptions=False)


# --- re-batchings ---------------------------------------------------------------------------------


def test_corpus_requests_are_distinct_and_carry_the_spec_answer_alone(requests):
    assert len({r.origin for r in requests}) == len(requests) > 20
    bodies = [(r.vocab, str(r.body)) for r in requests]
    assert len(set(bodies)) == len(bodies)  # request-a-alone, -twice, -last hold one request A
    for request in requests[::7]:
        alone = solve_batch({"vocab": request.vocab, "requests": [request.body]})
        assert alone == {"requests": [request.expected]}


def test_every_rebatching_holds_each_request_in_batches_of_one_vocabulary_and_depth(requests):
    plans = {plan.name: plan for plan in rebatchings(requests, seed=3)}
    assert list(plans) == ["alone", "mixed", "reversed", "shuffled", "replicated"]
    position = {}
    for plan in plans.values():
        copies = 4 if plan.name == "replicated" else 1
        seen = Counter(r.origin for batch in plan.batches for r in batch)
        assert seen == {r.origin: copies for r in requests}, plan.name
        for n, batch in enumerate(plan.batches):
            assert 1 <= len(batch) <= 4 and len({(r.vocab, r.depth) for r in batch}) == 1
            position.update({(plan.name, r.origin): (n, row) for row, r in enumerate(batch)})
    assert all(len(batch) == 1 for batch in plans["alone"].batches)
    assert any(len(batch) > 1 for batch in plans["mixed"].batches)
    # the orders put requests at other rows with other batch-mates
    for name in ("reversed", "shuffled"):
        moved = [o for o in (r.origin for r in requests) if position[(name, o)][1] != position[("mixed", o)][1]]
        assert len(moved) > len(requests) // 3, name
    assert [b for b in rebatchings(requests, seed=3)[3].batches] == list(plans["shuffled"].batches)
    assert rebatchings(requests, seed=4)[3].batches != plans["shuffled"].batches


# --- in-process adapters ------------------------------------------------------------------------------


def test_the_spec_itself_keeps_every_answer(requests):
    client = StubClient(adapter_config(["verification_round"]), lambda family, inp: solve_batch(inp))
    report = check_batch_invariance(client, requests)
    assert report.ok and not report.inconsistencies
    assert all(set(r.counts) == {"pass"} for r in report.results)


def test_an_adapter_refusing_full_batches_diverges_outside_single_request_batches(requests):
    def answer(family, inp):
        return {"error": "BAD_SHAPE"} if len(inp["requests"]) > 1 else solve_batch(inp)

    report = check_batch_invariance(StubClient(adapter_config(["verification_round"]), answer), requests)
    by_name = {r.rebatching.name: r for r in report.results}
    assert not by_name["alone"].divergences
    assert by_name["replicated"].counts == {"fail": 4 * len(requests)}
    assert all("refused a valid case with BAD_SHAPE" in d.message for d in by_name["mixed"].divergences)
    assert not report.ok


def shifted_final_token(answer: dict, vocab: int) -> dict:
    """The answer with its correction or bonus token moved to the next token id."""
    last = answer["draws"][-1]
    if last["decision"] not in ("correction", "bonus"):
        return answer
    token = (last["token"] + 1) % vocab
    draws = answer["draws"][:-1] + [{**last, "token": token}]
    return {**answer, "emitted": answer["emitted"][:-1] + [token], "draws": draws}


def test_batch_dependence_inside_declared_margins_is_still_caught(requests):
    """Rows after the first draw another correction token: each answer is ``precision`` for a
    profile with a residual margin of 1, but the request's answer changed with its batch."""

    def answer(family, inp):
        solved = solve_batch(inp)
        solved["requests"][1:] = [shifted_final_token(a, inp["vocab"]) for a in solved["requests"][1:]]
        return solved

    client = StubClient(adapter_config(["verification_round"], residual_margin="1/1"), answer)
    report = check_batch_invariance(client, requests)
    assert not [d for r in report.results for d in r.divergences]
    assert sum(r.counts["precision"] for r in report.results) > 0
    assert report.inconsistencies and not report.ok
    assert all(d.row >= 1 and "answered differently than in alone" in d.message for d in report.inconsistencies)


def test_answers_differing_only_in_margins_are_consistent(requests):
    log = AnswerLog()
    request = next(r for r in requests if r.expected["draws"])
    same = {"requests": [copy.deepcopy(request.expected)]}
    same["requests"][0]["draws"][0]["margin"] = "1/3"
    other = {"requests": [copy.deepcopy(request.expected)]}
    other["requests"][0]["draws"][0]["u32"] ^= 1
    log.record(request, ("alone", 0, 0), {"requests": [request.expected]})
    log.record(request, ("mixed", 2, 1), same)
    assert log.inconsistencies() == []
    log.record(request, ("shuffled", 5, 3), other)
    (found,) = log.inconsistencies()
    assert (found.rebatching, found.batch, found.row) == ("shuffled", 5, 3) and "draws[0].u32" in found.message


# --- the command --------------------------------------------------------------------------------------


def test_the_torch_candidate_keeps_every_answer():
    pytest.importorskip("torch")
    result = invoke("--adapter", "torch", "--match", SMALL)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "OK: every request kept its answer"
    assert "DIVERGENT" not in result.output


def test_rng_keyed_by_batch_row_is_caught(tmp_path):
    shim = tmp_path / "row_keyed.py"
    shim.write_text(ROW_KEYED_SHIM)
    result = invoke("--adapter", f"shim:{sys.executable} {shim}", "--match", SMALL)
    assert result.exit_code == 1, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()}
    assert "; 0 divergent" in lines["alone"]  # row 0 draws under its own seed
    for name in ("mixed", "replicated"):
        assert "; 0 divergent" not in lines[name]
    divergent = [line for line in result.output.splitlines() if line.startswith("DIVERGENT")]
    assert divergent and not any(" row 0: " in line for line in divergent)
    assert result.output.splitlines()[-1].startswith("FAILED: ")


def test_usage_errors_exit_2(tmp_path):
    result = invoke("--adapter", "reference", "--match", "nothing/*")
    assert result.exit_code == 2 and "no valid verification_round case" in result.output
    result = invoke("--adapter", "reference", "--vectors", str(tmp_path))
    assert result.exit_code == 2 and "no usable verification_round vectors" in result.output
