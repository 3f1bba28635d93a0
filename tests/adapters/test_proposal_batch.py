"""proposal_batch: the spec's batch rule, the comparator, and the batched candidates (R22, R27)."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from harness_stubs import adapter_config, case, family_cases

from qconform.generators.families import proposal_batch as family
from qconform.generators.families import proposal_chain as chain
from qconform.harness.judging.judge import judge
from qconform.harness.verdicts import VerdictClass
from qconform.spec.errors import SpecError
from qconform.spec.proposal import proposal_batch, proposal_chain

pytestmark = pytest.mark.rules("R22", "R27")

PASS, FAIL, ERROR = VerdictClass.PASS, VerdictClass.FAIL, VerdictClass.ERROR
FOUR = "proposal_batch/batches/four-temperatures"


def inputs_of(case_id: str):
    return [chain.decode_input(r) for r in case("proposal_batch", case_id)["input"]["requests"]]


def test_each_request_gets_the_chain_it_would_have_alone_wherever_it_sits():
    inputs = inputs_of(FOUR)
    assert len({inp.temperature_bits for inp in inputs}) == 4
    batch = proposal_batch(inputs)
    assert batch == [proposal_chain(inp) for inp in inputs]
    assert proposal_batch(inputs[::-1]) == batch[::-1]
    assert proposal_batch([inputs[2], inputs[0], inputs[2]])[2] == batch[2]
    # the temperatures matter: request 0's temperature for everyone changes other requests' rows
    sliced = [replace(inp, temperature_bits=inputs[0].temperature_bits) for inp in inputs]
    assert proposal_batch(sliced)[1] != batch[1]


@pytest.mark.parametrize("name", ["five-requests", "mixed-support", "mixed-draft-models", "mixed-depths"])
def test_an_incompatible_batch_is_refused(name):
    with pytest.raises(SpecError) as refusal:
        proposal_batch(inputs_of(f"proposal_batch/incompatible_batches/{name}"))
    assert refusal.value.code == "BAD_SHAPE"


def test_the_comparator_judges_each_request_as_its_own_chain():
    c = case("proposal_batch", FOUR)
    config = adapter_config(["proposal_batch"])
    assert judge(c, copy.deepcopy(c["expected"]), config).cls is PASS
    wrong = copy.deepcopy(c["expected"])
    wrong["requests"][2]["draws"][1]["u24"] ^= 1
    verdict = judge(c, wrong, config)
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path.startswith("requests[2].draws[1]")
    swapped = copy.deepcopy(c["expected"])
    swapped["requests"][1], swapped["requests"][3] = swapped["requests"][3], swapped["requests"][1]
    assert judge(c, swapped, config).cls is FAIL
    short = {"requests": copy.deepcopy(c["expected"]["requests"][:3])}
    assert judge(c, short, config).cls is ERROR
    assert judge(c, {"requests": [1, 2, 3, 4]}, config).cls is ERROR


def test_the_torch_candidate_answers_every_batch_in_one_batched_call():
    pytest.importorskip("torch")
    from qconform.adapters.torch_adapter import TorchAdapter

    adapter = TorchAdapter()
    cases = family_cases("proposal_batch")
    outcomes = adapter.run_batch("proposal_batch", [c["input"] for c in cases])
    config = adapter.config()
    assert [judge(c, o, config).cls for c, o in zip(cases, outcomes)] == [PASS] * len(cases)


def test_the_generator_writes_what_solve_answers():
    for c in family_cases("proposal_batch"):
        assert family.solve(c["input"]) == c["expected"]
