"""dyadic24 q values on the wire: the sender's FP32 encoding of the counts (R03, R09).

q(v) = c_v / M with M = 2^24 and integer counts 0 <= c_v <= M. Every such value
is exactly an FP32 number (at most 24 significant bits, exponent >= -24), so
the sender transmits it as little-endian FP32 without rounding, a zero count as
``+0.0`` (all-zero bytes). This module is that sender rule.

The receiver's side (recover ``c_v = q(v) * M``, refuse a non-finite, negative
(``-0.0`` included), non-dyadic value or a total other than M) is defined once,
in :mod:`qconform.spec.wire.checks` (``q_value_class``, ``f32_count`` and the
REPLY check table; docs/wire-v2.md, "q validation"), and the counts of a row are
validated once, by :func:`qconform.spec.qrow.check_counts`. There is no
receiver-side renormalization (R03); a zero count is exactly zero probability
(R04).
"""

from __future__ import annotations

from typing import Sequence

from qconform.spec.constants import M_BITS
from qconform.spec.floats import round_ratio_f32
from qconform.spec.qrow import check_counts
from qconform.spec.rules import defines


@defines("R03", "R09")
def q_values_f32_bits(counts: Sequence[int]) -> list[int]:
    """FP32 bit patterns of ``q(v) = c_v / M`` (always exact), for counts summing to M.

    Refuses counts that are not a dyadic24 row (:func:`~qconform.spec.qrow.check_counts`:
    NOT_DYADIC24, WRONG_TOTAL_MASS).
    """
    check_counts(counts)
    return [round_ratio_f32(False, c, 1, -M_BITS) for c in counts]
