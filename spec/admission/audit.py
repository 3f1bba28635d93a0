"""The exact auditor of a depth-admission policy (R35-R38).

It enumerates, with exact rationals and no sampling, the law of the first
``horizon`` tokens that a stream of rounds emits when ``policy`` admits their
positions, beside the target law ``prod_j p(y_j | y_1..y_(j-1))``. Each round:

1. the policy admits positions one at a time (:mod:`.policy`); a draft is drawn
   from its q row when its position is admitted, or earlier if the policy reads
   it (a premature read, logged);
2. the admitted drafts ``x_1..x_d`` are verified by standard speculative
   sampling (R11): accept ``x_i`` with ``min(1, p(x_i)/q(x_i))``; at the first
   rejection emit a correction from the full-vocabulary residual ``max(p - q, 0)``
   and end the round; after ``d`` acceptances emit a bonus from the next target
   row. ``d = 0`` is target-only: one token from ``p``.

Rounds repeat from the new committed context until ``horizon`` tokens exist.

**Draws.** The auditor uses a real-valued uniform for acceptance and for the
correction and bonus (``REAL_UNIFORM`` of :mod:`qconform.spec.distribution`); the
proposal draw is exact anyway (R08). With a real uniform, fixed-depth
verification preserves ``p`` exactly (R09), so any mass the audit finds moved is
the policy's doing, and "differs from p" means exactly that. The ABI's 32-bit
draws deviate from the real-uniform law by a bounded amount that
:mod:`qconform.spec.distribution` computes and bounds separately; auditing with
them would make every policy, the fixed-depth reference included, differ from p
by that amount. ``draws=QUANTIZED_DRAWS`` is accepted for that comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from qconform.spec.admission.choices import Choices, exact_law
from qconform.spec.admission.draws import DrawOptions
from qconform.spec.admission.policy import STOP, AdmissionView, Policy, RoundRecord, decision_of
from qconform.spec.admission.reveal import DraftBlock, Read, ReadLog
from qconform.spec.admission.scenario import Context, Scenario
from qconform.spec.distribution import REAL_UNIFORM, DrawModel, Law, first_token_marginal, total_variation
from qconform.spec.errors import refuse
from qconform.spec.rules import defines


@dataclass(frozen=True)
class RoundOutcome:
    """What one round emitted, the depth it admitted, and the premature reads it made."""

    emitted: tuple[int, ...]
    depth: int
    premature: tuple[Read, ...]


@defines("R11", "R33")
def verify_admitted(
    context: Context, drafts: tuple[int, ...], choices: Choices, options: DrawOptions
) -> tuple[int, ...]:
    """Standard verification of the admitted drafts (R11); no drafts: one target-only token."""
    emitted: list[int] = []
    for i, token in enumerate(drafts):
        here = context + drafts[:i]
        if not choices.choose(options.acceptance(here, token)):
            return tuple(emitted) + (choices.choose(options.correction(here)),)
        emitted.append(token)
    return tuple(emitted) + (choices.choose(options.bonus(context + drafts)),)


@defines("R35", "R36")
def admitted_round(
    scenario: Scenario,
    policy: Policy,
    context: Context,
    prior_rounds: tuple[RoundRecord, ...],
    choices: Choices,
    options: DrawOptions,
) -> RoundOutcome:
    """One round: the policy admits positions sequentially, then the admitted drafts are verified.

    Step ``i`` asks the policy only while ``i <= max_depth`` and every earlier
    step admitted; ``x_i`` is drawn once position ``i`` is admitted (R36).
    """
    block = DraftBlock(scenario, context, choices, options)
    log = ReadLog()
    depth = 0
    while depth < scenario.max_depth:
        view = AdmissionView(depth + 1, block, log, prior_rounds)
        if decision_of(policy(view)) == STOP:
            break
        depth += 1
        block.prefix(depth)
    emitted = verify_admitted(context, block.prefix(depth), choices, options)
    return RoundOutcome(emitted=emitted, depth=depth, premature=log.premature())


@dataclass(frozen=True, order=True)
class Peek:
    """A premature read: in round ``round``, before admitting ``step``, the policy read ``name``.

    ``name`` encodes ``x_1..x_encodes`` with ``encodes >= step``; ``probability``
    is the probability that the audited stream makes this read.
    """

    round: int
    step: int
    name: str
    encodes: int
    probability: Fraction


@dataclass(frozen=True)
class StreamLaw:
    """The law of the first ``horizon`` emitted tokens, and every premature read with its probability."""

    law: Law
    peeks: tuple[Peek, ...]


@defines("R36")
def check_horizon(horizon: int) -> None:
    """Refuse a horizon that is not a positive number of tokens (BAD_SHAPE)."""
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise refuse("BAD_SHAPE", f"horizon {horizon!r} is not a positive integer")


@defines("R35", "R36")
def stream_law(scenario: Scenario, policy: Policy, horizon: int, draws: DrawModel = REAL_UNIFORM) -> StreamLaw:
    """The exact law of the first ``horizon`` tokens of a stream of rounds under ``policy``.

    Each round starts from the scenario's history followed by every token
    emitted so far, and sees the earlier rounds as :class:`RoundRecord` s.
    """
    check_horizon(horizon)
    options = DrawOptions(scenario, draws)
    law: Law = {}
    peeks: dict[tuple[int, Read], Fraction] = {}
    pending: list[tuple[tuple[int, ...], tuple[RoundRecord, ...], Fraction]] = [((), (), Fraction(1))]
    while pending:
        emitted, prior, weight = pending.pop()
        context = scenario.history + emitted

        def one_round(choices: Choices) -> RoundOutcome:
            return admitted_round(scenario, policy, context, prior, choices, options)

        for outcome, probability in exact_law(one_round).items():
            reach = weight * probability
            for read in outcome.premature:
                key = (len(prior) + 1, read)
                peeks[key] = peeks.get(key, Fraction(0)) + reach
            tokens = emitted + outcome.emitted
            if len(tokens) >= horizon:
                law[tokens[:horizon]] = law.get(tokens[:horizon], Fraction(0)) + reach
            else:
                pending.append((tokens, prior + (RoundRecord(outcome.depth, outcome.emitted),), reach))
    found = (Peek(r, read.step, read.name, read.encodes, probability) for (r, read), probability in peeks.items())
    return StreamLaw(law=dict(sorted(law.items())), peeks=tuple(sorted(found)))


@defines("R09", "R11")
def target_law(scenario: Scenario, horizon: int) -> Law:
    """``prod_j p(y_j | history, y_1..y_(j-1))`` for every sequence of ``horizon`` tokens of positive mass."""
    check_horizon(horizon)
    law: Law = {(): Fraction(1)}
    for _ in range(horizon):
        longer: Law = {}
        for sequence, mass in law.items():
            for token, probability in enumerate(scenario.p(scenario.history + sequence)):
                if probability:
                    longer[sequence + (token,)] = mass * probability
        law = longer
    return dict(sorted(law.items()))


@dataclass(frozen=True)
class MovedMass:
    """A token sequence whose mass under the policy differs from its target mass."""

    tokens: tuple[int, ...]
    law: Fraction
    target: Fraction


@defines("R36")
def moved_mass(law: Law, target: Law) -> list[MovedMass]:
    """Every sequence whose mass differs between ``law`` and ``target``, in token order."""
    keys = sorted(set(law) | set(target))
    zero = Fraction(0)
    return [
        MovedMass(k, law.get(k, zero), target.get(k, zero)) for k in keys if law.get(k, zero) != target.get(k, zero)
    ]


@dataclass(frozen=True)
class Audit:
    """The auditor's verdict on one policy in one scenario.

    ``lossless``: the policy's law of the first ``horizon`` tokens is exactly the
    target law. ``measurable``: no premature read on any path (R36). A policy
    passes when both hold.
    """

    scenario: str
    vocab: int
    horizon: int
    law: Law
    target: Law
    tv: Fraction
    moved: tuple[MovedMass, ...]
    first_token_law: tuple[Fraction, ...]
    first_token_target: tuple[Fraction, ...]
    first_token_tv: Fraction
    peeks: tuple[Peek, ...]

    @property
    def lossless(self) -> bool:
        return self.tv == 0

    @property
    def measurable(self) -> bool:
        return not self.peeks

    @property
    def passes(self) -> bool:
        return self.lossless and self.measurable


@defines("R35", "R36", "R37", "R38")
def audit_policy(policy: Policy, scenario: Scenario, horizon: int = 1) -> Audit:
    """Audit ``policy`` in ``scenario``: its exact law beside the target law, and its premature reads.

    Real-valued uniform draws (see the module docstring for why).
    """
    stream = stream_law(scenario, policy, horizon, REAL_UNIFORM)
    target = target_law(scenario, horizon)
    first_law = first_token_marginal(stream.law, scenario.vocab)
    first_target = scenario.p(scenario.history)
    return Audit(
        scenario=scenario.name,
        vocab=scenario.vocab,
        horizon=horizon,
        law=stream.law,
        target=target,
        tv=total_variation(stream.law, target),
        moved=tuple(moved_mass(stream.law, target)),
        first_token_law=tuple(first_law),
        first_token_target=tuple(first_target),
        first_token_tv=total_variation(dict(enumerate(first_law)), dict(enumerate(first_target))),
        peeks=stream.peeks,
    )


@defines("R36")
def first_token_moves(audit: Audit) -> list[MovedMass]:
    """The tokens whose first-token mass moved: the law of ``y_1`` beside ``p(history)``."""
    return moved_mass(
        {(v,): mass for v, mass in enumerate(audit.first_token_law)},
        {(v,): mass for v, mass in enumerate(audit.first_token_target)},
    )
