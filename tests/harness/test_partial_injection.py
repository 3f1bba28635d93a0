"""Partial injection (docs/harness.md): an adapter that takes only some draw domains injected.

The acceptance draws are compared one for one; a token the adapter drew itself must lie in
the support of the row the spec draws it from. Shown able to fail: the
``correction-from-p`` mutant, a token outside the residual, a reported own draw, a
wrong own accepted count; and the capability itself is validated at start.
"""

from __future__ import annotations

import copy

import pytest
from harness_stubs import family_cases  # noqa: E402

from qconform.harness.adapter import AdapterConfig, Capabilities, PrecisionProfile
from qconform.harness.judging.judge import judge
from qconform.harness.transport.shim_protocol import ProtocolError, parse_capabilities
from qconform.harness.verdicts import VerdictClass

pytestmark = pytest.mark.rules("R11", "R23", "R33")

PARTIAL = Capabilities(families=("verification_round",), injected_domains=(("verification_round", ("ACCEPT",)),))
EXACT = PrecisionProfile()


def config(capabilities: Capabilities = PARTIAL, profile: PrecisionProfile = EXACT) -> AdapterConfig:
    return AdapterConfig("partial-stub", capabilities, profile)


def own_answer(case: dict) -> dict:
    """The spec's own answer, as a partial adapter reports it: no CORRECTION draw."""
    answer = copy.deepcopy(case["expected"])
    for request in answer["requests"]:
        request["draws"] = [d for d in request["draws"] if d["domain"] == "ACCEPT"]
        for draw in request["draws"]:
            draw.pop("margin", None)
    return answer


def valid_cases() -> list[dict]:
    return [c for c in family_cases("verification_round") if c["result"] == "valid"]


def with_correction(cases: list[dict]) -> dict:
    """A case whose first request ends in a correction with a residual smaller than the vocabulary."""
    for case in cases:
        request = case["expected"]["requests"][0]
        if request["draws"][-1]["decision"] == "correction" and case["input"]["vocab"] <= 16:
            return case
    raise AssertionError("the corpus has no small correction case")


def test_the_spec_answer_passes_in_partial_mode():
    verdicts = [judge(case, own_answer(case), config()) for case in valid_cases()]
    assert {v.cls for v in verdicts} == {VerdictClass.PASS}
    assert "partial injection" in verdicts[0].message


def test_a_token_outside_the_residual_fails_naming_token_and_row():
    case = with_correction(valid_cases())
    answer = own_answer(case)
    request = answer["requests"][0]
    accepted = request["accepted"]
    drafted = case["input"]["requests"][0]["draft_tokens"][accepted]
    request["emitted"][-1] = drafted  # a rejected draft has p < q: never in the residual
    verdict = judge(case, answer, config())
    assert verdict.cls is VerdictClass.FAIL
    assert f"got {drafted}" in verdict.message or str(drafted) in str(verdict.diff)
    assert "residual" in verdict.message


def test_reporting_an_own_draw_is_malformed():
    case = with_correction(valid_cases())
    answer = copy.deepcopy(case["expected"])
    verdict = judge(case, answer, config())
    assert verdict.cls is VerdictClass.ERROR
    assert "CORRECTION draw is the adapter's own" in verdict.message


def test_an_accepted_count_that_does_not_follow_its_draws_fails():
    case = with_correction(valid_cases())
    answer = own_answer(case)
    answer["requests"][0]["accepted"] += 1
    answer["requests"][0]["emitted"].insert(0, 0)
    assert judge(case, answer, config()).cls is VerdictClass.FAIL


def test_a_flipped_acceptance_is_precision_only_within_the_declared_ratio_margin():
    boundary = next(c for c in valid_cases() if c["id"].endswith("depth1-on-boundary-rejects"))
    answer = own_answer(boundary)
    request, spec_request = answer["requests"][0], boundary["input"]["requests"][0]
    request["draws"][0]["decision"] = "accept"
    request["accepted"] = 1
    request["emitted"] = [spec_request["draft_tokens"][0], request["emitted"][-1]]
    # after a full acceptance the own token is the bonus: take one in p_2's support
    bonus = next(v for v, p in enumerate(spec_request["p_rows"]["probabilities"][1]) if p != "0")
    request["emitted"][-1] = bonus
    assert judge(boundary, answer, config()).cls is VerdictClass.FAIL
    assert (
        judge(boundary, answer, config(profile=PrecisionProfile(ratio_margin="1/1048576"))).cls
        is VerdictClass.PRECISION
    )


def test_full_injection_is_unchanged_without_the_declaration():
    case = with_correction(valid_cases())
    full = config(Capabilities(families=("verification_round",)))
    assert judge(case, copy.deepcopy(case["expected"]), full).cls is VerdictClass.PASS
    assert judge(case, own_answer(case), full).cls is not VerdictClass.PASS


@pytest.mark.parametrize(
    "declared, message",
    [
        ({"rng_abi": ["ACCEPT"]}, "not one of the declared families"),
        ({"verification_round": ["PROPOSAL"]}, "unknown domains"),
        ({"verification_round": ["CORRECTION"]}, "ACCEPT draws must be injected"),
        ({"verification_round": "ACCEPT"}, "list"),
    ],
)
def test_bad_declarations_are_start_errors(declared, message):
    with pytest.raises(ProtocolError, match=message):
        parse_capabilities({"families": ["verification_round"], "injected_domains": declared})


def test_declaring_every_domain_is_full_injection():
    caps = parse_capabilities(
        {"families": ["verification_round"], "injected_domains": {"verification_round": ["CORRECTION", "ACCEPT"]}}
    )
    assert caps.domains_of("verification_round") is None
    caps = parse_capabilities(
        {"families": ["verification_round"], "injected_domains": {"verification_round": ["ACCEPT"]}}
    )
    assert caps.domains_of("verification_round") == ("ACCEPT",)
    assert caps.to_json()["injected_domains"] == {"verification_round": ["ACCEPT"]}


def test_torch_partial_passes_and_its_mutant_is_killed():
    pytest.importorskip("torch")
    from qconform.adapters.torch_partial import TorchPartialAdapter

    cases = valid_cases()
    inputs = [c["input"] for c in cases]
    for mutant, want_fail in (("", False), ("correction-from-p", True)):
        adapter = TorchPartialAdapter(mutant=mutant)
        verdicts = [
            judge(c, out, adapter.config()) for c, out in zip(cases, adapter.run_batch("verification_round", inputs))
        ]
        failed = [v for v in verdicts if v.cls is VerdictClass.FAIL]
        assert bool(failed) is want_fail, [v.message for v in failed][:3]
        if want_fail:
            assert all("residual" in v.message for v in failed)
