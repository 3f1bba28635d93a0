"""The counterexamples to depth admission that inspects its own draws (R37, R38).

**Toy selection bias (R38).** q = p uniform over two tokens; the first draw is
admitted only when it is token 0, otherwise the round resamples target-only.
Token 0 is emitted with ``1/2 * 1 + 1/2 * 1/2 = 3/4`` instead of ``1/2``.

**DSpark v1 appendix A (R37).** One request, ``gamma = 2``, ``a1 = c_1 = 0.8``,
``SPS(1) = 1``, ``SPS(2) = 0.5``, ``SPS(3) = 0.45``; ``c_2 = 0.9`` or ``0``
depending on the sampled ``x_1``. The scores are ``S(0) = 1``, ``S(1) = 0.9``,
and ``S(2) = 1.134`` (``c_2 = 0.9``) or ``0.81`` (``c_2 = 0``), so global
selection verifies ``x_1, x_2`` for one value of ``x_1`` and nothing for the
other. The paper's own p and q are not available here; the scenario below is a
reconstruction: the smallest (V = 2) rows whose *exact acceptance rates*
``sum_v min(p(v), q(v))`` are the stated confidences (so the scheduler's
confidences are honest, and the bias owes nothing to a miscalibrated one):

* before ``x_1``: ``q = (1/2, 1/2)``, ``p = (3/10, 7/10)``: ``3/10 + 1/2 = 4/5``;
* after ``x_1 = 0``: ``q = (1/2, 1/2)``, ``p = (2/5, 3/5)``: ``2/5 + 1/2 = 9/10``;
* after ``x_1 = 1``: ``q = (1, 0)``, ``p = (0, 1)``: disjoint, ``0``.

Under the appendix-A scheduler token 0 is emitted first with
``1/2 * 3/5 + 1/2 * 3/10 = 9/20`` instead of ``p(0) = 3/10``.

The design does not fix which token the selection admits, so a second,
**mirrored** reading is pinned too: the admitted token (``x_1 = 0``, the one
after which ``c_2 = 0.9``) is the one with ``p > q``: before ``x_1``,
``p = (7/10, 3/10)`` (rate ``1/2 + 3/10 = 4/5``), the rows after ``x_1``
unchanged. Then the admitted ``x_1 = 0`` is always accepted and token 0 is
emitted first with ``1/2 * 1 + 1/2 * 7/10 = 17/20`` instead of ``7/10``. Both
readings move 3/20 of mass: whichever token the selection admits, an exact
verifier cannot undo it.
"""

from __future__ import annotations

from fractions import Fraction

from qconform.spec.admission.policy import ADMIT, STOP, AdmissionView, Policy, block_policy
from qconform.spec.admission.scenario import Scenario, dyadic_row, exact_row, markov_scenario
from qconform.spec.admission.schedulers import global_best_depth
from qconform.spec.rules import defines

#: SPS(1), SPS(2), SPS(3) of DSpark v1 appendix A: verification steps per second at 1, 2, 3 tokens.
DSPARK_SPS: tuple[Fraction, ...] = (Fraction(1), Fraction(1, 2), Fraction(9, 20))
#: The published first-position confidence a1.
DSPARK_A1 = Fraction(4, 5)
#: The published second-position confidence, by the sampled x_1 (the reconstruction's assignment).
DSPARK_C2: dict[int, Fraction] = {0: Fraction(9, 10), 1: Fraction(0)}
#: Steps per second of a lightly loaded verifier, where scanning admits some drafts.
LIGHT_LOAD_SPS: tuple[Fraction, ...] = (Fraction(1), Fraction(3, 4), Fraction(3, 5))


@defines("R38")
def toy_selection_policy(view: AdmissionView) -> str:
    """Admit ``x_1`` only when it is token 0, never a second draft (reads ``x_1`` before admitting it)."""
    return ADMIT if view.step == 1 and view.draft(1) == 0 else STOP


@defines("R38")
def toy_selection_scenario() -> Scenario:
    """q = p uniform over two tokens, at most one draft per round."""
    uniform_q, uniform_p = dyadic_row([1, 1]), exact_row([1, 1])
    keys = ("", "0", "1")
    return markov_scenario(
        "toy-q-equals-p-uniform-v2", 2, 1, {k: uniform_q for k in keys}, {k: uniform_p for k in keys}
    )


@defines("R37")
def dspark_appendix_a_scenario() -> Scenario:
    """The reconstructed rows of DSpark v1 appendix A (see the module docstring)."""
    half = dyadic_row([1, 1])
    q_rows = {"": half, "0": half, "1": dyadic_row([1, 0])}
    p_rows = {"": exact_row([3, 7]), "0": exact_row([2, 3]), "1": exact_row([0, 1])}
    return markov_scenario("dspark-appendix-a-v2", 2, len(DSPARK_SPS) - 1, q_rows, p_rows)


@defines("R37")
def dspark_appendix_a_mirrored_scenario() -> Scenario:
    """The mirrored reading of appendix A: the admitted ``x_1 = 0`` has ``p(0) = 7/10 > q(0) = 1/2``."""
    half = dyadic_row([1, 1])
    q_rows = {"": half, "0": half, "1": dyadic_row([1, 0])}
    p_rows = {"": exact_row([7, 3]), "0": exact_row([2, 3]), "1": exact_row([0, 1])}
    return markov_scenario("dspark-appendix-a-mirrored-v1", 2, len(DSPARK_SPS) - 1, q_rows, p_rows)


@defines("R37")
def dspark_appendix_a_scheduler() -> Policy:
    """The appendix-A global selection over the published SPS, as a sequential policy."""
    return block_policy(global_best_depth(DSPARK_SPS))


@defines("R36", "R37")
def sampled_confidence_scenario() -> Scenario:
    """q = (3/4, 1/4), p = (1/2, 1/2) at every context: the sampled token's q varies with the token.

    With :data:`LIGHT_LOAD_SPS`, a prefix scan scored by the sampled tokens'
    confidences admits ``x_1 = 0`` (``t_1 = 3/4``) and stops on ``x_1 = 1``
    (``t_1 = 1/4``).
    """
    keys = ("", "0", "1")
    q_row, p_row = dyadic_row([3, 1]), exact_row([1, 1])
    return markov_scenario(
        "sampled-confidence-v2", 2, len(LIGHT_LOAD_SPS) - 1, {k: q_row for k in keys}, {k: p_row for k in keys}
    )
