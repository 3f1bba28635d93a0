"""The exact law of one round's outcome, which statistical mode compares sampled rounds with
(docs/stat-mode.md).

An outcome of one round is a pair ``(accepted, emitted)``: the number of drafts
accepted and the tuple of tokens emitted. Its law is computed exactly, with the
spec's quantized draws (32-bit acceptance and correction/bonus draws, 24-bit
proposal draws), never by sampling:

* ``verification_round``: the drafts are GIVEN, so only the acceptance,
  correction and bonus draws are random. Draft ``x_i`` is accepted with
  ``acceptance_probability(p_i(x_i), q_i(x_i))`` (``ceil(2^32 p/q) / 2^32``); at
  the first rejection a correction is drawn from the full-vocabulary residual by
  the 32-bit mass rule (``mass_draw_law``); after K acceptances the bonus from
  ``p_{K+1}``. Emission ends early at a stop token or at the budget (R11).
  One law per request of the case.
* ``distribution``: the drafts are sampled too; the law of the emitted sequence is
  :func:`qconform.spec.distribution.round_law`, and ``accepted`` is
  ``len(emitted) - 1``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Sequence

from qconform.spec.distribution import mass_draw_law, round_law
from qconform.spec.verification import (
    RoundInput,
    acceptance_probability,
    check_round_input,
    emission_ends,
    residual_row,
)

#: ``(accepted, emitted)`` of one round
RoundOutcome = tuple[int, tuple[int, ...]]
Law = dict[RoundOutcome, Fraction]
#: ``(residual masses, acceptance probability of the rejected draft) -> correction law``
CorrectionLaw = Callable[[Sequence[Fraction], Fraction], list[Fraction]]


def fresh_draw_correction(masses: Sequence[Fraction], acceptance: Fraction) -> list[Fraction]:
    """The spec's correction law: a fresh 32-bit draw over the residual (R11, R23)."""
    return mass_draw_law(masses)


def add_tokens(
    law: Law, accepted: int, emitted: tuple[int, ...], reach: Fraction, probabilities: Sequence[Fraction]
) -> None:
    """Add ``reach * P(v)`` to the outcome ``(accepted, emitted + (v,))`` for every token ``v``."""
    for v, probability in enumerate(probabilities):
        if probability:
            outcome = (accepted, emitted + (v,))
            law[outcome] = law.get(outcome, Fraction(0)) + reach * probability


def request_outcome_law(inp: RoundInput, correction: CorrectionLaw = fresh_draw_correction) -> Law:
    """The exact law of ``(accepted, emitted)`` of one request's round, its drafts given.

    ``correction`` gives the law of a correction token from the residual and the
    rejected draft's acceptance probability; the default is the spec's (a fresh
    draw, independent of the rejection). Invalid inputs are refused like
    :func:`qconform.spec.verification.verify_round` refuses them.
    """
    check_round_input(inp)
    depth = len(inp.draft_tokens)
    drafts = tuple(inp.draft_tokens)
    law: Law = {}
    reach = Fraction(1)
    for i in range(1, depth + 1):
        p_row, q_row = inp.p_rows[i - 1], inp.q_rows[i - 1]
        acceptance = acceptance_probability(Fraction(p_row[drafts[i - 1]]), q_row.q(drafts[i - 1]))
        if acceptance < 1:
            add_tokens(
                law,
                i - 1,
                drafts[: i - 1],
                reach * (1 - acceptance),
                correction(residual_row(p_row, q_row), acceptance),
            )
        reach *= acceptance
        if not reach:
            return law
        if emission_ends(drafts[:i], inp):
            law[(i, drafts[:i])] = law.get((i, drafts[:i]), Fraction(0)) + reach
            return law
    add_tokens(law, depth, drafts, reach, mass_draw_law(inp.p_rows[depth]))
    return law


def chain_outcome_law(vocab: int, depth: int, q, p) -> Law:
    """The exact law of ``(accepted, emitted)`` of a round whose drafts are sampled too
    (the ``distribution`` family): :func:`qconform.spec.distribution.round_law`."""
    return {(len(emitted) - 1, emitted): probability for emitted, probability in round_law(vocab, depth, q, p).items()}
