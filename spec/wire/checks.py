"""The order of each message type's own checks, as data (R03, R07, R12, R14-R20, R27).

One table per message type lists its rules in the order they are checked; when
two rules of one frame fail at once, the **earlier row** is the frame's reason.
docs/wire-v2.md ("Check order") prints the same tables and a test parses them
and compares, row for row: the words of each failing condition and its code.
The decoder (``codec``) runs the rows of stage :data:`FIXED` (decoding step 7:
a REPLY's representation and entry count, before its tail is read) and the
stateless validation (``validation``) the rows of stage :data:`CONTENT`
(step 8). The v1 greedy frame has a table of its own (R12).

Why this order: within a message, a rule about the frame's shape under the
negotiated HELLO (session, slot, depth, support, sizes) comes before a rule
about a value (temperature, token, q); for a q row, the checksum first (an
intact row before its contents are judged), then the IDs, then the value
classes over the whole row, then the sums that need every value. A new rule
(a new message, a new field) is a new row here and in the document.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

from qconform.spec.constants import M_BITS, M
from qconform.spec.floats import Special, unpack_f32
from qconform.spec.rules import defines
from qconform.spec.wire import layout
from qconform.spec.wire.checksum import crc32c
from qconform.spec.wire.messages import Hello, Reply, reply_tail

#: Decoding step 7 (fixed fields read, tail not yet read) and step 8 (stateless validation).
FIXED, CONTENT = "fixed", "content"

#: What a table's rows look at: :class:`Subject` for a v2 message, :class:`V1Subject` for a v1 frame.
S = TypeVar("S")

SIGN_BIT: int = 0x80000000
#: Bytes of one sparse entry (int32 ID + FP32 q) and of one dense entry (FP32 q).
SPARSE_ENTRY_BYTES: int = layout.ID_BYTES + layout.Q_BYTES
DENSE_ENTRY_BYTES: int = layout.Q_BYTES


@dataclass(frozen=True)
class Check(Generic[S]):
    """One row of a check table: the reason ``code`` when ``fails`` holds; ``when`` is the document's wording."""

    code: str
    when: str
    fails: Callable[[S], bool]
    stage: str = CONTENT


@defines("R03", "R19")
def q_value_class(bits: int) -> str | None:
    """The rejection class of one FP32 q value, or None when it is ``c / 2^24`` for an integer ``c >= 0``.

    A set sign bit is NEGATIVE_VALUE, ``-0.0`` included: the one encoding of a
    zero count is ``+0.0``, all-zero bytes (docs/wire-v2.md, "q validation").
    """
    parts = unpack_f32(bits)
    if isinstance(parts, Special):
        return "NON_FINITE_VALUE"
    if bits & SIGN_BIT:
        return "NEGATIVE_VALUE"
    _, significand, exponent = parts
    shift = exponent + M_BITS
    if significand and shift < 0 and significand % (1 << -shift):
        return "NON_DYADIC_VALUE"
    return None


@defines("R03")
def f32_count(bits: int) -> int:
    """``q * 2^24`` of a value whose :func:`q_value_class` is None (an exact integer)."""
    parts = unpack_f32(bits)
    assert not isinstance(parts, Special)
    _, significand, exponent = parts
    shift = exponent + M_BITS
    return significand << shift if shift >= 0 else significand >> -shift


