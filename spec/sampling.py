"""Exact categorical sampling from integer draws (R08, R11).

Two rules, both integer-exact:

* the **proposal** rule (R08): over integer counts, a 24-bit draw ``u`` picks the
  first token whose cumulative count is strictly greater than ``u``. Each token
  is chosen by exactly ``c_v`` of the draw values, so a dyadic24 row is sampled
  exactly;
* the **mass** rule (R11), used by correction and bonus draws: over nonnegative
  rational masses with total ``R > 0``, a 32-bit draw ``u`` picks the first token
  whose cumulative mass satisfies ``C_v * 2^32 > u * R``. Token ``v`` owns the
  draw interval ``[C_{v-1}/R, C_v/R)`` of ``u / 2^32``.

Zero-count and zero-mass tokens own empty intervals and are never chosen.
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm
from typing import Sequence

from qconform.spec.constants import U24_BITS, U32_BITS
from qconform.spec.errors import refuse
from qconform.spec.qrow import QRow
from qconform.spec.rules import defines

U24_LIMIT: int = 1 << U24_BITS
U32_LIMIT: int = 1 << U32_BITS


def check_draw(u: int, limit: int, what: str) -> None:
    if not isinstance(u, int) or isinstance(u, bool) or not 0 <= u < limit:
        raise refuse("BAD_RNG_FIELD", f"{what} draw {u!r} is not an integer in [0, {limit})")


@defines("R08")
def sample_counts(counts: Sequence[int], u24: int) -> int:
    """The first index whose cumulative count is strictly greater than ``u24`` (R08).

    For a dyadic24 row the counts sum to ``M`` and every draw in ``[0, M)`` picks
    a token. Counts summing to less than ``M`` are allowed (a reduced-mass row),
    but then the draw must be below their total.
    """
    check_draw(u24, U24_LIMIT, "24-bit")
    cumulative = 0
    for index, count in enumerate(counts):
        cumulative += count
        if cumulative > u24:
            return index
    raise refuse("WRONG_TOTAL_MASS", f"counts sum to {cumulative}, not above the draw {u24}")


@defines("R07", "R08")
def sample_sparse(ids: Sequence[int], counts: Sequence[int], u24: int) -> int:
    """The global ID chosen by ``u24`` over a sparse support (R07, R08)."""
    if len(ids) != len(counts):
        raise refuse("BAD_SHAPE", f"{len(ids)} sparse IDs but {len(counts)} counts")
    return ids[sample_counts(counts, u24)]


@defines("R03", "R08")
def sample_qrow(row: QRow, u24: int) -> int:
    """The global token ID that the proposal draw ``u24`` picks from a q row (R08)."""
    if row.ids is None:
        return sample_counts(row.counts, u24)
    return sample_sparse(row.ids, row.counts, u24)


def exact_total(values: Sequence[Fraction]) -> Fraction:
    """The exact sum of rationals, adding numerators over each distinct denominator first.

    Equal to ``sum(values)``; rows of a large vocabulary share few denominators,
    so this does few rational additions.
    """
    numerators: dict[int, int] = {}
    for value in values:
        if value:
            numerators[value.denominator] = numerators.get(value.denominator, 0) + value.numerator
    return sum((Fraction(n, d) for d, n in numerators.items()), Fraction(0))


@defines("R11")
def integer_masses(masses: Sequence[Fraction]) -> list[int]:
    """The masses scaled by their common denominator: integers in the same ratios.

    The mass rule compares ``C_v * 2^32`` with ``u * R``; scaling every mass by one
    positive factor scales both sides alike, so the integers pick the same token.
    Refuses a negative mass (BAD_TARGET_ROW) and a zero total (ZERO_MASS).
    """
    if len(masses) == 0:
        raise refuse("EMPTY_ROW", "a mass row needs at least one entry")
    for mass in masses:
        if mass < 0:
            raise refuse("BAD_TARGET_ROW", f"mass {mass} is negative")
    denominator = lcm(*{m.denominator for m in masses})
    scaled = [m.numerator * (denominator // m.denominator) if m else 0 for m in masses]
    if not any(scaled):
        raise refuse("ZERO_MASS", "the masses sum to zero")
    return scaled


@defines("R11")
def first_above(scaled: Sequence[int], u32: int) -> int:
    """Over integer masses, the first ``v`` with ``C_v * 2^32 > u32 * R``."""
    threshold = u32 * sum(scaled)
    cumulative = 0
    for index, mass in enumerate(scaled):
        cumulative += mass
        if cumulative * U32_LIMIT > threshold:
            return index
    raise AssertionError("unreachable: u32 < 2^32 makes the last cumulative mass exceed the draw")


@defines("R11")
def mass_draw(masses: Sequence[Fraction], u32: int) -> tuple[int, Fraction]:
    """The token the 32-bit draw picks under the mass rule, and the draw's margin.

    The token is the first ``v`` with ``C_v * 2^32 > u32 * R`` (R11); it owns the
    interval ``[C_{v-1}/R, C_v/R)`` of ``u32 / 2^32``. The margin is the distance
    of ``u32 / 2^32`` to the nearest edge of that interval: a draw would have to
    move by at least the margin to change the token, which lets the harness tell
    a precision divergence from a wrong token.
    """
    check_draw(u32, U32_LIMIT, "32-bit")
    scaled = integer_masses(masses)
    v = first_above(scaled, u32)
    total = sum(scaled)
    below = sum(scaled[:v])
    u = Fraction(u32, U32_LIMIT)
    return v, min(u - Fraction(below, total), Fraction(below + scaled[v], total) - u)


@defines("R11")
def mass_draw_counts(masses: Sequence[Fraction]) -> list[int]:
    """How many of the ``2^32`` draw values the mass rule maps to each token.

    ``u`` picks ``v`` iff ``2^32 C_{v-1} <= u R < 2^32 C_v``; the number of integers
    ``u >= 0`` below ``t >= 0`` is ``ceil(t)``, so token ``v`` gets
    ``ceil(2^32 C_v / R) - ceil(2^32 C_{v-1} / R)`` draws. They sum to ``2^32``.
    """
    scaled = integer_masses(masses)
    total = sum(scaled)
    draws: list[int] = []
    cumulative = 0
    below = 0  # ceil(2^32 C_{v-1} / R)
    for mass in scaled:
        cumulative += mass
        upto = -((-cumulative * U32_LIMIT) // total)  # ceil(2^32 C_v / R)
        draws.append(upto - below)
        below = upto
    return draws
