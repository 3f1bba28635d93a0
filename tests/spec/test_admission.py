"""Depth admission (R35, R36): the fixed-depth reference is lossless, sequential stopping rules are
lossless, and every read of a draft before its admission is flagged with its round and step."""

from __future__ import annotations

from fractions import Fraction
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_distribution import p_rows, q_rows

from qconform.spec.admission import (
    ADMIT,
    STOP,
    PolicyTable,
    Scenario,
    TableStep,
    audit_policy,
    block_policy,
    fixed_depth,
    markov_scenario,
    standard_scenarios,
    stream_law,
    table_policy,
    target_law,
)
from qconform.spec.admission.audit import admitted_round
from qconform.spec.admission.choices import exact_law
from qconform.spec.admission.draws import DrawOptions
from qconform.spec.admission.policy import decision_of
from qconform.spec.admission.scenario import row_keys
from qconform.spec.constants import M
from qconform.spec.distribution import QUANTIZED_DRAWS, REAL_UNIFORM, round_law, round_law_real_uniform
from qconform.spec.errors import SpecError
from qconform.spec.qrow import QRow

pytestmark = pytest.mark.rules("R35", "R36")


@st.composite
def markov_scenarios(draw, max_depth: int = 2) -> Scenario:
    vocab = draw(st.integers(2, 3))
    depth = draw(st.integers(1, max_depth))
    keys = row_keys(vocab)
    return markov_scenario(
        "random", vocab, depth, {k: draw(q_rows(vocab)) for k in keys}, {k: draw(p_rows(vocab)) for k in keys}
    )


def product_law(scenario: Scenario, horizon: int) -> dict:
    """The target law, computed independently: every sequence, the product of its rows."""
    law = {}
    for sequence in product(range(scenario.vocab), repeat=horizon):
        mass = Fraction(1)
        for j, token in enumerate(sequence):
            mass *= scenario.p(scenario.history + sequence[:j])[token]
        if mass:
            law[sequence] = mass
    return law


# --- R35: the fixed-depth reference ---------------------------------------------------------------


@pytest.mark.parametrize("vocab,depth", [(2, 0), (2, 1), (2, 2), (3, 1), (3, 2)])
def test_fixed_depth_emits_the_target_law_exactly(vocab, depth):
    for scenario in standard_scenarios(vocab, depth):
        audit = audit_policy(fixed_depth(depth), scenario, depth + 1)
        assert audit.law == product_law(scenario, depth + 1), scenario.name
        assert audit.passes and audit.tv == 0 and audit.moved == () and audit.peeks == ()
        assert sum(audit.law.values()) == 1


@given(st.data())
@settings(max_examples=15, deadline=None)
def test_fixed_depth_round_matches_the_distribution_spec(data):
    """One round under fixed_depth(K), enumerated here, equals spec.distribution's law of a round,
    with real-uniform and with 32-bit draws: two independent enumerations."""
    vocab = data.draw(st.integers(2, 3))
    depth = data.draw(st.integers(1, 2))
    prefixes = [c for n in range(depth + 1) for c in product(range(vocab), repeat=n)]
    q = {c: data.draw(q_rows(vocab)) for c in prefixes if len(c) < depth}
    p = {c: data.draw(p_rows(vocab)) for c in prefixes}
    scenario = Scenario("prefix-rows", vocab, depth, q.__getitem__, p.__getitem__)
    for draws, reference in ((REAL_UNIFORM, round_law_real_uniform), (QUANTIZED_DRAWS, round_law)):
        options = DrawOptions(scenario, draws)
        outcomes = exact_law(lambda choices: admitted_round(scenario, fixed_depth(depth), (), (), choices, options))
        law: dict = {}
        for outcome, mass in outcomes.items():
            assert outcome.depth == depth and outcome.premature == ()
            law[outcome.emitted] = law.get(outcome.emitted, 0) + mass
        assert law == reference(vocab, depth, q, p)


def test_target_law_is_the_product_of_rows():
    scenario = standard_scenarios(3, 1)[1]
    assert target_law(scenario, 3) == product_law(scenario, 3)
    with pytest.raises(SpecError) as err:
        target_law(scenario, 0)
    assert err.value.code == "BAD_SHAPE"


def test_fixed_depth_refuses_a_negative_depth():
    with pytest.raises(SpecError) as err:
        fixed_depth(-1)
    assert err.value.code == "BAD_POLICY"