@dataclass(frozen=True)
class Subject:
    """What the rows of a message table look at: the decoded message, the negotiated HELLO, the payload length.

    ``message`` is typed ``Any``: each table's rows read the fields of their own message
    type (a COMMIT row reads ``accepted``), which a union of every message cannot express.
    """

    message: Any
    params: Hello
    payload_length: int

    @cached_property
    def sparse(self) -> bool:
        return isinstance(self.message, Reply) and self.message.representation == layout.REPR_SPARSE

    @cached_property
    def dense(self) -> bool:
        return isinstance(self.message, Reply) and self.message.representation == layout.REPR_DENSE

    @cached_property
    def row_values(self) -> tuple[int, ...]:
        """A REPLY's q values over the vocabulary: every sparse value, the dense values below ``vocab``."""
        assert isinstance(self.message, Reply)
        return self.message.values if self.sparse else self.message.values[: self.params.vocab]

    @cached_property
    def value_classes(self) -> frozenset[str]:
        """The rejection classes present anywhere in the row (each bit pattern judged once)."""
        return frozenset(filter(None, map(q_value_class, set(self.row_values))))

    @cached_property
    def counts(self) -> tuple[int, ...]:
        """``c_v = q(v) * 2^24`` of every row value (only once no value class failed)."""
        distinct = {bits: f32_count(bits) for bits in set(self.row_values)}
        return tuple(distinct[bits] for bits in self.row_values)

    def count_at(self, token: int) -> int:
        """The count of ``token`` (zero outside a sparse support)."""
        assert isinstance(self.message, Reply)
        if self.sparse:
            return sum(c for i, c in zip(self.message.ids, self.counts) if i == token)
        return self.counts[token]


@defines("R15", "R18")
def reply_entry_bytes(representation: int) -> int:
    """Bytes of one tail entry of a dense or sparse REPLY."""
    return DENSE_ENTRY_BYTES if representation == layout.REPR_DENSE else SPARSE_ENTRY_BYTES


@defines("R19")
def in_vocab(token: int, params: Hello) -> bool:
    """Whether a token ID lies in [0, vocab)."""
    return 0 <= token < params.vocab


@defines("R18", "R27")
def reply_fits(s: Subject) -> bool:
    """Whether the reply that a STEP's support policy asks for fits ``max_reply_bytes`` (R27 preflight)."""
    policy = s.message.support_policy  # type: ignore[union-attr]
    entries = s.params.dense_stride if policy == 0 else policy
    size = layout.REPLY.size + (DENSE_ENTRY_BYTES if policy == 0 else SPARSE_ENTRY_BYTES) * entries
    return size <= s.params.max_reply_bytes


@defines("R14", "R19")
def temperature_class(bits: int) -> str | None:
    """NON_FINITE_VALUE, NEGATIVE_VALUE (not positive, -0.0 included) or None for a positive finite temperature."""
    parts = unpack_f32(bits)
    if isinstance(parts, Special):
        return "NON_FINITE_VALUE"
    negative, significand, _ = parts
    return "NEGATIVE_VALUE" if negative or significand == 0 else None


ROUTE_CHECKS: tuple[Check[Subject], ...] = (
    Check(
        "SESSION_MISMATCH",
        "`session_id` is not the negotiated session",
        lambda s: s.message.session_id != s.params.session_id,
    ),
    Check("TOO_MANY_SLOTS", "`slot` >= `max_slots`", lambda s: s.message.slot >= s.params.max_slots),  # type: ignore[union-attr]
)

STEP_CHECKS: tuple[Check[Subject], ...] = (
    *ROUTE_CHECKS,
    Check("DEPTH_MISMATCH", "`depth` is not the negotiated depth", lambda s: s.message.depth != s.params.depth),
    Check(
        "SUPPORT_ABOVE_MAX",
        "`support_policy` > `max_support`",
        lambda s: s.message.support_policy > s.params.max_support,
    ),
    Check(
        "UNEXPECTED_SIZE",
        "the reply `support_policy` asks for is larger than `max_reply_bytes`",
        lambda s: not reply_fits(s),
    ),
    Check(
        "NON_FINITE_VALUE",
        "`temperature` is NaN or infinite",
        lambda s: temperature_class(s.message.temperature) == "NON_FINITE_VALUE",
    ),
    Check(
        "NEGATIVE_VALUE",
        "`temperature` is not positive (-0.0 included)",
        lambda s: temperature_class(s.message.temperature) == "NEGATIVE_VALUE",
    ),
)

