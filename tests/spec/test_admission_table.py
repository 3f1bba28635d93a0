"""Decision tables, the declarative policy language of the ``admission`` vectors (R36): a table
tabulated from a Python policy audits exactly like it; malformed tables are refused; the committed
vectors are the spec's answers."""

from __future__ import annotations

from fractions import Fraction

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.families import admission as family
from qconform.generators.validation import iter_cases
from qconform.spec.admission import (
    ADMIT,
    DSPARK_SPS,
    LIGHT_LOAD_SPS,
    STOP,
    PolicyTable,
    TableStep,
    audit_policy,
    dspark_appendix_a_scenario,
    dspark_appendix_a_scheduler,
    fixed_depth,
    markov_scenario,
    prefix_scheduler,
    sampled_confidence_scenario,
    standard_scenarios,
    table_policy,
    tabulate_policy,
    toy_selection_policy,
    toy_selection_scenario,
)
from qconform.spec.admission.reveal import encoded_drafts, reveal_depth
from qconform.spec.admission.scenario import row_keys
from qconform.spec.admission.table import check_table
from qconform.spec.constants import M
from qconform.spec.errors import SpecError
from qconform.spec.qrow import QRow

pytestmark = pytest.mark.rules("R36")

POLICIES = {
    "fixed-2": lambda: fixed_depth(2),
    "toy": lambda: toy_selection_policy,
    "appendix-a": dspark_appendix_a_scheduler,
    "prefix-scan": lambda: prefix_scheduler(DSPARK_SPS),
    "prefix-scan-light": lambda: prefix_scheduler(LIGHT_LOAD_SPS),
    "prefix-scan-sampled": lambda: prefix_scheduler(LIGHT_LOAD_SPS, sampled_token_confidence=True),
}
SCENARIOS = {
    "toy": toy_selection_scenario,
    "dspark": dspark_appendix_a_scenario,
    "sampled": sampled_confidence_scenario,
    "markov-v3": lambda: standard_scenarios(3, 2)[1],
}


@pytest.mark.parametrize("scenario_name", SCENARIOS)
@pytest.mark.parametrize("policy_name", POLICIES)
def test_a_tabulated_policy_audits_like_the_policy(policy_name, scenario_name):
    policy, scenario = POLICIES[policy_name](), SCENARIOS[scenario_name]()
    table = tabulate_policy(policy, scenario)
    check_table(table, scenario.vocab, scenario.max_depth)
    assert len(table.steps) == scenario.max_depth
    assert audit_policy(table_policy(table), scenario, 2) == audit_policy(policy, scenario, 2)


def test_reads_encode_their_drafts():
    assert [encoded_drafts(n) for n in ("x1", "x3", "c1", "c3", "t2")] == [1, 3, 0, 2, 2]
    assert reveal_depth(()) == 0
    assert reveal_depth(("c1", "c2", "t1")) == 1


def test_the_toy_table_is_what_the_design_says():
    table = tabulate_policy(toy_selection_policy, toy_selection_scenario())
    (step,) = table.steps
    assert step.reads == ("x1",)
    assert step.decisions == {key: {"0": ADMIT, "1": STOP} for key in row_keys(2)}


def test_a_policy_that_decides_on_more_than_it_logs_cannot_be_tabulated():
    """Decisions that vary without any logged read (here: a hidden counter) are refused."""
    flips = iter(range(10**6))

    def unstable(view):
        return ADMIT if next(flips) % 2 else STOP

    with pytest.raises(SpecError) as err:
        tabulate_policy(unstable, toy_selection_scenario())
    assert err.value.code == "BAD_POLICY"


def every_context(decision: dict) -> dict:
    return {key: dict(decision) for key in row_keys(2)}


@pytest.mark.parametrize(
    "table",
    [
        PolicyTable((TableStep(1, (), every_context({"": ADMIT})), TableStep(2, (), every_context({"": ADMIT})))),
        PolicyTable((TableStep(2, (), every_context({"": ADMIT})),)),
        PolicyTable((TableStep(1, ("x2",), every_context({"0,0": ADMIT})),)),
        PolicyTable((TableStep(1, ("z1",), every_context({"": ADMIT})),)),
        PolicyTable((TableStep(1, (), every_context({"0": ADMIT})),)),
        PolicyTable((TableStep(1, ("x1",), every_context({"2": ADMIT})),)),
        PolicyTable((TableStep(1, (), every_context({"": "maybe"})),)),
        PolicyTable((TableStep(1, (), {"7": {"": ADMIT}}),)),
    ],
    ids=[
        "past-depth",
        "misnumbered",
        "read-past-depth",
        "bad-read",
        "key-too-long",
        "token-out-of-range",
        "bad-decision",
        "bad-context",
    ],
)
def test_malformed_tables_are_refused(table):
    with pytest.raises(SpecError) as err:
        check_table(table, 2, 1)
    assert err.value.code == "BAD_POLICY"


def test_a_missing_decision_is_refused_only_when_reached():
    partial = PolicyTable((TableStep(1, ("x1",), every_context({"0": ADMIT})),))
    check_table(partial, 2, 1)
    with pytest.raises(SpecError) as err:
        audit_policy(table_policy(partial), toy_selection_scenario(), 1)
    assert err.value.code == "BAD_POLICY"
    # over a draft row that never proposes token 1, the prefix "1" is never reached
    keys = row_keys(2)
    never_one = markov_scenario(
        "never-one", 2, 1, {k: QRow.dense([M, 0]) for k in keys}, {k: [Fraction(1, 3), Fraction(2, 3)] for k in keys}
    )
    assert audit_policy(table_policy(partial), never_one, 2).lossless


def committed_cases() -> list[dict]:
    root = default_vectors_dir()
    if not (root / "admission.json").exists():
        pytest.skip("no committed admission vectors")
    return [{"id": c.id, "input": c.input, "expected": c.expected} for c in iter_cases(root, ["admission"])]


@pytest.mark.rules("R35", "R36", "R37", "R38")
def test_committed_vectors_are_the_spec_answers():
    cases = committed_cases()
    assert len(cases) >= 15
    for case in cases:
        assert family.solve(case["input"]) == case["expected"], case["id"]


@pytest.mark.rules("R37", "R38")
def test_committed_vectors_pin_the_published_numbers():
    by_id = {case["id"]: case for case in committed_cases()}
    toy = by_id["admission/toy_selection/toy-first-token"]["expected"]
    assert toy["first_token_law"] == ["3/4", "1/4"] and toy["first_token_target"] == ["1/2", "1/2"]
    appendix = by_id["admission/dspark/appendix-a-first-token"]["expected"]
    assert appendix["first_token_law"] == ["9/20", "11/20"] and appendix["first_token_target"] == ["3/10", "7/10"]
    assert appendix["peeks"] == [{"round": 1, "step": 1, "read": "c2", "probability": "1/1"}]
    assert by_id["admission/dspark/prefix-scan-light-load"]["expected"]["lossless"] is True


def test_family_decodes_what_it_encodes():
    scenario = sampled_confidence_scenario()
    table = tabulate_policy(prefix_scheduler(LIGHT_LOAD_SPS), scenario)
    case_input = family.scenario_input(scenario, 2, table)
    assert family.decode_table(case_input["policy"]) == table
    decoded = family.decode_scenario(case_input)
    for key in row_keys(2):
        context = (int(key),) if key else ()
        assert decoded.q(context) == scenario.q(context) and decoded.p(context) == scenario.p(context)
