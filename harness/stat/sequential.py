"""The group-sequential option of statistical mode: stop a case once the evidence is decisive.

A case is tested at a few *looks*, after ``N/2^(L-1), ..., N/2, N`` samples
(``L`` looks, ``N`` the most samples a case may take). The per-case level
``alpha_c`` (``alpha`` over the number of tested cases) and the miss probability
``beta`` (one minus the power) are *spent* over the looks with the quadratic
spending function ``f(t) = t^2`` of the information time ``t = n / N`` (Kim and
DeMets' power family, close to O'Brien-Fleming): look ``k`` receives
``w_k = t_k^2 - t_{k-1}^2`` of each.

* **Reject** at look ``k`` when the chi-square p-value ``p_k <= alpha_c w_k``.
* **Accept early** (futility) at a look before the last when the statistic is
  implausible under every alternative at total variation ``delta`` or more:
  ``P(chi2'(df_k, 4 n_k delta^2) <= X_k) <= beta w_k``. Since any such alternative
  has noncentrality ``>= 4 n_k delta^2`` and the noncentral CDF decreases in the
  noncentrality, this bounds its probability of an early acceptance at look ``k``.
* ``delta`` is the TV the whole procedure detects: the detectable TV at ``N``
  samples at level ``alpha_c w_L`` with power ``1 - beta w_L`` (the last look's shares).

Guarantees, by the union bound over looks (no correlation between looks is
assumed, so both are conservative), to the accuracy of the chi-square
approximation at each look: under the exact law a case is rejected with
probability at most ``sum_k alpha_c w_k = alpha_c``; a case whose law is off by
``delta`` or more (between merged-bin laws) is missed with probability at most
``sum_k beta w_k = beta``.

Across cases, each case's sequential p-value ``p* = min_k p_k / w_k`` over the
looks it reached is valid (``P(p* <= a) <= sum_k a w_k = a``), and Holm's procedure
over the ``p*`` gives the verdicts, as in the fixed-sample test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qconform.harness.stat.chisquare import detectable_tv, ncx2_sf

#: default number of looks of a sequential run
LOOKS = 4


@dataclass(frozen=True)
class Look:
    """One look: the cumulative samples of a case, and the shares of the per-case alpha and
    beta it spends."""

    samples: int
    weight: float


def spending_looks(samples: int, looks: int) -> list[Look]:
    """Looks at ``ceil(N / 2^(L-1-k))`` samples with quadratic spending weights; one look at
    ``N`` with weight 1 when ``looks`` is 1 (the fixed-sample test)."""
    sizes = sorted({max(1, math.ceil(samples / 2 ** (looks - 1 - k))) for k in range(looks)})
    weights, spent = [], 0.0
    for size in sizes:
        cumulative = (size / samples) ** 2
        weights.append(cumulative - spent)
        spent = cumulative
    return [Look(size, weight) for size, weight in zip(sizes, weights)]


def procedure_tv(df: int, samples: int, alpha: float, beta: float, last: Look) -> float:
    """The TV a sequential procedure detects with probability ``1 - beta`` (module docstring)."""
    return detectable_tv(df, samples, alpha * last.weight, 1 - beta * last.weight)


def rejects(p_value: float, alpha: float, look: Look) -> bool:
    return p_value <= alpha * look.weight


def futile(statistic: float, df: int, samples: int, delta: float, beta: float, look: Look) -> bool:
    """Whether the statistic at a look rules out every alternative at TV ``delta`` or more."""
    if df <= 0 or not math.isfinite(delta):
        return False
    return 1 - ncx2_sf(statistic, df, 4 * samples * delta**2) <= beta * look.weight


def sequential_p_value(p_values: list[float], looks: list[Look]) -> float:
    """``min_k p_k / w_k`` over the looks reached, capped at 1."""
    return min([1.0] + [p / look.weight for p, look in zip(p_values, looks)])