REPLY_CHECKS: tuple[Check[Subject], ...] = (
    Check(
        "MISSING_Q",
        "`representation` is 0 or `entry_count` is 0",
        lambda s: s.message.representation == layout.REPR_NONE or s.message.entry_count == 0,
        FIXED,
    ),
    Check(
        "UNEXPECTED_SIZE",
        "dense: `entry_count` is not `dense_stride`",
        lambda s: s.dense and s.message.entry_count != s.params.dense_stride,
        FIXED,
    ),
    Check(
        "SUPPORT_ABOVE_MAX",
        "sparse: `entry_count` > `max_support`",
        lambda s: s.sparse and s.message.entry_count > s.params.max_support,
        FIXED,
    ),
    Check(
        "UNKNOWN_REPRESENTATION",
        "`representation` is above 2",
        lambda s: s.message.representation > layout.REPR_SPARSE,
        FIXED,
    ),
    Check(
        "LENGTH_MISMATCH",
        "the payload length is not 36 + `entry_count` entries (4 bytes dense, 8 sparse)",
        lambda s: (
            s.payload_length != layout.REPLY.size + reply_entry_bytes(s.message.representation) * s.message.entry_count
        ),
        FIXED,
    ),
    *ROUTE_CHECKS,
    Check(
        "Q_CHECKSUM_MISMATCH",
        "`q_checksum` is not the CRC-32C of the tail bytes",
        lambda s: crc32c(reply_tail(s.message)) != s.message.q_checksum,
    ),
    Check("TOKEN_OUT_OF_RANGE", "`token` is outside [0, `vocab`)", lambda s: not in_vocab(s.message.token, s.params)),
    Check(
        "SPARSE_ID_OUT_OF_RANGE",
        "sparse: an ID is outside [0, `vocab`)",
        lambda s: s.sparse and not all(in_vocab(i, s.params) for i in s.message.ids),
    ),
    Check(
        "DUPLICATE_SPARSE_ID",
        "sparse: an ID is listed twice",
        lambda s: s.sparse and len(set(s.message.ids)) != len(s.message.ids),
    ),
    Check(
        "UNSORTED_SUPPORT",
        "sparse: an ID is below the one before it",
        lambda s: s.sparse and any(b < a for a, b in zip(s.message.ids, s.message.ids[1:])),
    ),
    Check(
        "NONZERO_DENSE_PADDING",
        "dense: an entry at index >= `vocab` is not all-zero bytes",
        lambda s: s.dense and any(s.message.values[s.params.vocab :]),
    ),
    Check("NON_FINITE_VALUE", "a q value is NaN or infinite", lambda s: "NON_FINITE_VALUE" in s.value_classes),
    Check(
        "NEGATIVE_VALUE",
        "a q value has its sign bit set (-0.0 included)",
        lambda s: "NEGATIVE_VALUE" in s.value_classes,
    ),
    Check(
        "NON_DYADIC_VALUE", "a q value times 2^24 is not an integer", lambda s: "NON_DYADIC_VALUE" in s.value_classes
    ),
    Check("NONCANONICAL_SUPPORT", "sparse: a q value is +0.0", lambda s: s.sparse and 0 in s.message.values),
    Check("WRONG_TOTAL_MASS", "the counts q times 2^24 do not sum to 2^24", lambda s: sum(s.counts) != M),
    Check("ZERO_Q_AT_TOKEN", "`token` has count 0", lambda s: s.count_at(s.message.token) == 0),
)

COMPLETION_CHECKS: tuple[Check[Subject], ...] = (
    *ROUTE_CHECKS,
    Check("DEPTH_MISMATCH", "`row_count` is not the negotiated depth", lambda s: s.message.row_count != s.params.depth),
    Check("UNKNOWN_STATUS", "`status` is above 1 (FAILED)", lambda s: s.message.status > layout.STATUS_FAILED),
)


def token_or_none(token: int, params: Hello) -> bool:
    """Whether a COMMIT or RESET token is -1 (none: an early end, an empty prefix) or in [0, vocab)."""
    return token == layout.NO_TOKEN or in_vocab(token, params)


COMMIT_CHECKS: tuple[Check[Subject], ...] = (
    *ROUTE_CHECKS,
    Check("POSITION_MISMATCH", "`accepted` > the negotiated depth", lambda s: s.message.accepted > s.params.depth),
    Check(
        "TOKEN_OUT_OF_RANGE",
        "`token` is neither -1 nor in [0, `vocab`)",
        lambda s: not token_or_none(s.message.token, s.params),
    ),
)

