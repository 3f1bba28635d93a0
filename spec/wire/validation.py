"""Stateless validation against the negotiated HELLO (R03, R15, R18-R20, R27).

Two stages. :func:`check_payload_length` runs on the header alone, before any
payload byte is read or copied (R18): the declared length must be one that the
message type admits under the negotiated bounds. :func:`validate_message` runs
on a decoded message: its session and slot, its fixed-depth and support bounds,
and for a REPLY every R19/R20 rejection class of its q row, in this order of
precedence: probability checksum, sampled token range, sparse IDs (range, then
duplicates, then order) or dense padding, q values (non-finite, then negative,
then non-dyadic, each over the whole row), zero sparse entries, total mass,
zero q at the sampled token. The counts are recovered exactly with
``qconform.spec.dyadic24``; there is no renormalization (R03).
"""

from __future__ import annotations

from qconform.spec.constants import M
from qconform.spec.dyadic24 import check_total, count_from_f32_bits
from qconform.spec.errors import SpecError
from qconform.spec.floats import Special, unpack_f32
from qconform.spec.qrow import QRow
from qconform.spec.rules import defines
from qconform.spec.wire import layout
from qconform.spec.wire.checksum import crc32c
from qconform.spec.wire.layout import MessageLayout
from qconform.spec.wire.messages import (
    Cancel,
    Commit,
    Completion,
    Hello,
    HelloAnswer,
    Message,
    Reply,
    Reset,
    Step,
    reply_tail,
)
from qconform.spec.wire.reasons import Route, reject

#: Bytes of one sparse entry (int32 ID + FP32 q) and of one dense entry (FP32 q).
SPARSE_ENTRY_BYTES: int = layout.ID_BYTES + layout.Q_BYTES
DENSE_ENTRY_BYTES: int = layout.Q_BYTES
M_BITS: int = M.bit_length() - 1
F32_INFINITY_EXPONENT: int = 0xFF


@defines("R18", "R27")
def reply_payload_bytes(params: Hello, support_policy: int) -> int:
    """Payload bytes of a REPLY under a STEP's support policy: dense (0) or sparse top-k (k)."""
    if support_policy == 0:
        return layout.REPLY.size + DENSE_ENTRY_BYTES * params.dense_stride
    return layout.REPLY.size + SPARSE_ENTRY_BYTES * support_policy


@defines("R18")
def payload_bounds(message: MessageLayout, params: Hello | None) -> tuple[int, int]:
    """The (least, greatest) payload length a message type admits under the negotiated HELLO.

    Every type but REPLY has a fixed size. A REPLY holds at least its fixed
    fields and at most the larger of a dense row and a full sparse support,
    never above the negotiated ``max_reply_bytes``.
    """
    if message is not layout.REPLY or params is None:
        return message.size, message.size
    largest = max(reply_payload_bytes(params, 0), reply_payload_bytes(params, params.max_support))
    return message.size, min(largest, params.max_reply_bytes)


@defines("R18")
def check_payload_length(message: MessageLayout, payload_length: int, params: Hello | None) -> None:
    """Refuse (UNEXPECTED_SIZE) a declared payload length outside :func:`payload_bounds`."""
    least, greatest = payload_bounds(message, params)
    if not least <= payload_length <= greatest:
        raise reject("UNEXPECTED_SIZE", f"{message.name} payload of {payload_length} bytes, admitted {least}..{greatest}")


@defines("R18", "R19", "R27")
def route_of(message: Message) -> Route | None:
    """The round a message addresses; None for HELLO."""
    if isinstance(message, Hello):
        return None
    return Route(type(message).LAYOUT.code, message.session_id, message.slot, message.generation,
                 getattr(message, "round", None))


@defines("R19", "R27")
def check_session_and_slot(message: Message, params: Hello) -> None:
    """Refuse another session (SESSION_MISMATCH) or a slot beyond the negotiated slots (TOO_MANY_SLOTS)."""
    route = route_of(message)
    if message.session_id != params.session_id:
        raise reject("SESSION_MISMATCH", f"session {message.session_id}, negotiated {params.session_id}", route)
    if message.slot >= params.max_slots:
        raise reject("TOO_MANY_SLOTS", f"slot {message.slot}, negotiated {params.max_slots} slots", route)


