"""Seeded bugs of the native-RNG torch candidate, for statistical mode (docs/stat-mode.md).

A candidate that draws from its own RNG cannot be checked draw for draw, so its
bugs must show in the *law* of its rounds. Each mutant here is a bug that a
native-RNG sampler can have, served as ``torch-native-mutant:<name>``
(adapters/torch_native.py); ``qconform stat`` must fail each of them.

Besides the one-line description, each mutant has the exact law of its
correction step, :data:`MUTANT_CORRECTIONS`, in the form
:func:`qconform.spec.outcome_law.request_outcome_law` takes: ``(residual masses,
acceptance probability of the rejected draft) -> law of the correction token``.
The benchmark (bench/bench_stat_power.py) computes from it the samples each
mutant needs to be detected. This module never imports torch.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from qconform.adapters.catalog import TILT
from qconform.spec.distribution import mass_draw_law
from qconform.spec.sampling import mass_draw_counts

#: draws of 32 bits
U32_LIMIT = 1 << 32


def reused_draw_correction(masses: Sequence[Fraction], acceptance: Fraction) -> list[Fraction]:
    """The correction law when the correction reuses the acceptance draw ``u``.

    The draft was rejected, so ``u`` is uniform over the ``2^32 - A`` rejecting
    draws ``A <= u < 2^32`` (``A = acceptance * 2^32``). Token ``v`` is picked by
    the draws in its interval ``[lo_v, hi_v)`` (``qconform.spec.sampling.mass_draw``),
    so its probability is the share of the rejecting draws inside that interval.
    """
    accepting = int(acceptance * U32_LIMIT)
    law, low = [], 0
    for draws in mass_draw_counts(masses):
        high = low + draws
        law.append(Fraction(max(0, high - max(low, accepting)), U32_LIMIT - accepting))
        low = high
    return law


def median_split(masses: Sequence[Fraction]) -> int | None:
    """The ID ``k`` whose cumulative mass ``C_k`` is nearest half the total (lowest on ties),
    among the positive tokens but the last one; None with fewer than two positive tokens."""
    positive = [v for v, mass in enumerate(masses) if mass > 0]
    if len(positive) < 2:
        return None
    half = sum(masses) / 2
    cumulative, best = Fraction(0), None
    for v in range(positive[-1]):
        cumulative += masses[v]
        if masses[v] > 0 and (best is None or abs(cumulative - half) < best[0]):
            best = (abs(cumulative - half), v)
    assert best is not None  # two positive masses: the loop passes the first of them
    return best[1]


def tilted_masses(masses: Sequence[Fraction], tilt: Fraction = TILT) -> list[Fraction]:
    """``masses`` tilted by ``tilt`` in total variation, in the direction a chi-square sees
    worst: split the tokens at the median (:func:`median_split`), and move ``tilt`` of
    the total from the heavier side to the lighter one, proportionally to each token's
    mass. Unchanged with fewer than two positive entries."""
    split = median_split(masses)
    if split is None:
        return list(masses)
    total = sum(masses)
    lower = sum(masses[: split + 1])
    upper = total - lower
    shift = tilt * total
    lower_factor, upper_factor = (
        (1 - shift / lower, 1 + shift / upper) if lower >= upper else (1 + shift / lower, 1 - shift / upper)
    )
    return [mass * (lower_factor if v <= split else upper_factor) for v, mass in enumerate(masses)]


def tilted_correction(masses: Sequence[Fraction], acceptance: Fraction) -> list[Fraction]:
    """The correction law of ``residual-tilt-1pct``: the 32-bit draw over the tilted residual."""
    return mass_draw_law(tilted_masses(masses))


MUTANT_CORRECTIONS = {
    "correction-reuses-accept-draw": reused_draw_correction,
    "residual-tilt-1pct": tilted_correction,
}
