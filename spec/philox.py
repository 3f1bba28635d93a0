"""Philox4x32, exactly as in Random123 (R22).

The counter-based generator of the RNG ABI. ``philox4x32(ctr, key)`` is
Random123's ``philox4x32_R(10, ctr, key)``, which Triton's ``tl.philox`` and
cuRAND's ``Philox4_32_10`` also compute. Integers only; every word is taken
modulo 2^32 exactly as the C code's ``uint32_t`` arithmetic does.

The number of rounds is not a parameter: the ABI is Philox4x32-**10**
(docs/rng-abi.md), and a round count is no input of any vector. The words are
taken as given: every caller hands 32-bit words, checked where they are made
(``rng_abi.DrawKey`` refuses a field out of range with BAD_RNG_FIELD; the
known-answer inputs are 8-digit hexadecimal words).
"""

from __future__ import annotations

from qconform.spec.rules import defines

#: Random123 multipliers of the two 32x32 -> 64 products of a round.
PHILOX_M4x32_0: int = 0xD2511F53
PHILOX_M4x32_1: int = 0xCD9E8D57

#: Random123 Weyl constants added to the key between rounds.
PHILOX_W32_0: int = 0x9E3779B9
PHILOX_W32_1: int = 0xBB67AE85

#: The ABI's number of rounds (Philox4x32-10).
PHILOX_ROUNDS: int = 10

WORD_MASK: int = 0xFFFFFFFF

Words4 = tuple[int, int, int, int]
Words2 = tuple[int, int]

#: Random123 ``tests/kat_vectors`` lines for ``philox4x32 10``: (counter, key, output).
KNOWN_ANSWERS: tuple[tuple[Words4, Words2, Words4], ...] = (
    (
        (0x00000000, 0x00000000, 0x00000000, 0x00000000),
        (0x00000000, 0x00000000),
        (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
    ),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
)


@defines("R22")
def mulhilo32(a: int, b: int) -> Words2:
    """The high and low 32-bit halves of the 64-bit product ``a * b``."""
    product = a * b
    return product >> 32, product & WORD_MASK


@defines("R22")
def philox_round(ctr: Words4, key: Words2) -> Words4:
    """One Philox4x32 round (Random123 ``_philox4x32round``)."""
    hi0, lo0 = mulhilo32(PHILOX_M4x32_0, ctr[0])
    hi1, lo1 = mulhilo32(PHILOX_M4x32_1, ctr[2])
    return (hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0)


@defines("R22")
def bump_key(key: Words2) -> Words2:
    """Add the Weyl constants to the key (Random123 ``_philox4x32bumpkey``)."""
    return ((key[0] + PHILOX_W32_0) & WORD_MASK, (key[1] + PHILOX_W32_1) & WORD_MASK)


@defines("R22")
def philox4x32(counter: Words4, key: Words2) -> Words4:
    """Philox4x32-10 of ``counter`` under ``key`` (Random123 ``philox4x32_R(10, ctr, key)``).

    The first round uses the key as given; the key is bumped by the Weyl
    constants before each later round.
    """
    ctr = counter
    round_key = key
    for index in range(PHILOX_ROUNDS):
        if index > 0:
            round_key = bump_key(round_key)
        ctr = philox_round(ctr, round_key)
    return ctr