# --- R36: sequential stopping rules ----------------------------------------------------------------


def random_table(data, scenario: Scenario, measurable: bool) -> PolicyTable:
    """A decision table whose step i reads x_r: r <= i - 1 (measurable) or r >= i (premature)."""
    steps = []
    for step in range(1, scenario.max_depth + 1):
        revealed = (
            data.draw(st.integers(0, step - 1)) if measurable else data.draw(st.integers(step, scenario.max_depth))
        )
        reads = (f"x{revealed}",) if revealed else ()
        decisions = {
            context: {
                ",".join(map(str, prefix)): data.draw(st.sampled_from((ADMIT, STOP)))
                for prefix in product(range(scenario.vocab), repeat=revealed)
            }
            for context in row_keys(scenario.vocab)
        }
        steps.append(TableStep(step, reads, decisions))
    return PolicyTable(tuple(steps))


@given(st.data())
@settings(max_examples=25, deadline=None)
def test_every_sequential_stopping_rule_is_lossless(data):
    """Any admission that decides position i from x_1..x_(i-1) and the context preserves p (R36)."""
    scenario = data.draw(markov_scenarios())
    horizon = data.draw(st.integers(1, 3))
    audit = audit_policy(table_policy(random_table(data, scenario, measurable=True)), scenario, horizon)
    assert audit.measurable and audit.peeks == ()
    assert audit.law == product_law(scenario, horizon)


@given(st.data(), st.booleans())
@settings(max_examples=25, deadline=None)
def test_every_policy_law_has_the_target_support(data, measurable):
    """With a real uniform, a policy moves mass but never removes or adds a sequence: every sequence
    of positive target mass keeps positive mass, and none of zero target mass gains any (the
    argument is in spec/equivalent_mutants.toml, `moved_mass`). So `moved_mass` and the TV see the
    same keys in both laws."""
    scenario = data.draw(markov_scenarios())
    horizon = data.draw(st.integers(1, 3))
    audit = audit_policy(table_policy(random_table(data, scenario, measurable)), scenario, horizon)
    assert set(audit.law) == set(audit.target)


@given(st.data())
@settings(max_examples=25, deadline=None)
def test_reading_the_admitted_draft_is_always_flagged(data):
    scenario = data.draw(markov_scenarios())
    audit = audit_policy(table_policy(random_table(data, scenario, measurable=False)), scenario, 1)
    assert not audit.measurable and not audit.passes
    first = audit.peeks[0]
    assert (first.round, first.step) == (1, 1) and first.encodes >= 1 and first.probability == 1


def x1_scenario() -> Scenario:
    return standard_scenarios(2, 3)[1]


@pytest.mark.parametrize(
    "name,step,flagged",
    [
        ("x1", 1, True),
        ("x1", 2, False),
        ("x2", 2, True),
        ("x3", 2, True),
        ("c1", 1, False),
        ("c2", 1, True),
        ("c2", 2, False),
        ("c3", 2, True),
        ("t1", 1, True),
        ("t1", 2, False),
        ("t2", 2, True),
    ],
)
def test_premature_reads_are_those_that_encode_the_admitted_draft(name, step, flagged):
    """Before admitting i a policy may read x_1..x_(i-1), c_1..c_i (c_j encodes x_(j-1)), t_1..t_(i-1)."""

    def policy(view):
        if view.step == step:
            view.read(name)
        return ADMIT if view.step <= step else STOP

    audit = audit_policy(policy, x1_scenario(), 1)
    expected = [(1, step, name)] if flagged else []
    assert [(p.round, p.step, p.name) for p in audit.peeks] == expected
    assert audit.lossless  # the read alone moves no mass: this policy ignores what it read


def test_reads_through_every_accessor_are_logged_with_their_step():
    def policy(view):
        if view.step == 1:
            assert len(view.drafts) == 3
            view.drafts[-1]  # x3
            view.drafts[0:2]  # x1, x2
            view.token_confidence(1)
            view.confidence(3)
            list(view.drafts)
        return ADMIT if view.step == 1 else STOP

    audit = audit_policy(policy, x1_scenario(), 1)
    assert [(p.step, p.name, p.encodes) for p in audit.peeks] == [
        (1, "c3", 2),
        (1, "t1", 1),
        (1, "x1", 1),
        (1, "x2", 2),
        (1, "x3", 3),
    ]