RESET_CHECKS: tuple[Check[Subject], ...] = (
    *ROUTE_CHECKS,
    Check(
        "TOKEN_OUT_OF_RANGE",
        "`token` is neither -1 nor in [0, `vocab`)",
        lambda s: not token_or_none(s.message.token, s.params),
    ),
)

#: A HELLO_ANSWER names no slot: its one rule is its status.
HELLO_ANSWER_CHECKS: tuple[Check[Subject], ...] = (
    Check("UNKNOWN_STATUS", "`status` is above 1 (REFUSED)", lambda s: s.message.status > layout.HELLO_REFUSED),
)

#: message type code -> its rows in check order (HELLO's are ``negotiation.IDENTITY_FIELDS`` and ``BOUND_FIELDS``).
MESSAGE_CHECKS: dict[int, tuple[Check[Subject], ...]] = {
    layout.STEP.code: STEP_CHECKS,
    layout.REPLY.code: REPLY_CHECKS,
    layout.COMPLETION.code: COMPLETION_CHECKS,
    layout.COMMIT.code: COMMIT_CHECKS,
    layout.RESET.code: RESET_CHECKS,
    layout.CANCEL.code: ROUTE_CHECKS,
    layout.HELLO_ANSWER.code: HELLO_ANSWER_CHECKS,
}


@dataclass(frozen=True)
class V1Subject:
    """A frame whose magic is the v1 magic ``QGRD``, as bytes."""

    data: bytes | memoryview

    @cached_property
    def header(self) -> tuple[bytes, int, int, int]:
        """(magic, version, message type, payload length): read once 12 bytes are present."""
        return struct.unpack_from("<4sHHI", self.data)

    @property
    def end(self) -> int:
        return layout.V1_HEADER_SIZE + self.header[3]

    @cached_property
    def token_count(self) -> int:
        return struct.unpack_from("<I", self.data, layout.V1_HEADER_SIZE)[0]

    @cached_property
    def tokens(self) -> tuple[int, ...]:
        return struct.unpack_from(f"<{self.token_count}i", self.data, layout.V1_HEADER_SIZE + layout.V1_GREEDY.size)


V1_PAYLOAD_MAX: int = layout.V1_GREEDY.size + 4 * layout.V1_MAX_TOKENS

V1_CHECKS: tuple[Check[V1Subject], ...] = (
    Check("TRUNCATED", "fewer than 12 bytes", lambda s: len(s.data) < layout.V1_HEADER_SIZE, FIXED),
    Check("UNKNOWN_VERSION", "`version` is not 1", lambda s: s.header[1] != layout.V1_VERSION, FIXED),
    Check("UNKNOWN_MESSAGE_TYPE", "`message_type` is not 1", lambda s: s.header[2] != layout.V1_GREEDY.code, FIXED),
    Check(
        "UNEXPECTED_SIZE",
        "`payload_length` is below 4 or above 4 + 4 * 64",
        lambda s: not layout.V1_GREEDY.size <= s.header[3] <= V1_PAYLOAD_MAX,
        FIXED,
    ),
    Check("TRUNCATED", "fewer than 12 + `payload_length` bytes", lambda s: len(s.data) < s.end, FIXED),
    Check("LENGTH_MISMATCH", "more than 12 + `payload_length` bytes", lambda s: len(s.data) > s.end, FIXED),
    Check("UNEXPECTED_SIZE", "`token_count` > 64", lambda s: s.token_count > layout.V1_MAX_TOKENS),
    Check(
        "LENGTH_MISMATCH",
        "`payload_length` is not 4 + 4 * `token_count`",
        lambda s: s.header[3] != layout.V1_GREEDY.size + 4 * s.token_count,
    ),
    Check("TOKEN_OUT_OF_RANGE", "a token is negative", lambda s: any(t < 0 for t in s.tokens)),
)


@defines("R18", "R19")
def first_failure(checks: Sequence[Check[S]], subject: S, stage: str | None = None) -> Check[S] | None:
    """The first row of ``checks`` (of ``stage`` only, when given) that fails on ``subject``, or None."""
    for check in checks:
        if (stage is None or check.stage == stage) and check.fails(subject):
            return check
    return None
