"""The names and one-line bugs of the statistical-mode mutants (docs/stat-mode.md).

Kept apart from their exact laws (:mod:`qconform.harness.stat.mutant_laws`, which
imports the spec) so that the candidate that serves them,
``adapters/torch_native.py``, and the adapter catalog import neither the spec
nor torch.
"""

from __future__ import annotations

from fractions import Fraction

#: the residual tilt of ``residual-tilt-1pct``: this share of the correction law moves
TILT = Fraction(1, 100)

#: name -> the bug, in one line
STAT_MUTANTS: dict[str, str] = {
    "correction-reuses-accept-draw": (
        "the correction reuses the rejected draft's acceptance uniform (no fresh draw), so it is confined "
        "to the top of the residual's CDF (vLLM #47386, without injected draws)"
    ),
    "residual-tilt-1pct": (
        "the correction law is tilted by 1% total variation: 1% of the residual mass moves, proportionally, "
        "from the heavier to the lighter side of the residual's median split (the tilt a chi-square sees worst)"
    ),
}
