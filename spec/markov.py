"""The Markov bias of the sequential draft head (R01, R05).

The draft row at position i is conditioned on the token sampled at position
i - 1 (R01): a low-rank bilinear bias, as in DSpark's sequential head, adds
``bias_v = sum_j left[x_{i-1}][j] * right[j][v]`` to the base logits. The spec
fixes the FP32 evaluation order so that the bias, and hence the weights, are
bit-exact: products and sums are each rounded once to FP32, summed over the
rank index j in increasing order, starting from +0.0. A product and the sum
after it are two roundings: contracting them into one fused multiply-add, or
flushing subnormals to zero, gives other bits and is non-conforming
(docs/vector-format.md, *FP32 evaluation*).
"""

from __future__ import annotations

from typing import Sequence

from qconform.spec.errors import refuse
from qconform.spec.floats import f32_add, f32_mul
from qconform.spec.rules import defines


def check_factors(prev_token: int, left_bits: Sequence[Sequence[int]], right_bits: Sequence[Sequence[int]]) -> int:
    """Refuse factors that are not V x r and r x V, or a previous token outside 0..V-1; return V."""
    vocab = len(left_bits)
    rank = len(right_bits)
    if any(len(row) != rank for row in left_bits):
        raise refuse("BAD_SHAPE", f"left factor rows must have rank {rank} entries")
    if any(len(row) != vocab for row in right_bits):
        raise refuse("BAD_SHAPE", f"right factor rows must have {vocab} entries")
    if not 0 <= prev_token < vocab:
        raise refuse("TOKEN_OUT_OF_RANGE", f"previous token {prev_token} not in 0..{vocab - 1}")
    return vocab


@defines("R01", "R05")
def markov_bias_f32(
    prev_token: int,
    left_bits: Sequence[Sequence[int]],
    right_bits: Sequence[Sequence[int]],
) -> list[int]:
    """FP32 bias row conditioned on the previous token ``x_{i-1}`` (R01).

    ``left_bits`` is V x r, ``right_bits`` is r x V (FP32 bit patterns). For each
    token v: ``acc = +0.0``; for j = 0..r-1 in order,
    ``acc = f32(acc + f32(left[prev][j] * right[j][v]))``; ``bias_v = acc``.
    """
    vocab = check_factors(prev_token, left_bits, right_bits)
    row = left_bits[prev_token]
    bias = [0] * vocab
    for j, coefficient in enumerate(row):
        right = right_bits[j]
        for v in range(vocab):
            bias[v] = f32_add(bias[v], f32_mul(coefficient, right[v]))
    return bias
