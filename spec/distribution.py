"""The exact law of one verification round, by summing over draw intervals (R09, R11).

For a small vocabulary the law of the tokens one round emits is computed exactly,
never by sampling. Each draw contributes the exact share of its draw values:

* the proposal of ``x`` from a dyadic24 row: ``c_x / M`` (the 24-bit draw over
  counts is exact, R08);
* the acceptance of ``x``: ``min(1, ceil(2^32 p(x) / q(x)) / 2^32)`` with 32-bit
  draws, ``min(1, p(x) / q(x))`` with a real-valued uniform;
* a correction or bonus token ``v`` from masses ``r`` of total ``R``: the number
  of 32-bit draws in its interval over ``2^32`` (see
  :func:`qconform.spec.sampling.mass_draw_counts`), ``r_v / R`` with a real uniform.

q and p may depend on the tokens already accepted in the round (the prefix, a
tuple of token IDs, ``()`` at the first position): ``q`` maps a prefix of
length ``< K`` to the q row that drafts the next token, ``p`` maps a prefix of
length ``<= K`` to the target row at the next position (length ``K``: the bonus
row). Either may be a mapping or a callable.

With a real uniform, the first emitted token is distributed exactly as ``p(())``
whatever q is (R09). With 32-bit draws it deviates by a bounded amount, which
:func:`quantization_deviation` computes exactly and bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Mapping, Sequence, Union

from qconform.spec.constants import U32_BITS, M
from qconform.spec.errors import refuse
from qconform.spec.qrow import QRow
from qconform.spec.rules import defines
from qconform.spec.sampling import integer_masses, mass_draw_counts
from qconform.spec.verification import acceptance_probability, check_target_row, check_target_shapes, residual_row

Prefix = tuple[int, ...]
QSource = Union[Mapping[Prefix, QRow], Callable[[Prefix], QRow]]
PSource = Union[Mapping[Prefix, Sequence[Fraction]], Callable[[Prefix], Sequence[Fraction]]]
Law = dict[Prefix, Fraction]

U32_LIMIT: int = 1 << U32_BITS


@dataclass(frozen=True)
class DrawModel:
    """How draws become probabilities: acceptance of (p, q), and a categorical over masses."""

    accept: Callable[[Fraction, Fraction], Fraction]
    categorical: Callable[[Sequence[Fraction]], list[Fraction]]


@defines("R11")
def mass_draw_law(masses: Sequence[Fraction]) -> list[Fraction]:
    """Each token's probability under a 32-bit correction/bonus draw: its draws over ``2^32``."""
    return [Fraction(draws, U32_LIMIT) for draws in mass_draw_counts(masses)]


@defines("R11")
def normalized(masses: Sequence[Fraction]) -> list[Fraction]:
    """Each token's probability under a real-valued uniform: ``r_v / R``."""
    scaled = integer_masses(masses)
    total = sum(scaled)
    return [Fraction(mass, total) for mass in scaled]


@defines("R11")
def real_acceptance_probability(p: Fraction, q: Fraction) -> Fraction:
    """``min(1, p / q)``: acceptance with a real-valued uniform."""
    return min(Fraction(1), Fraction(p) / q)


QUANTIZED_DRAWS = DrawModel(accept=acceptance_probability, categorical=mass_draw_law)
REAL_UNIFORM = DrawModel(accept=real_acceptance_probability, categorical=normalized)


def row_at(source: QSource | PSource, prefix: Prefix, what: str):
    """The row a mapping or callable gives for ``prefix``; BAD_SHAPE if it has none."""
    if callable(source):
        return source(prefix)
    if prefix not in source:
        raise refuse("BAD_SHAPE", f"no {what} row for prefix {prefix}")
    return source[prefix]


def q_row_at(q: QSource, prefix: Prefix, vocab: int) -> QRow:
    row = row_at(q, prefix, "q")
    if not isinstance(row, QRow) or row.vocab != vocab:
        raise refuse("BAD_SHAPE", f"q row for prefix {prefix} is not a QRow over {vocab} tokens")
    return row


def p_row_at(p: PSource, prefix: Prefix, vocab: int) -> list[Fraction]:
    row = [Fraction(value) for value in row_at(p, prefix, "p")]
    check_target_row(row, vocab)
    return row


@defines("R27")
def check_depth_positive(depth: int) -> None:
    """Refuse (BAD_SHAPE) a depth that is not a positive integer: a round drafts K >= 1 tokens."""
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise refuse("BAD_SHAPE", f"depth {depth!r} is not a positive integer")


