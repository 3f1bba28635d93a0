"""Sizes and the critical path (R26, R27): exact shape arithmetic of the design's table.

All sizes are exact byte counts of the q payload only, excluding headers,
alignment, checksums, padding and pool bookkeeping. The serialization times are
the ideal lower bound ``bits / link rate`` at a nominal rate: bounds, not
measured latency. Everything is an integer or a Fraction; rounding happens only
in :func:`rounded_decimal`, for display.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from qconform.spec.constants import DEPTH, MAX_REQUESTS, VOCAB
from qconform.spec.errors import SpecError
from qconform.spec.rules import defines

#: Bytes of one FP32 q value and of one int32 global token ID (R03, R15).
FP32_BYTES: int = 4
INT32_BYTES: int = 4

#: Sparse support sizes of the design's table (R29: k=32 the candidate, 16/64 screens).
TABLE_SPARSE_KS: tuple[int, ...] = (16, 32, 64, 256)

#: Vocabulary shards of the TP2 row, and in-flight dense batch slots per endpoint.
TABLE_SHARDS: int = 2
TABLE_SLOTS: int = 2

#: The nominal link rate of the design, in bits per second (40 Gb/s).
GIGABIT: int = 10**9
TABLE_LINK_BITS_PER_SECOND: int = 40 * GIGABIT

#: MB is 10^6 bytes (the design's table); MiB is 2^20 bytes.
MB: int = 10**6
MIB: int = 1 << 20


@defines("R26")
def dense_request_bytes(vocab: int, depth: int) -> int:
    """Bytes of one request's dense q: one FP32 value per token, per draft position."""
    return FP32_BYTES * vocab * depth


@defines("R26")
def sparse_request_bytes(k: int, depth: int) -> int:
    """Bytes of one request's sparse q: an int32 global ID and an FP32 q per entry, k entries per position."""
    return (INT32_BYTES + FP32_BYTES) * k * depth


@defines("R26")
def batch_bytes(request_bytes: int, requests: int) -> int:
    """Bytes of a batch: every request carries its own rows."""
    return request_bytes * requests


@defines("R26", "R31")
def shard_tokens(vocab: int, shards: int) -> int:
    """Tokens owned by the largest of ``shards`` contiguous vocabulary shards (ceil(V / shards))."""
    return -(-vocab // shards)


@defines("R26", "R31")
def dense_shard_request_bytes(vocab: int, shards: int, depth: int) -> int:
    """Bytes one rank sends or receives for one request under dense vocabulary sharding."""
    return dense_request_bytes(shard_tokens(vocab, shards), depth)


@defines("R26")
def serialization_seconds(n_bytes: int, link_bits_per_second: int | Fraction) -> Fraction:
    """Ideal serialization time of ``n_bytes`` on one link: bits divided by the link rate."""
    return Fraction(8 * n_bytes) / Fraction(link_bits_per_second)


@defines("R26")
def in_flight_bytes(slots: int, dense_batch_bytes: int) -> int:
    """Bytes of ``slots`` in-flight dense batch slots: one full copy each, per endpoint."""
    return slots * dense_batch_bytes


@defines("R26")
def rounded_decimal(value: Fraction, places: int) -> str:
    """``value`` as a decimal string with ``places`` digits, rounded half away from zero."""
    scale = 10**places
    magnitude = (abs(value) * scale * 2 + 1) // 2
    sign = "-" if value < 0 and magnitude else ""
    whole, frac = divmod(magnitude, scale)
    return f"{sign}{whole}.{frac:0{places}d}" if places else f"{sign}{whole}"


@defines("R27")
def check_batch_shape(requests: int, depth: int) -> None:
    """Refuse a batch above four requests or a depth other than the fixed five."""
    if not 1 <= requests <= MAX_REQUESTS:
        raise SpecError("BAD_SHAPE", f"a batch holds 1..{MAX_REQUESTS} requests, not {requests}")
    if depth != DEPTH:
        raise SpecError("BAD_SHAPE", f"the proposal depth is fixed at {DEPTH}, not {depth}")


@defines("R27")
def preflight_slot(slot_bytes: int, reply_bytes: int) -> None:
    """Refuse, before any transfer, a reply that does not fit the slot it would land in."""
    if reply_bytes > slot_bytes:
        raise SpecError("BAD_SHAPE", f"a {reply_bytes}-byte reply does not fit a {slot_bytes}-byte slot")


@dataclass(frozen=True)
class SizeParams:
    """The shape the table is computed for; the defaults reproduce the design's table."""

    vocab: int = VOCAB
    depth: int = DEPTH
    requests: int = MAX_REQUESTS
    sparse_ks: tuple[int, ...] = TABLE_SPARSE_KS
    shards: int = TABLE_SHARDS
    slots: int = TABLE_SLOTS
    link_bits_per_second: Fraction = Fraction(TABLE_LINK_BITS_PER_SECOND)

    @classmethod
    def with_defaults(
        cls, vocab=None, depth=None, requests=None, ks=(), shards=None, slots=None, link_gbps=None
    ) -> "SizeParams":
        """Parameters from optional overrides (None or empty keeps the design's value)."""
        base = cls()
        return cls(
            vocab=base.vocab if vocab is None else vocab,
            depth=base.depth if depth is None else depth,
            requests=base.requests if requests is None else requests,
            sparse_ks=tuple(ks) or base.sparse_ks,
            shards=base.shards if shards is None else shards,
            slots=base.slots if slots is None else slots,
            link_bits_per_second=base.link_bits_per_second if link_gbps is None else Fraction(link_gbps) * GIGABIT,
        )


@dataclass(frozen=True)
class SizeRow:
    """One layout: exact bytes per request and per batch, and their ideal serialization."""

    layout: str
    request_bytes: int
    batch_bytes: int
    request_seconds: Fraction
    batch_seconds: Fraction
    per_rank: bool = False


@dataclass(frozen=True)
class SizeTable:
    params: SizeParams
    rows: list[SizeRow]
    #: bytes of the in-flight dense batch slots, per full copy on each endpoint
    in_flight_bytes: int
    #: why the shape is refused by R27, or "" when it is the design's fixed shape
    shape_refusal: str


def _row(layout: str, request: int, params: SizeParams, per_rank: bool = False) -> SizeRow:
    batch = batch_bytes(request, params.requests)
    rate = params.link_bits_per_second
    return SizeRow(
        layout, request, batch, serialization_seconds(request, rate), serialization_seconds(batch, rate), per_rank
    )


def size_table(params: SizeParams) -> SizeTable:
    """The design's size table for ``params`` (R26), with the R27 shape verdict."""
    dense = dense_request_bytes(params.vocab, params.depth)
    rows = [_row(f"Dense f32, {params.vocab} tokens", dense, params)]
    for k in params.sparse_ks:
        rows.append(_row(f"Sparse k={k}, i32 ID + f32 q", sparse_request_bytes(k, params.depth), params))
    if params.shards > 1:
        tokens = shard_tokens(params.vocab, params.shards)
        shard = dense_shard_request_bytes(params.vocab, params.shards, params.depth)
        rows.append(_row(f"Dense TP{params.shards} shard, {tokens} tokens", shard, params, per_rank=True))
    try:
        check_batch_shape(params.requests, params.depth)
        refusal = ""
    except SpecError as exc:
        refusal = str(exc)
    return SizeTable(params, rows, in_flight_bytes(params.slots, batch_bytes(dense, params.requests)), refusal)
