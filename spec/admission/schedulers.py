"""Throughput-scored depth schedulers (R37): global selection, and the prefix scan with an early-stop break.

A scheduler scores each depth ``d`` by the tokens a verification step is
expected to yield times the steps per second when verifying ``d + 1`` tokens::

    S(d) = (1 + sum_{j=1..d} c_1 c_2 ... c_j) * SPS(d + 1)

with ``c_j`` the confidence of position ``j`` and ``sps[n - 1] = SPS(n)``.
This form is reconstructed from the published numbers of DSpark v1 appendix A
(the paper is not available here): ``S(0) = 1 * SPS(1) = 1``,
``S(1) = (1 + 0.8) * 0.5 = 0.9``, ``S(2) = (1 + 0.8 + 0.8 * 0.9) * 0.45 = 1.134``.

* :func:`global_best_depth` drafts the whole block, reads every confidence and
  picks the depth of best score. Since ``c_2`` encodes ``x_1``, whether
  position 1 is verified depends on ``x_1`` itself (R37): it fails R36.
* :func:`prefix_scheduler` scans ``d = 1, 2, ...`` and stops at the first depth
  whose score does not improve on the previous one. The break makes it a
  sequential stopping rule: admitting ``i`` reads ``c_1..c_i``, which encode
  ``x_1..x_(i-1)`` only, so it passes R36. Scored with the confidences of the
  sampled tokens themselves (``t_j = q_j(x_j)``), admitting ``i`` reads ``t_i``,
  which encodes ``x_i``: it fails.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Sequence

from qconform.spec.admission.policy import ADMIT, STOP, AdmissionView, Policy
from qconform.spec.errors import refuse
from qconform.spec.rules import defines


@defines("R37")
def expected_tokens(confidences: Sequence[Fraction]) -> Fraction:
    """``1 + sum_j c_1 ... c_j``: the tokens one verification of these positions is expected to emit."""
    total, reach = Fraction(1), Fraction(1)
    for confidence in confidences:
        reach *= confidence
        total += reach
    return total


@defines("R37")
def throughput_score(confidences: Sequence[Fraction], sps: Sequence[Fraction]) -> Fraction:
    """``S(d) = expected_tokens(c_1..c_d) * SPS(d + 1)`` with ``d = len(confidences)``."""
    depth = len(confidences)
    if depth >= len(sps):
        raise refuse("BAD_POLICY", f"no SPS({depth + 1}) for depth {depth}")
    return expected_tokens(confidences) * Fraction(sps[depth])


@defines("R37")
def global_best_depth(sps: Sequence[Fraction]) -> Callable[[AdmissionView], int]:
    """The DSpark v1 appendix-A selection: read every confidence of the block, take the best depth.

    Depths ``0..gamma`` with ``gamma = len(sps) - 1`` (at most the round's
    maximum depth); ties go to the shallower depth. Run it with
    :func:`~qconform.spec.admission.policy.block_policy`.
    """

    def choose_depth(view: AdmissionView) -> int:
        gamma = min(len(sps) - 1, view.max_depth)
        confidences = [view.confidence(j) for j in range(1, gamma + 1)]
        scores = [throughput_score(confidences[:d], sps) for d in range(gamma + 1)]
        return max(range(gamma + 1), key=scores.__getitem__)

    choose_depth.__qualname__ = "global_best_depth"
    return choose_depth


@defines("R36", "R37")
def prefix_scheduler(sps: Sequence[Fraction], sampled_token_confidence: bool = False) -> Policy:
    """The prefix scan with its early-stop break, as the sequential policy it is.

    At step ``i`` (``i < len(sps)``) it admits iff ``S(i) > S(i - 1)``; every
    earlier step having admitted, that is the scan reaching depth ``i`` without
    breaking. Scores use the position confidences ``c_j``, or with
    ``sampled_token_confidence`` the sampled tokens' ``t_j = q_j(x_j)``.
    """

    def policy(view: AdmissionView) -> str:
        if view.step >= len(sps):
            return STOP
        read = view.token_confidence if sampled_token_confidence else view.confidence
        confidences = [read(j) for j in range(1, view.step + 1)]
        improves = throughput_score(confidences, sps) > throughput_score(confidences[:-1], sps)
        return ADMIT if improves else STOP

    policy.__qualname__ = "prefix_scheduler(sampled)" if sampled_token_confidence else "prefix_scheduler"
    return policy
