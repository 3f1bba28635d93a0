"""Pearson's chi-square goodness of fit against an exact law, its power, and Holm's procedure.

Everything a statistical-mode verdict rests on (docs/stat-mode.md):

* :func:`merge_bins`: the outcomes of an exact law grouped into bins whose expected
  count at ``n`` samples is at least 5 (Cochran's rule); outcomes are pooled in
  ascending order of probability, so only the rarest ones share a bin;
* :func:`pearson`: the statistic ``X^2 = sum (O - n e)^2 / (n e)`` over the bins;
  under the law it is asymptotically chi-square with ``bins - 1`` degrees of freedom;
* :func:`chi2_sf`, :func:`chi2_isf`, :func:`ncx2_sf`: the (noncentral) chi-square
  tail, from the regularized upper incomplete gamma function of mpmath (no SciPy);
* :func:`detectable_tv`: the smallest total-variation deviation (between the
  merged-bin laws) that the test detects with a given power at ``n`` samples;
* :func:`holm`: Holm's step-down adjusted p-values across cases.

Power. Under an alternative law ``e + d`` the statistic is asymptotically
noncentral chi-square with noncentrality ``lambda = n sum d_b^2 / e_b`` (Pitman
alternatives). By Cauchy-Schwarz, ``sum |d_b| <= sqrt(sum d_b^2 / e_b)``, so an
alternative at total variation ``delta = sum |d_b| / 2`` has ``lambda >= 4 n delta^2``,
with equality for a deviation spread in proportion to ``e`` over two halves of
mass 1/2 each. The power is increasing in lambda, so every alternative with
``delta >= sqrt(lambda_star / (4 n))`` is detected with at least the power that
``lambda_star`` gives: that is :func:`detectable_tv`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Mapping, Sequence

import mpmath

from qconform.spec.outcome_law import RoundOutcome

#: Cochran's rule: the least expected count of a bin
MIN_EXPECTED = 5
#: working precision of the tail computations, in decimal digits
DIGITS = 40


@dataclass(frozen=True)
class Bin:
    """Outcomes pooled into one bin, and the bin's exact probability."""

    outcomes: tuple[RoundOutcome, ...]
    probability: Fraction


def merge_bins(law: Mapping[RoundOutcome, Fraction], samples: int, minimum: int = MIN_EXPECTED) -> list[Bin]:
    """The outcomes of positive probability in bins of expected count ``>= minimum`` at
    ``samples`` samples.

    Outcomes that reach ``minimum`` alone keep their own bin. The others, in ascending
    order of probability (ties in outcome order), are pooled greedily until a pool
    reaches ``minimum``; a last pool that falls short joins the previous pool, or,
    if there is none, the least likely single bin. Bins come back in outcome order of
    their first outcome.
    """
    threshold = Fraction(minimum, samples)
    ranked = sorted(((p, o) for o, p in law.items() if p > 0), key=lambda item: (item[0], item[1]))
    single = [Bin((o,), p) for p, o in ranked if p >= threshold]
    pools: list[Bin] = []
    outcomes: list[RoundOutcome] = []
    mass = Fraction(0)
    for p, o in ranked:
        if p >= threshold:
            break
        outcomes.append(o)
        mass += p
        if mass >= threshold:
            pools.append(Bin(tuple(outcomes), mass))
            outcomes, mass = [], Fraction(0)
    if outcomes:
        if pools:
            last = pools.pop()
        elif single:
            last = single.pop(0)
        else:
            last = Bin((), Fraction(0))
        pools.append(Bin(last.outcomes + tuple(outcomes), last.probability + mass))
    return sorted(single + pools, key=lambda b: min(b.outcomes))


def bin_counts(bins: Sequence[Bin], observed: Mapping[RoundOutcome, int]) -> list[int]:
    """The observed count of each bin."""
    return [sum(observed.get(o, 0) for o in b.outcomes) for b in bins]


def pearson(bins: Sequence[Bin], counts: Sequence[int], samples: int) -> float:
    """``X^2 = sum (O_b - n e_b)^2 / (n e_b)``, computed exactly, returned as a float."""
    total = sum((Fraction(o) - samples * b.probability) ** 2 / (samples * b.probability) for b, o in zip(bins, counts))
    return float(total)