@defines("R01", "R11")
def reachable_prefixes(vocab: int, depth: int, q: Mapping[Prefix, QRow], p: Mapping[Prefix, Sequence[Fraction]]):
    """Every prefix a round can reach, shortest first; BAD_SHAPE for the first that lacks a row it needs.

    The empty prefix is reached. A prefix ``s`` of length ``< K`` needs its q row (the draft's) and its
    p row (acceptance and residual); its child ``s + (x,)`` is reached iff ``q_s(x) > 0`` (x can be
    proposed) **and** ``p_s(x) > 0`` (x can be accepted: the acceptance probability, real or 32-bit,
    is positive exactly then). A prefix of length ``K`` needs its p row (the bonus). Rows of other
    prefixes may be left out (docs/formats/distribution.md, "Prefix keys").
    """
    reached: list[Prefix] = [()]
    for prefix in reached:
        if prefix not in p:
            raise refuse("BAD_SHAPE", f"no p row for the reachable prefix {prefix}")
        if len(prefix) == depth:
            continue
        if prefix not in q:
            raise refuse("BAD_SHAPE", f"no q row for the reachable prefix {prefix}")
        reached += [prefix + (x,) for x, _ in q[prefix].support() if p[prefix][x] > 0]
    return reached


@defines("R10", "R27")
def check_round_table(vocab: int, depth: int, q: Mapping[Prefix, QRow], p: Mapping[Prefix, Sequence[Fraction]]) -> None:
    """Refuse a round's table in the order of ``refusal_order.DISTRIBUTION_REFUSALS`` after its q rows
    (which ``QRow`` validated): every target row's length, then every target row's values, then a
    missing row of a prefix the round can reach (reachability reads the rows' values, so it comes last)."""
    check_depth_positive(depth)
    check_target_shapes([len(row) for row in p.values()], vocab)
    for row in p.values():
        check_target_row(list(row), vocab)
    reachable_prefixes(vocab, depth, q, p)


@defines("R11")
def add_categorical(law: Law, prefix: Prefix, reach: Fraction, probabilities: Sequence[Fraction]) -> None:
    """Add ``reach * P(v)`` to the sequence ``prefix + (v,)`` for every token ``v``."""
    for v, probability in enumerate(probabilities):
        if probability:
            sequence = prefix + (v,)
            law[sequence] = law.get(sequence, Fraction(0)) + reach * probability


@defines("R08", "R11")
def round_law_with(vocab: int, depth: int, q: QSource, p: PSource, model: DrawModel) -> Law:
    """The law of the emitted token sequence of one round under a draw model.

    Walks every accepted prefix with the probability of reaching it. At a prefix
    of length ``< K`` each draft ``x`` of count ``c_x > 0`` is proposed with
    probability ``c_x / M`` and accepted with ``model.accept``; the rejected share
    emits a correction from the full-vocabulary residual. At length ``K`` the
    bonus is drawn from the next target row.
    """
    check_depth_positive(depth)
    law: Law = {}
    frontier: list[tuple[Prefix, Fraction]] = [((), Fraction(1))]
    while frontier:
        prefix, reach = frontier.pop()
        p_row = p_row_at(p, prefix, vocab)
        if len(prefix) == depth:
            add_categorical(law, prefix, reach, model.categorical(p_row))
            continue
        q_row = q_row_at(q, prefix, vocab)
        rejected = Fraction(0)
        for x, count in q_row.support():
            proposed = Fraction(count, M)
            accepted = model.accept(p_row[x], q_row.q(x))
            if accepted:
                frontier.append((prefix + (x,), reach * proposed * accepted))
            rejected += proposed * (1 - accepted)
        if rejected:
            add_categorical(law, prefix, reach * rejected, model.categorical(residual_row(p_row, q_row)))
    return dict(sorted(law.items()))


@defines("R08", "R11")
def round_law(vocab: int, depth: int, q: QSource, p: PSource) -> Law:
    """The exact law of one round's emitted sequence with the ABI's 24- and 32-bit draws."""
    return round_law_with(vocab, depth, q, p, QUANTIZED_DRAWS)


@defines("R09", "R11")
def round_law_real_uniform(vocab: int, depth: int, q: QSource, p: PSource) -> Law:
    """The law of one round's emitted sequence if acceptance and residual used a real uniform."""
    return round_law_with(vocab, depth, q, p, REAL_UNIFORM)


@defines("R11")
def first_token_marginal(law: Law, vocab: int) -> list[Fraction]:
    """``P(emitted[0] = v)`` for every token ``v``."""
    marginal = [Fraction(0)] * vocab
    for sequence, probability in law.items():
        marginal[sequence[0]] += probability
    return marginal


@defines("R11")
def first_token_law(vocab: int, depth: int, q: QSource, p: PSource) -> list[Fraction]:
    """The exact law of the first emitted token with the ABI's draws."""
    return first_token_marginal(round_law(vocab, depth, q, p), vocab)


@defines("R09", "R11")
def first_token_law_real_uniform(vocab: int, depth: int, q: QSource, p: PSource) -> list[Fraction]:
    """The law of the first emitted token with a real uniform: exactly ``p(())`` (R09)."""
    return first_token_marginal(round_law_real_uniform(vocab, depth, q, p), vocab)