@defines("R14", "R19")
def check_temperature(bits: int, route: Route) -> None:
    """Refuse a proposal temperature that is not finite (NON_FINITE_VALUE) or not positive (NEGATIVE_VALUE)."""
    parts = unpack_f32(bits)
    if isinstance(parts, Special):
        raise reject("NON_FINITE_VALUE", f"temperature bits {bits:#010x}", route)
    negative, significand, _ = parts
    if negative or significand == 0:
        raise reject("NEGATIVE_VALUE", f"temperature bits {bits:#010x} is not positive", route)


@defines("R14", "R18", "R27", "R35")
def validate_step(step: Step, params: Hello) -> None:
    """A STEP asks for the negotiated fixed depth, a support within bounds whose reply fits, a positive temperature."""
    route = route_of(step)
    if step.depth != params.depth:
        raise reject("DEPTH_MISMATCH", f"depth {step.depth}, negotiated {params.depth}", route)
    if step.support_policy > params.max_support:
        raise reject("SUPPORT_ABOVE_MAX", f"k = {step.support_policy} > {params.max_support}", route)
    size = reply_payload_bytes(params, step.support_policy)
    if size > params.max_reply_bytes:
        raise reject("UNEXPECTED_SIZE", f"a {size}-byte reply exceeds max_reply_bytes {params.max_reply_bytes}", route)
    check_temperature(step.temperature, route)


@defines("R16", "R27")
def validate_completion(completion: Completion, params: Hello) -> None:
    """A COMPLETION names the fixed depth's row count and an explicit status (OK or FAILED)."""
    route = route_of(completion)
    if completion.row_count != params.depth:
        raise reject("DEPTH_MISMATCH", f"row count {completion.row_count}, negotiated depth {params.depth}", route)
    if completion.status not in (layout.STATUS_OK, layout.STATUS_FAILED):
        raise reject("UNKNOWN_STATUS", f"status {completion.status}", route)


@defines("R17")
def validate_commit(commit: Commit, params: Hello) -> None:
    """A COMMIT accepts at most the depth and names an in-vocabulary correction or bonus token."""
    route = route_of(commit)
    if commit.accepted > params.depth:
        raise reject("POSITION_MISMATCH", f"accepted {commit.accepted} > depth {params.depth}", route)
    if not (commit.token == layout.NO_TOKEN or 0 <= commit.token < params.vocab):
        raise reject("TOKEN_OUT_OF_RANGE", f"token {commit.token}, vocabulary {params.vocab}", route)


@defines("R01", "R22")
def validate_reset(reset: Reset, params: Hello) -> None:
    """A RESET names the committed token its prefix ends with, or -1 for an empty prefix."""
    if not (reset.token == layout.NO_TOKEN or 0 <= reset.token < params.vocab):
        raise reject("TOKEN_OUT_OF_RANGE", f"committed token {reset.token}, vocabulary {params.vocab}",
                     route_of(reset))


@defines("R19", "R20")
def check_sparse_ids(ids: tuple[int, ...], vocab: int, route: Route) -> None:
    """Sparse IDs: each in [0, vocab) (a negative padding sentinel too), none repeated, strictly ascending."""
    for token in ids:
        if not 0 <= token < vocab:
            raise reject("SPARSE_ID_OUT_OF_RANGE", f"sparse ID {token}, vocabulary {vocab}", route)
    if len(set(ids)) != len(ids):
        raise reject("DUPLICATE_SPARSE_ID", "a sparse ID is listed twice", route)
    for before, after in zip(ids, ids[1:]):
        if after < before:
            raise reject("UNSORTED_SUPPORT", f"sparse ID {after} after {before}", route)


@defines("R20")
def check_dense_padding(values: tuple[int, ...], vocab: int, route: Route) -> None:
    """Dense entries beyond the vocabulary are all-zero bytes (R20)."""
    for v in range(vocab, len(values)):
        if values[v] != 0:
            raise reject("NONZERO_DENSE_PADDING", f"padding entry {v} has bits {values[v]:#010x}", route)