def test_lazy_drafts_index_like_a_sequence():
    seen = []

    def policy(view):
        with pytest.raises(IndexError):
            view.drafts[3]
        seen.append(view.drafts[-3] == view.drafts[0] == view.draft(1))
        return STOP

    audit_policy(policy, x1_scenario(), 1)
    assert seen and all(seen)


def test_peek_probability_is_the_chance_of_reaching_the_read():
    """Read x2 before admitting it, but only when x1 = 0 was admitted: P = q(x1 = 0)."""
    scenario = x1_scenario()

    def policy(view):
        if view.step == 2 and view.draft(1) == 0:
            view.draft(2)
        return ADMIT if view.step == 1 else STOP

    (peek,) = audit_policy(policy, scenario, 1).peeks
    assert (peek.round, peek.step, peek.name) == (1, 2, "x2")
    assert peek.probability == scenario.q(()).q(0)


@pytest.mark.parametrize("stop_at", [1, 2, 3, 4])
def test_a_stopped_prefix_is_never_reopened_and_depth_is_bounded(stop_at):
    """A policy that stops at step s is asked at steps 1..s only (never again after STOP), and never
    past the maximum depth (3)."""
    asked = set()

    def policy(view):
        asked.add(view.step)
        return STOP if view.step == stop_at else ADMIT

    audit = audit_policy(policy, x1_scenario(), 2)
    assert asked == set(range(1, min(stop_at, 3) + 1))
    assert audit.passes


def test_nothing_is_drafted_unless_admitted():
    """Target-only rounds never touch the draft rows."""

    def no_drafter(context):
        raise AssertionError(f"a draft row was requested after {context}")

    scenario = Scenario("no-drafter", 2, 3, no_drafter, lambda c: [Fraction(1, 4), Fraction(3, 4)])
    audit = audit_policy(fixed_depth(0), scenario, 2)
    assert audit.passes and audit.law[(1, 1)] == Fraction(9, 16)


def test_policies_see_history_load_and_prior_rounds():
    seen = set()

    def policy(view):
        seen.add((view.history, view.load, tuple((r.depth, r.emitted) for r in view.prior_rounds)))
        return ADMIT if view.step == 1 else STOP

    scenario = markov_scenario(
        "h",
        2,
        1,
        {k: QRow.dense([M, 0]) for k in row_keys(2)},
        {k: [Fraction(1), Fraction(0)] for k in row_keys(2)},
        history=(1,),
        load=3,
    )
    law = stream_law(scenario, policy, 3).law
    assert law == {(0, 0, 0): 1}
    assert seen == {((1,), 3, ()), ((1, 0, 0), 3, ((1, (0, 0)),))}


@pytest.mark.parametrize("answer,decision", [(ADMIT, ADMIT), (STOP, STOP), (True, ADMIT), (False, STOP)])
def test_decisions(answer, decision):
    assert decision_of(answer) == decision


@pytest.mark.parametrize("answer", [1, 0, None, "yes", "ADMIT", 2])
def test_other_answers_are_refused(answer):
    with pytest.raises(SpecError) as err:
        audit_policy(lambda view: answer, x1_scenario(), 1)
    assert err.value.code == "BAD_POLICY"


@pytest.mark.parametrize("depth", [-1, 1.0, True, "2"])
def test_block_policy_refuses_a_depth_that_is_not_a_count(depth):
    with pytest.raises(SpecError) as err:
        audit_policy(block_policy(lambda view: depth), x1_scenario(), 1)
    assert err.value.code == "BAD_POLICY"


def test_block_policy_admits_up_to_its_depth():
    law = stream_law(x1_scenario(), block_policy(lambda view: 2), 3)
    reference = stream_law(x1_scenario(), fixed_depth(2), 3)
    assert law == reference


@pytest.mark.parametrize("name", ["x0", "y1", "c", "x1x", "", 3, "x4"])
def test_reads_outside_the_block_are_refused(name):
    def policy(view):
        view.read(name)
        return STOP

    with pytest.raises(SpecError) as err:
        audit_policy(policy, x1_scenario(), 1)
    assert err.value.code == "BAD_POLICY"


def test_markov_scenario_needs_every_row():
    with pytest.raises(SpecError) as err:
        markov_scenario("short", 2, 1, {"": QRow.dense([M, 0])}, {"": [Fraction(1), Fraction(0)]})
    assert err.value.code == "BAD_SHAPE"