def total_variation(a: Mapping, b: Mapping) -> Fraction:
    """``1/2 * sum |a(s) - b(s)|`` over the union of both supports."""
    keys = set(a) | set(b)
    return sum((abs(a.get(k, Fraction(0)) - b.get(k, Fraction(0))) for k in keys), Fraction(0)) / 2


@dataclass(frozen=True)
class Deviation:
    """An exact total-variation distance and the proven bound it must respect."""

    tv: Fraction
    bound: Fraction


@defines("R11")
def first_token_deviation_bound(p_row: Sequence[Fraction], q_row: QRow) -> Fraction:
    """``2^-32 * (Q_minus + beta * s / 2)``, a bound on TV(first-token law, p).

    Notation: ``alpha(x) = min(1, p(x)/q(x))`` and ``a(x) = min(1, ceil(2^32
    alpha(x)) / 2^32)`` are the real and quantized acceptance probabilities, so
    ``delta(x) = a(x) - alpha(x)`` is in ``[0, 2^-32)`` and is zero when
    ``p(x) >= q(x)``. ``r = max(p - q, 0)``, ``beta = sum(r) = sum q (1 - alpha)``,
    ``rho(v) = n_v / 2^32`` the quantized residual law, ``s`` the number of
    tokens with ``r_v > 0``, ``Q_minus = sum of q(x) over p(x) < q(x)``,
    ``Delta = sum q(x) delta(x) < 2^-32 Q_minus``.

    Proof. The first token only depends on position 1. Exactly,
    ``p(v) = q(v) alpha(v) + r_v`` and ``P(v) = q(v) a(v) + (beta - Delta) rho(v)``.
    If ``p(v) < q(v)`` then ``r_v = 0``, so ``rho(v) = 0`` and
    ``0 <= P(v) - p(v) = q(v) delta(v) < q(v) 2^-32``. Otherwise
    ``delta(v) = 0`` and ``P(v) - p(v) = beta (rho(v) - r_v/beta) - Delta rho(v)``.
    ``n_v = ceil(2^32 C_v/beta) - ceil(2^32 C_{v-1}/beta)`` differs from
    ``2^32 r_v/beta`` by less than 1 (a difference of two ceiling errors in
    [0, 1)), and by 0 where ``r_v = 0``; so ``sum_v |rho(v) - r_v/beta| < s 2^-32``.
    Summing, with ``sum rho = 1``:
    ``2 TV <= Delta + beta s 2^-32 + Delta``, hence
    ``TV <= Delta + beta s 2^-33 <= 2^-32 (Q_minus + beta s / 2)``. Per token,
    ``|P(v) - p(v)| < 2^-32 (q(v) + beta + Q_minus) <= 3 * 2^-32``.
    """
    q_minus = Fraction(0)
    beta = Fraction(0)
    support = 0
    for v, count in enumerate(q_row.dense_counts()):
        q = Fraction(count, M)
        if p_row[v] < q:
            q_minus += q
        elif p_row[v] > q:
            beta += p_row[v] - q
            support += 1
    return (q_minus + beta * support / 2) / U32_LIMIT


@defines("R09", "R11")
def quantization_deviation(vocab: int, depth: int, q: QSource, p: PSource) -> Deviation:
    """TV between the first-token law with 32-bit draws and the target ``p(())``, and its bound.

    See :func:`first_token_deviation_bound` for the bound and its proof.
    """
    target = p_row_at(p, (), vocab)
    law = first_token_law(vocab, depth, q, p)
    tv = total_variation(dict(enumerate(law)), dict(enumerate(target)))
    return Deviation(tv=tv, bound=first_token_deviation_bound(target, q_row_at(q, (), vocab)))


@defines("R11")
def round_deviation(vocab: int, depth: int, q: QSource, p: PSource) -> Deviation:
    """TV between the round's emitted-sequence laws with 32-bit draws and with a real uniform.

    Bound ``2^-32 (K + V/2)``. Proof: both procedures make the same proposal draws
    (exact, R08) and differ only in the kernels of their other steps. An
    acceptance step's two Bernoulli laws differ in TV by ``a - alpha < 2^-32``;
    the single correction or bonus step's categoricals by
    ``sum_v |rho(v) - r_v/R| / 2 < s 2^-33 <= V 2^-33`` (see
    :func:`first_token_deviation_bound`). Coupling the two runs step by step with
    maximal couplings, they part only if some step parts, which by the union bound
    over at most ``K`` acceptance steps and one categorical step has probability
    below ``K 2^-32 + V 2^-33``; the emitted sequence is a function of the run.
    """
    tv = total_variation(round_law(vocab, depth, q, p), round_law_real_uniform(vocab, depth, q, p))
    return Deviation(tv=tv, bound=Fraction(2 * depth + vocab, 2 * U32_LIMIT))