@defines("R03", "R19")
def q_value_class(bits: int) -> str | None:
    """The rejection class of one FP32 q value, or None when q * 2^24 is a nonnegative integer."""
    parts = unpack_f32(bits)
    if isinstance(parts, Special):
        return "NON_FINITE_VALUE"
    negative, significand, exponent = parts
    if significand == 0:
        return None
    if negative:
        return "NEGATIVE_VALUE"
    shift = exponent + M_BITS
    if shift < 0 and significand % (1 << -shift):
        return "NON_DYADIC_VALUE"
    return None


#: Value classes in precedence order: the first present anywhere in the row is the reason.
VALUE_CLASSES: tuple[str, ...] = ("NON_FINITE_VALUE", "NEGATIVE_VALUE", "NON_DYADIC_VALUE")


@defines("R03", "R19")
def check_q_values(values: tuple[int, ...], route: Route) -> None:
    """Every q value is finite, nonnegative and dyadic24; the reason is the first class present."""
    found = {q_value_class(bits) for bits in values if bits != 0}
    for code in VALUE_CLASSES:
        if code in found:
            raise reject(code, "", route)


@defines("R03", "R04")
def recover_counts(values: tuple[int, ...], route: Route) -> list[int]:
    """``c_v = q(v) * M`` of every value (``dyadic24``), refused unless they sum to exactly M.

    The count of a value depends on its bits alone, so each distinct bit pattern is converted once.
    """
    distinct: dict[int, int] = {}
    for v, bits in enumerate(values):
        if bits not in distinct:
            distinct[bits] = count_from_f32_bits(v, bits)
    counts = [distinct[bits] for bits in values]
    try:
        check_total(counts)
    except SpecError as error:
        raise reject("WRONG_TOTAL_MASS", error.detail, route) from None
    return counts


@defines("R03", "R07", "R15", "R19", "R20")
def validate_reply(reply: Reply, params: Hello) -> QRow:
    """Validate a REPLY's q row and return it; see the module docstring for the order of checks."""
    route = route_of(reply)
    if crc32c(reply_tail(reply)) != reply.q_checksum:
        raise reject("Q_CHECKSUM_MISMATCH", f"q checksum {reply.q_checksum:#010x}", route)
    if not 0 <= reply.token < params.vocab:
        raise reject("TOKEN_OUT_OF_RANGE", f"token {reply.token}, vocabulary {params.vocab}", route)
    if reply.representation == layout.REPR_SPARSE:
        check_sparse_ids(reply.ids, params.vocab, route)
        values = reply.values
    else:
        check_dense_padding(reply.values, params.vocab, route)
        values = reply.values[: params.vocab]
    check_q_values(values, route)
    if reply.representation == layout.REPR_SPARSE and 0 in (bits & 0x7FFFFFFF for bits in values):
        raise reject("NONCANONICAL_SUPPORT", "a sparse entry has zero q", route)
    counts = recover_counts(values, route)
    if reply.representation == layout.REPR_SPARSE:
        row = QRow.sparse(params.vocab, reply.ids, counts)
    else:
        row = QRow.dense(counts)
    if row.count(reply.token) == 0:
        raise reject("ZERO_Q_AT_TOKEN", f"q({reply.token}) = 0", route)
    return row


@defines("R15", "R16", "R17", "R19", "R27")
def validate_message(message: Message, params: Hello) -> QRow | None:
    """Every stateless check of a decoded non-HELLO message; a REPLY's validated q row is returned."""
    if isinstance(message, HelloAnswer):
        if message.status not in (layout.HELLO_ACCEPTED, layout.HELLO_REFUSED):
            raise reject("UNKNOWN_STATUS", f"HELLO answer status {message.status}")
        return None
    check_session_and_slot(message, params)
    if isinstance(message, Step):
        validate_step(message, params)
    elif isinstance(message, Reply):
        return validate_reply(message, params)
    elif isinstance(message, Completion):
        validate_completion(message, params)
    elif isinstance(message, Commit):
        validate_commit(message, params)
    elif isinstance(message, Reset):
        validate_reset(message, params)
    elif not isinstance(message, Cancel):
        raise TypeError(f"not a v2 session message: {type(message).__name__}")
    return None