def chi2_sf(x: float, df: int) -> float:
    """``P(X > x)`` for ``X`` chi-square with ``df`` degrees of freedom (1 when ``df = 0``)."""
    if df <= 0:
        return 1.0
    with mpmath.workdps(DIGITS):
        return float(mpmath.gammainc(mpmath.mpf(df) / 2, mpmath.mpf(x) / 2, mpmath.inf, regularized=True))


@lru_cache(maxsize=None)
def chi2_isf(alpha: float, df: int) -> float:
    """The ``x`` with ``chi2_sf(x, df) = alpha`` (bisection on the monotone tail)."""
    low, high = 0.0, float(df) + 10.0
    while chi2_sf(high, df) > alpha:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if chi2_sf(middle, df) > alpha:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * high:
            break
    return high


def ncx2_sf(x: float, df: int, noncentrality: float) -> float:
    """``P(X > x)`` for ``X`` noncentral chi-square (``df``, ``noncentrality``), in double
    precision (it serves power statements, never p-values).

    The Poisson mixture ``sum_j Pois(j; lambda/2) Q(df/2 + j, x/2)``, summed over the
    window of ``j`` outside which the Poisson mass is below ``1e-30``; the regularized
    upper gamma ``Q`` is computed once (mpmath), then stepped upward with
    ``Q(a + 1, y) = Q(a, y) + y^a e^-y / Gamma(a + 1)`` (positive terms: stable).
    """
    if noncentrality <= 0:
        return chi2_sf(x, df)
    half, y = noncentrality / 2, x / 2
    spread = 12 * math.sqrt(half) + 40
    first = max(0, int(half - spread))
    a = df / 2 + first
    with mpmath.workdps(DIGITS):
        tail = float(mpmath.gammainc(a, y, mpmath.inf, regularized=True))
    log_y = math.log(y) if y > 0 else -math.inf
    total = 0.0
    for j in range(first, int(half + spread) + 2):
        total += math.exp(j * math.log(half) - half - math.lgamma(j + 1)) * tail
        tail += math.exp(a * log_y - y - math.lgamma(a + 1)) if y > 0 else 0.0
        a += 1
    return min(total, 1.0)


@lru_cache(maxsize=None)
def noncentrality_for_power(df: int, alpha: float, power: float) -> float:
    """The least ``lambda`` at which the level-``alpha`` test has the given power."""
    if df <= 0:
        return math.inf
    return noncentrality_reaching(df, chi2_isf(alpha, df), power)


def noncentrality_reaching(df: int, critical: float, power: float) -> float:
    """The least ``lambda`` with ``P(chi2'(df, lambda) > critical) >= power`` (bisection to a
    relative ``1e-7``)."""
    low, high = 0.0, 1.0
    while ncx2_sf(critical, df, high) < power:
        low, high = high, high * 2
    while high - low > 1e-7 * high:
        middle = (low + high) / 2
        if ncx2_sf(critical, df, middle) < power:
            low = middle
        else:
            high = middle
    return high


def power_at(df: int, alpha: float, noncentrality: float) -> float:
    """The power of the level-``alpha`` test at noncentrality ``lambda``."""
    return ncx2_sf(chi2_isf(alpha, df), df, noncentrality) if df > 0 else 0.0


def detectable_tv(df: int, samples: int, alpha: float, power: float) -> float:
    """The smallest TV deviation (between merged-bin laws) detected with ``power`` at level
    ``alpha`` with ``samples`` samples: ``sqrt(lambda_star / (4 n))`` (module docstring)."""
    return math.sqrt(noncentrality_for_power(df, alpha, power) / (4 * samples))


def noncentrality(bins: Sequence[Bin], alternative: Mapping[RoundOutcome, Fraction], samples: int) -> float:
    """``n sum_b (a_b - e_b)^2 / e_b`` for the alternative law ``a`` over the same bins."""
    total = Fraction(0)
    for b in bins:
        shifted = sum((alternative.get(o, Fraction(0)) for o in b.outcomes), Fraction(0))
        total += (shifted - b.probability) ** 2 / b.probability
    return float(samples * total)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in input order: ``p~_(i) = max_{j <= i}
    min(1, (m - j + 1) p_(j))`` over the ascending order. A hypothesis is rejected at
    family-wise level ``alpha`` exactly when its adjusted p-value is ``<= alpha``."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
