"""The RNG ABI ``philox4x32-10-qconform-v1`` (R22, R23, R24).

docs/rng-abi.md holds the normative table; this module is that table, executed.
Every draw of a round is one Philox4x32-10 block:

* key word 0 / key word 1: the low / high 32 bits of the 64-bit request seed;
* counter word 0: absolute token position of the draw; word 1: round ID;
  word 2: request generation; word 3: ``domain << 24 | draw_counter``.

The three domains are disjoint, so proposal noise can never be reused for
acceptance or correction (R23). The proposal draw is the top 24 bits of output
word 0; acceptance, correction and bonus draws are the whole word 0.
Positions computed from the anchor are taken modulo 2^32; every field handed to
:class:`DrawKey` must already be in range (BAD_RNG_FIELD otherwise).

A request without a seed gets :func:`unseeded_request_seed` of its request ID
(docs/rng-abi.md, *Request seeds*), never a constant default.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import IntEnum

from qconform.spec.constants import U24_BITS, U32_BITS
from qconform.spec.errors import refuse
from qconform.spec.philox import Words2, Words4, philox4x32
from qconform.spec.rules import defines

WORD_LIMIT: int = 1 << 32
SEED_LIMIT: int = 1 << 64
DOMAIN_SHIFT: int = 24
DRAW_COUNTER_LIMIT: int = 1 << DOMAIN_SHIFT
#: Domain tag of the unseeded-request seed derivation (docs/rng-abi.md, *Request seeds*).
UNSEEDED_SEED_TAG: bytes = b"qconform-unseeded-seed-v1\x00"


class Domain(IntEnum):
    """The disjoint draw domains (R22, R23) and their codes in counter word 3."""

    PROPOSAL = 1  # worker leader (R22)
    ACCEPT = 2  # target-side sampler (R23)
    CORRECTION = 3  # target-side sampler: correction and bonus (R23)


def check_field(name: str, value: int, limit: int) -> None:
    """Refuse a key or counter field that is not an integer in [0, limit)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < limit:
        raise refuse("BAD_RNG_FIELD", f"{name}={value!r} is not an integer in [0, {limit})")


@dataclass(frozen=True)
class RngIdentity:
    """What keys every draw of one round of one request (R14, R22, R24).

    ``seed`` is the 64-bit request seed; ``generation`` and ``round`` the
    request generation and round ID; ``anchor`` the absolute position of the
    first draft token.
    """

    seed: int
    generation: int
    round: int
    anchor: int

    def __post_init__(self) -> None:
        check_field("seed", self.seed, SEED_LIMIT)
        check_field("generation", self.generation, WORD_LIMIT)
        check_field("round", self.round, WORD_LIMIT)
        check_field("anchor", self.anchor, WORD_LIMIT)


@dataclass(frozen=True)
class DrawKey:
    """The full key of one draw: Philox key words and counter words (R22, R23)."""

    seed: int
    generation: int
    round: int
    position: int
    domain: Domain
    draw_counter: int = 0

    @defines("R22")
    def key_words(self) -> Words2:
        """(low 32 bits of the seed, high 32 bits of the seed)."""
        check_field("seed", self.seed, SEED_LIMIT)
        return (self.seed & (WORD_LIMIT - 1), self.seed >> 32)

    @defines("R22", "R23")
    def counter_words(self) -> Words4:
        """(position, round, generation, domain << 24 | draw_counter)."""
        check_field("position", self.position, WORD_LIMIT)
        check_field("round", self.round, WORD_LIMIT)
        check_field("generation", self.generation, WORD_LIMIT)
        check_field("draw_counter", self.draw_counter, DRAW_COUNTER_LIMIT)
        if not isinstance(self.domain, Domain):
            raise refuse("BAD_RNG_FIELD", f"domain {self.domain!r} is not a Domain")
        return (
            self.position,
            self.round,
            self.generation,
            (int(self.domain) << DOMAIN_SHIFT) | self.draw_counter,
        )


@defines("R22", "R23")
def key_at(ident: RngIdentity, offset: int, domain: Domain) -> DrawKey:
    """The first draw of ``domain`` at absolute position ``anchor + offset`` (mod 2^32)."""
    return DrawKey(
        seed=ident.seed,
        generation=ident.generation,
        round=ident.round,
        position=(ident.anchor + offset) % WORD_LIMIT,
        domain=domain,
    )


@defines("R22")
def proposal_key(ident: RngIdentity, i: int) -> DrawKey:
    """Key of the proposal draw of draft ``x_i`` (i = 1..K): position ``anchor + i - 1``."""
    check_field("draft index i - 1", i - 1, WORD_LIMIT)
    return key_at(ident, i - 1, Domain.PROPOSAL)


@defines("R23")
def accept_key(ident: RngIdentity, i: int) -> DrawKey:
    """Key of the acceptance test of draft ``x_i`` (i = 1..K): position ``anchor + i - 1``."""
    check_field("draft index i - 1", i - 1, WORD_LIMIT)
    return key_at(ident, i - 1, Domain.ACCEPT)


@defines("R23")
def correction_key(ident: RngIdentity, j: int) -> DrawKey:
    """Key of the correction after ``j`` accepted drafts, or of the bonus (j = K): position ``anchor + j``."""
    check_field("accepted count j", j, WORD_LIMIT)
    return key_at(ident, j, Domain.CORRECTION)


@defines("R22", "R23")
def draw_words(key: DrawKey) -> Words4:
    """The four Philox4x32-10 output words of one draw."""
    return philox4x32(key.counter_words(), key.key_words())


@defines("R08", "R22")
def proposal_draw(key: DrawKey) -> int:
    """The 24-bit proposal draw ``u24``: the top 24 bits of output word 0."""
    return draw_words(key)[0] >> (U32_BITS - U24_BITS)


@defines("R11", "R23")
def uniform32_draw(key: DrawKey) -> int:
    """The 32-bit acceptance / correction / bonus draw ``u32``: output word 0."""
    return draw_words(key)[0]


@defines("R24")
@defines("R24")
def request_seed(seed: int | None, request_id: str | None) -> int:
    """A request's seed: its explicit ``seed``, or :func:`unseeded_request_seed` of its ``request_id``.

    A request carries exactly one of the two; both or neither is BAD_REQUEST_ID (R24): with both
    the key would depend on which one a reader prefers, with neither on a default every unseeded
    request would share (docs/rng-abi.md, *Request seeds*).
    """
    if (seed is None) == (request_id is None):
        raise refuse("BAD_REQUEST_ID", "a request carries exactly one of a seed and a request ID")
    return seed if seed is not None else unseeded_request_seed(request_id)  # type: ignore[arg-type]


def unseeded_request_seed(request_id: str) -> int:
    """The 64-bit seed of a request that carries no seed: the first 8 bytes, read
    little-endian, of ``SHA-256(UNSEEDED_SEED_TAG || UTF-8(request_id))``.

    docs/rng-abi.md, *Request seeds*: distinct live requests have distinct IDs, so
    two unseeded requests of one batch never share a seed (and never share draws);
    the seed is reproducible from the request ID alone. An explicit seed is used
    as given, shared or not.
    """
    if not isinstance(request_id, str):
        raise refuse("BAD_REQUEST_ID", f"request ID {request_id!r} is not a string")
    try:
        encoded = request_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise refuse("BAD_REQUEST_ID", f"request ID is not encodable as UTF-8: {exc.reason}") from None
    digest = hashlib.sha256(UNSEEDED_SEED_TAG + encoded).digest()
    return int.from_bytes(digest[:8], "little")
