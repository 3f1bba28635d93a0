"""The counterexamples, reproduced exactly: the toy selection bias (R38) and DSpark v1 appendix A (R37),
with the prefix scan that breaks early (passes with position confidences, fails with sampled ones)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from qconform.spec.admission import (
    ADMIT,
    DSPARK_A1,
    DSPARK_C2,
    DSPARK_SPS,
    LIGHT_LOAD_SPS,
    STOP,
    acceptance_rate,
    audit_policy,
    dspark_appendix_a_mirrored_scenario,
    dspark_appendix_a_scenario,
    dspark_appendix_a_scheduler,
    expected_tokens,
    fixed_depth,
    prefix_scheduler,
    sampled_confidence_scenario,
    standard_scenarios,
    tabulate_policy,
    throughput_score,
    toy_selection_policy,
    toy_selection_scenario,
)

F = Fraction


@pytest.mark.rules("R38")
def test_toy_selection_gives_token_zero_three_quarters():
    audit = audit_policy(toy_selection_policy, toy_selection_scenario(), 1)
    assert audit.first_token_law == (F(3, 4), F(1, 4))
    assert audit.first_token_target == (F(1, 2), F(1, 2))
    assert audit.tv == F(1, 4) and not audit.lossless
    assert [(m.tokens, m.law, m.target) for m in audit.moved] == [((0,), F(3, 4), F(1, 2)), ((1,), F(1, 4), F(1, 2))]


@pytest.mark.rules("R36", "R38")
def test_toy_selection_is_flagged_for_reading_x1_before_admitting_it():
    (peek,) = audit_policy(toy_selection_policy, toy_selection_scenario(), 1).peeks
    assert (peek.round, peek.step, peek.name, peek.encodes, peek.probability) == (1, 1, "x1", 1, 1)


@pytest.mark.rules("R38")
def test_toy_selection_over_two_tokens_by_hand():
    """x1 = 0 (1/2): accepted (q = p), bonus uniform. x1 = 1 (1/2): one target-only token, then the
    next round is biased again: P(0, 0) = 1/4 + 1/4 * 3/4 = 7/16, and so on."""
    audit = audit_policy(toy_selection_policy, toy_selection_scenario(), 2)
    assert audit.law == {(0, 0): F(7, 16), (0, 1): F(5, 16), (1, 0): F(3, 16), (1, 1): F(1, 16)}
    assert audit.target == {s: F(1, 4) for s in audit.law}


@pytest.mark.rules("R35", "R38")
def test_the_fixed_depth_reference_never_selects():
    for depth in (0, 1):
        audit = audit_policy(fixed_depth(depth), toy_selection_scenario(), 2)
        assert audit.passes


@pytest.mark.rules("R37")
def test_published_throughput_scores_exactly():
    assert throughput_score([], DSPARK_SPS) == 1
    assert throughput_score([DSPARK_A1], DSPARK_SPS) == F(9, 10)
    assert throughput_score([DSPARK_A1, DSPARK_C2[0]], DSPARK_SPS) == F(1134, 1000)
    assert throughput_score([DSPARK_A1, DSPARK_C2[1]], DSPARK_SPS) == F(81, 100)
    assert expected_tokens([F(1, 2), F(1, 2)]) == F(7, 4)
    with pytest.raises(ValueError):
        throughput_score([F(1)] * 3, DSPARK_SPS)


@pytest.mark.rules("R37")
def test_reconstructed_rows_have_the_published_confidences_as_acceptance_rates():
    scenario = dspark_appendix_a_scenario()
    assert acceptance_rate(scenario.p(()), scenario.q(())) == DSPARK_A1
    for x1, c2 in DSPARK_C2.items():
        assert acceptance_rate(scenario.p((x1,)), scenario.q((x1,))) == c2
        assert scenario.confidence((x1,)) == c2


@pytest.mark.rules("R36", "R37")
def test_global_selection_admits_x1_for_one_value_of_it_only():
    """Depth 2 after x1 = 0 (1.134 > 1), target-only after x1 = 1 (1 > 0.9 > 0.81); it reads c2."""
    table = tabulate_policy(dspark_appendix_a_scheduler(), dspark_appendix_a_scenario())
    first, second = table.steps
    assert first.reads == ("c1", "c2")
    assert first.decisions[""] == {"0": ADMIT, "1": STOP}
    assert second.decisions[""] == {"0": ADMIT, "1": STOP}


@pytest.mark.rules("R36", "R37")
def test_appendix_a_distortion_exactly():
    """P(y1 = 0) = 1/2 * 3/5 (x1 = 0 verified, accepted w.p. (3/10)/(1/2)) + 1/2 * 3/10 (target-only)."""
    audit = audit_policy(dspark_appendix_a_scheduler(), dspark_appendix_a_scenario(), 1)
    assert audit.first_token_law == (F(9, 20), F(11, 20))
    assert audit.first_token_target == (F(3, 10), F(7, 10))
    assert audit.tv == F(3, 20)
    assert [(p.round, p.step, p.name, p.encodes) for p in audit.peeks] == [(1, 1, "c2", 1)]


@pytest.mark.rules("R36", "R37")
def test_mirrored_reading_shows_the_bias_too():
    """The admitted x1 = 0 with p(0) = 7/10 > q(0) = 1/2: always accepted once admitted, so
    P(y1 = 0) = 1/2 * 1 + 1/2 * 7/10 = 17/20 instead of 7/10; same confidences, same selection."""
    scenario = dspark_appendix_a_mirrored_scenario()
    assert acceptance_rate(scenario.p(()), scenario.q(())) == DSPARK_A1
    for x1, c2 in DSPARK_C2.items():
        assert scenario.confidence((x1,)) == c2
    assert scenario.p(())[0] > scenario.q(()).q(0)
    assert dspark_appendix_a_scenario().p(())[0] < dspark_appendix_a_scenario().q(()).q(0)
    table = tabulate_policy(dspark_appendix_a_scheduler(), scenario)
    assert table.steps[0].decisions[""] == {"0": ADMIT, "1": STOP}
    audit = audit_policy(dspark_appendix_a_scheduler(), scenario, 1)
    assert audit.first_token_law == (F(17, 20), F(3, 20))
    assert audit.first_token_target == (F(7, 10), F(3, 10))
    assert audit.tv == F(3, 20) and not audit.passes
    assert audit_policy(fixed_depth(2), scenario, 3).passes


@pytest.mark.rules("R37")
def test_an_exact_verifier_does_not_undo_the_selection():
    """The same rows verified at a fixed depth 2 emit p exactly; only the selection moves mass."""
    assert audit_policy(fixed_depth(2), dspark_appendix_a_scenario(), 3).passes
    assert audit_policy(dspark_appendix_a_scheduler(), dspark_appendix_a_scenario(), 3).tv == F(3, 20)


@pytest.mark.rules("R36", "R37")
def test_prefix_scan_with_position_confidences_passes():
    """The break makes the scan a sequential stopping rule: on the published numbers it stops at
    depth 0 (0.9 < 1); under a lighter load it admits two drafts; it passes everywhere."""
    scan = prefix_scheduler(DSPARK_SPS)
    dspark_table = tabulate_policy(scan, dspark_appendix_a_scenario())
    assert dspark_table.steps[0].decisions[""] == {"": STOP}
    light = prefix_scheduler(LIGHT_LOAD_SPS)
    light_table = tabulate_policy(light, sampled_confidence_scenario())
    assert [step.decisions[""] for step in light_table.steps] == [{"": ADMIT}, {"0": ADMIT, "1": ADMIT}]
    scenarios = [dspark_appendix_a_scenario(), sampled_confidence_scenario(), *standard_scenarios(2, 2)]
    for policy in (scan, light):
        for scenario in scenarios:
            assert audit_policy(policy, scenario, 3).passes, scenario.name


@pytest.mark.rules("R36", "R37")
def test_prefix_scan_with_sampled_token_confidences_fails():
    """Scored by q(x_i), admitting x1 depends on x1: x1 = 0 (3/4) admitted, x1 = 1 (1/4) not.
    P(y1 = 0) = 3/4 * 2/3 + 1/4 * 1/2 = 5/8."""
    policy = prefix_scheduler(LIGHT_LOAD_SPS, sampled_token_confidence=True)
    audit = audit_policy(policy, sampled_confidence_scenario(), 1)
    assert audit.first_token_law == (F(5, 8), F(3, 8))
    assert audit.tv == F(1, 8)
    assert [(p.step, p.name) for p in audit.peeks] == [(1, "t1"), (2, "t2")]
    assert audit.peeks[1].probability == F(3, 4)  # step 2 is reached only after x1 = 0 was admitted
