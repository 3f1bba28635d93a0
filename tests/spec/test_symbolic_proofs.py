"""Symbolic proofs (sympy): fixed-depth standard verification is lossless for every p and q at V = 2, 3,
depth 1 and a depth-2 chain; the closed-form bias of the toy (R38) and DSpark (R37) counterexamples,
checked against the exact enumerating auditor."""

from __future__ import annotations

from fractions import Fraction

import pytest
from sympy import Basic, Rational, Symbol, expand, factor

from qconform.spec.admission import (
    DSPARK_A1,
    DSPARK_SPS,
    audit_policy,
    dspark_appendix_a_scenario,
    dspark_appendix_a_scheduler,
    markov_scenario,
    toy_selection_policy,
)
from qconform.spec.admission.scenario import row_keys
from qconform.spec.constants import M
from qconform.spec.proofs import (
    Verification,
    dspark_admission_threshold,
    dspark_closed_forms,
    prove_fixed_depth_lossless,
    regions,
    stream_identity,
    symbolic_rows,
    toy_selection_closed_form,
    verification_in_region,
)
from qconform.spec.qrow import QRow


@pytest.mark.rules("R09", "R11", "R35")
@pytest.mark.parametrize("vocab,depth", [(2, 1), (3, 1), (2, 2), (3, 2)])
def test_fixed_depth_verification_is_lossless_for_symbolic_rows(vocab, depth):
    proof = prove_fixed_depth_lossless(vocab, depth)
    assert proof.failures == []
    assert proof.holds
    assert proof.regions_per_row == 2**vocab - 1
    # every sequence of K + 1 tokens, in every region of every draft row on its path
    assert proof.identities == vocab ** (depth + 1) * proof.regions_per_row**depth
    draft_rows = sum(vocab**n for n in range(depth))
    assert proof.residual_lemmas == draft_rows * proof.regions_per_row


@pytest.mark.rules("R11")
def test_the_proof_catches_a_wrong_verifier():
    """The identity is not vacuous: a residual drawn from p instead of max(p - q, 0) breaks it. The
    empty region S = V (p > q everywhere) is excluded: its residual mass is identically 0, so the
    scaled identity would hold vacuously, while its first-token law would be q, not p."""
    rows = symbolic_rows(2, 1)
    honest = verification_in_region(rows.p[()], rows.q[()], frozenset({0}))
    wrong = Verification(honest.accepted, honest.rejected, rows.p[()], rows.domain.one, rows.domain.one)
    assert stream_identity(rows, (0, 1), [honest]) == 0
    assert stream_identity(rows, (0, 1), [wrong]) != 0
    everywhere = verification_in_region(rows.p[()], rows.q[()], frozenset({0, 1}))
    assert everywhere.scale == 0 and everywhere.accepted != rows.p[()]
    assert frozenset({0, 1}) not in regions(2)


@pytest.mark.rules("R38")
def test_toy_closed_form():
    theta = Symbol("theta")
    form = toy_selection_closed_form()
    assert expand(form.token0 - (2 * theta - theta**2)) == 0
    assert factor(form.bias) == factor(theta * (1 - theta))
    assert form.token0.subs(theta, Rational(1, 2)) == Rational(3, 4)


@pytest.mark.rules("R38")
@pytest.mark.parametrize("share", [Fraction(1, 2), Fraction(1, 4), Fraction(7, 8)])
def test_toy_closed_form_matches_the_auditor(share):
    """The exact enumerator, for q = p = (theta, 1 - theta), agrees with 2 theta - theta^2."""
    keys = row_keys(2)
    counts = [int(share * M), M - int(share * M)]
    scenario = markov_scenario(
        "toy-theta", 2, 1, {k: QRow.dense(counts) for k in keys}, {k: [share, 1 - share] for k in keys}
    )
    law = audit_policy(toy_selection_policy, scenario, 1).first_token_law
    expected = toy_selection_closed_form().token0.subs(Symbol("theta"), Rational(share.numerator, share.denominator))
    assert isinstance(expected, Rational)  # a polynomial at a rational theta
    assert law[0] == Fraction(int(expected.p), int(expected.q))


@pytest.mark.rules("R37")
def test_dspark_closed_forms_match_the_auditor():
    p0, q0 = Symbol("p0"), Symbol("q0")
    below, above = dspark_closed_forms()
    assert expand(below.token0 - p0 * (2 - q0)) == 0 and expand(below.bias - p0 * (1 - q0)) == 0
    assert expand(above.token0 - (q0 + (1 - q0) * p0)) == 0 and expand(above.bias - q0 * (1 - p0)) == 0
    reconstructed: dict[Basic | complex, Basic | complex] = {p0: Rational(3, 10), q0: Rational(1, 2)}  # p0 < q0
    assert below.token0.subs(reconstructed) == Rational(9, 20)
    assert below.bias.subs(reconstructed) == Rational(3, 20)
    audit = audit_policy(dspark_appendix_a_scheduler(), dspark_appendix_a_scenario(), 1)
    assert audit.first_token_law[0] == Fraction(9, 20)
    assert audit.first_token_law[0] - audit.first_token_target[0] == Fraction(3, 20)


def rational(x: Fraction) -> Rational:
    """``x`` as a SymPy Rational (the constructor is typed to give NaN or zoo too, for a zero denominator)."""
    value = Rational(x.numerator, x.denominator)
    assert isinstance(value, Rational)
    return value


@pytest.mark.rules("R37")
def test_dspark_admission_threshold():
    """Depth 2 beats target-only iff c2 > 19/36: 0.9 is above it, 0 below."""
    sps = [rational(s) for s in DSPARK_SPS]
    threshold = dspark_admission_threshold(rational(DSPARK_A1), sps)
    assert threshold == Rational(19, 36)
    assert Rational(9, 10) > threshold > 0
