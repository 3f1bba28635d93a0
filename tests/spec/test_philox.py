"""Philox4x32-10 (R22): Random123's known answers, and the round structure checked by inversion."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.philox import KNOWN_ANSWERS, PHILOX_ROUNDS, philox4x32

pytestmark = pytest.mark.rules("R22")

WORD = st.integers(0, 2**32 - 1)

#: Random123 tests/kat_vectors, lines "philox4x32 10 <ctr x4> <key x2> <out x4>", copied verbatim.
KAT_LINES = """
philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000 6627e8d5 e169c58d bc57ac4c 9b00dbd8
philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff 408f276d 41c83b0e a20bc7c6 6d5451fd
philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0 d16cfe09 94fdcceb 5001e420 24126ea1
"""


def kat_lines() -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    lines = []
    for line in KAT_LINES.strip().splitlines():
        words = [int(w, 16) for w in line.split()[2:]]
        lines.append((tuple(words[:4]), tuple(words[4:6]), tuple(words[6:])))
    return lines


@pytest.mark.parametrize("counter, key, output", kat_lines())
def test_random123_known_answers(counter, key, output):
    assert philox4x32(counter, key) == output  # 10 rounds: the ABI's, not a parameter


def test_known_answers_table_is_the_random123_file():
    assert list(KNOWN_ANSWERS) == kat_lines()


def test_triton_randint_seed0_offset0():
    # tl.randint(seed=0, offset=0) is word 0 of the all-zero block (docs/rng-abi.md, ANCHORS).
    assert philox4x32((0, 0, 0, 0), (0, 0))[0] == 0x6627E8D5


# An independent inverse: Philox rounds are bijections on the counter for a fixed key.
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = 2**32 - 1


def invert(output: tuple[int, ...], key: tuple[int, int], rounds: int) -> tuple[int, ...]:
    keys = [((key[0] + r * W0) & MASK, (key[1] + r * W1) & MASK) for r in range(rounds)]
    x = list(output)
    for k0, k1 in reversed(keys):
        c0 = (x[3] * pow(M0, -1, 2**32)) & MASK
        c2 = (x[1] * pow(M1, -1, 2**32)) & MASK
        hi0 = (M0 * c0) >> 32
        hi1 = (M1 * c2) >> 32
        x = [c0, x[0] ^ hi1 ^ k0, c2, x[2] ^ hi0 ^ k1]
    return tuple(x)


@settings(max_examples=60, deadline=None)
@given(counter=st.tuples(WORD, WORD, WORD, WORD), key=st.tuples(WORD, WORD))
def test_ten_rounds_invert_to_the_counter(counter, key):
    assert invert(philox4x32(counter, key), key, PHILOX_ROUNDS) == counter


def test_round_count_is_the_abi_s():
    # one round fewer or more is a different generator: the inverse of 9 or 11 rounds misses
    counter, key = (1, 2, 3, 4), (5, 6)
    assert PHILOX_ROUNDS == 10
    assert invert(philox4x32(counter, key), key, 9) != counter
    assert invert(philox4x32(counter, key), key, 11) != counter
