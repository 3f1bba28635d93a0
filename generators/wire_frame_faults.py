"""Frames in which two rules of one message fail at once: the ``check_order`` group of ``wire_frames``.

Not a family of its own. For every message type, one *fault* per row of its
check table (``qconform.spec.wire.checks``, ``negotiation`` for HELLO, the v1
table for v1 frames) turns a valid frame into one that breaks exactly that
row. Each fault alone must give its row's code; every pair of faults that can
be present together (rows ``i < j``) gives one frame, whose answer must be row
``i``'s code (docs/wire-v2.md, "Check order"). Pairs that cannot fail together
(a dense rule and a sparse rule, or two values of one field) are listed in
:data:`EXCLUSIVE` with the reason. Faults are applied from the later row to the
earlier, so the expected row's fault is the last one written.

Case names say which rows fail: ``reply-sparse-r03-support_above_max-r14-non_finite_value``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any, Generic, TypeVar

from qconform.spec.constants import M
from qconform.spec.qrow import QRow
from qconform.spec.wire import checks, layout
from qconform.spec.wire.checksum import crc32c
from qconform.spec.wire.codec import encode_frame, reply_from_row
from qconform.spec.wire.messages import (
    Cancel,
    Commit,
    Completion,
    Hello,
    HelloAnswer,
    Reply,
    Reset,
    Step,
    ascii_field,
    reply_tail,
)
from qconform.spec.wire.negotiation import BOUND_FIELDS, IDENTITY_FIELDS, example_config

PROD = example_config()
DEV = example_config(vocab=60, dense_stride=64, max_support=16)
#: STEP pairs run under a HELLO whose max_reply_bytes holds a full sparse support but no dense row.
SMALL_REPLY = replace(PROD, max_reply_bytes=layout.REPLY.size + checks.SPARSE_ENTRY_BYTES * PROD.max_support)
DIGEST = bytes(range(32))
NAN, NEG_ONE = 0x7FC00000, 0xBF800000


def f32(count: int, negative: bool = False) -> int:
    """FP32 bits of ``count / 2^24`` (exact), with the sign bit when ``negative``."""
    return struct.unpack("<I", struct.pack("<f", count / M))[0] | (0x80000000 if negative else 0)


@dataclass(frozen=True)
class Draft:
    """A frame under construction: the message, its HELLO, whether HELLO is negotiated, tail tweaks.

    ``message`` is typed ``Any``: each fault edits the fields of its own message type.
    """

    message: Any
    config: Hello
    negotiated: bool = True
    bad_q_checksum: bool = False

    def frame(self) -> bytes:
        message = self.message
        if isinstance(message, Reply):
            sealed = crc32c(reply_tail(message))
            message = replace(message, q_checksum=sealed ^ 1 if self.bad_q_checksum else sealed)
        return encode_frame(message)


def edit(**changes) -> Callable[[Draft], Draft]:
    """A fault that sets message fields."""
    return lambda d: replace(d, message=replace(d.message, **changes))


def bump(name: str, delta: int) -> Callable[[Draft], Draft]:
    return lambda d: replace(d, message=replace(d.message, **{name: getattr(d.message, name) + delta}))


def with_value(index: int, bits: int) -> Callable[[Draft], Draft]:
    def apply(d: Draft) -> Draft:
        values = list(d.message.values)
        values[index] = bits
        return replace(d, message=replace(d.message, values=tuple(values)))

    return apply


def with_id(index: int, token: int) -> Callable[[Draft], Draft]:
    def apply(d: Draft) -> Draft:
        ids = list(d.message.ids)
        ids[index] = token
        return replace(d, message=replace(d.message, ids=tuple(ids)))

    return apply


def swap_ids(a: int, b: int) -> Callable[[Draft], Draft]:
    def apply(d: Draft) -> Draft:
        ids = list(d.message.ids)
        ids[a], ids[b] = ids[b], ids[a]
        return replace(d, message=replace(d.message, ids=tuple(ids)))

    return apply


def length_mismatch(d: Draft) -> Draft:
    """A tail that is not ``entry_count`` entries: one sparse entry more, or one dense value (padding) fewer.

    (A dense row one value longer would exceed the largest REPLY the HELLO admits: UNEXPECTED_SIZE at step 4.)
    """
    r = d.message
    if r.representation == layout.REPR_DENSE:
        return replace(d, message=replace(r, values=r.values[:-1]))
    return replace(d, message=replace(r, ids=r.ids + (max(r.ids) + 1,), values=r.values + (0,)))


def over_support(d: Draft) -> Draft:
    """A sparse row declaring max_support + 1 entries, with as many more entries in its tail as that adds."""
    r, k = d.message, d.config.max_support + 1
    more = k - r.entry_count
    ids = r.ids + tuple(range(41, 41 + more))
    return replace(d, message=replace(r, ids=ids, values=r.values + (f32(1),) * more, entry_count=k))


def short_dense(d: Draft) -> Draft:
    """A dense row of dense_stride - 1 entries, declared as such."""
    r = d.message
    return replace(d, message=replace(r, values=r.values[:-1], entry_count=r.entry_count - 1))


def bad_q_checksum(d: Draft) -> Draft:
    return replace(d, bad_q_checksum=True)


#: The draft a fault edits: :class:`Draft` for a v2 message, :class:`V1Draft` for the v1 frame.
D = TypeVar("D", bound="Draft | V1Draft")


@dataclass(frozen=True)
class Fault(Generic[D]):
    """Breaks exactly row ``row`` (1-based) of a check table, whose code is ``code``."""

    row: int
    code: str
    apply: Callable[[D], D]
    only: str | None = None  # "dense" or "sparse": the row holds only for that representation


SPARSE_IDS = (3, 7, 11, 20, 33, 40)
SPARSE_COUNTS = (M // 2, M // 8, M // 8, M // 8, M // 16, M // 16)
DENSE_COUNTS = tuple(M // 32 if v < 32 else 0 for v in range(DEV.vocab))


def reply_base(representation: str) -> Draft:
    if representation == "sparse":
        row, token = QRow.sparse(DEV.vocab, list(SPARSE_IDS), list(SPARSE_COUNTS)), 3
    else:
        row, token = QRow.dense(list(DENSE_COUNTS)), 0
    return Draft(reply_from_row(DEV.session_id, 1, 3, 9, 4100, token, row, DEV.dense_stride), DEV)


REPLY_FAULTS: tuple[Fault[Draft], ...] = (
    Fault(1, "MISSING_Q", edit(entry_count=0)),
    Fault(2, "UNEXPECTED_SIZE", short_dense, "dense"),
    Fault(3, "SUPPORT_ABOVE_MAX", over_support, "sparse"),
    Fault(4, "UNKNOWN_REPRESENTATION", edit(representation=3)),
    Fault(5, "LENGTH_MISMATCH", length_mismatch),
    Fault(6, "SESSION_MISMATCH", bump("session_id", 1)),
    Fault(7, "TOO_MANY_SLOTS", edit(slot=DEV.max_slots)),
    Fault(8, "Q_CHECKSUM_MISMATCH", bad_q_checksum),
    Fault(9, "TOKEN_OUT_OF_RANGE", edit(token=DEV.vocab)),
    Fault(10, "SPARSE_ID_OUT_OF_RANGE", with_id(5, DEV.vocab), "sparse"),
    Fault(11, "DUPLICATE_SPARSE_ID", with_id(2, SPARSE_IDS[1]), "sparse"),
    Fault(12, "UNSORTED_SUPPORT", swap_ids(3, 4), "sparse"),
    Fault(13, "NONZERO_DENSE_PADDING", with_value(DEV.vocab, 1), "dense"),
)
#: value faults at distinct entries: (row, code, sparse entry and bits, dense entry and bits)
REPLY_VALUE_FAULTS: tuple[tuple[int, str, tuple[int, int], tuple[int, int]], ...] = (
    (14, "NON_FINITE_VALUE", (5, NAN), (40, NAN)),
    (15, "NEGATIVE_VALUE", (4, f32(M // 16, negative=True)), (41, f32(M // 64, negative=True))),
    (16, "NON_DYADIC_VALUE", (3, 0x33000000), (42, 0x33000000)),
    (18, "WRONG_TOTAL_MASS", (2, f32(M // 8 + 1)), (5, f32(M // 32 + 1))),
)


def value_fault(row: int, code: str, sparse: tuple[int, int], dense: tuple[int, int]) -> Fault:
    def apply(d: Draft) -> Draft:
        index, bits = sparse if d.message.representation == layout.REPR_SPARSE else dense
        return with_value(index, bits)(d)

    return Fault(row, code, apply)


def zero_q_at_token(d: Draft) -> Draft:
    """The sampled token moved to an ID with count 0 (outside the sparse support, or a zero dense entry)."""
    return edit(token=4 if d.message.representation == layout.REPR_SPARSE else 45)(d)


ALL_REPLY_FAULTS: tuple[Fault[Draft], ...] = tuple(
    sorted(
        REPLY_FAULTS
        + tuple(value_fault(*v) for v in REPLY_VALUE_FAULTS)
        + (
            Fault(17, "NONCANONICAL_SUPPORT", with_value(1, 0), "sparse"),
            Fault(19, "ZERO_Q_AT_TOKEN", zero_q_at_token),
        ),
        key=lambda f: f.row,
    )
)

#: Rows of the REPLY table about the tail's contents (they need a declared, readable row).
REPLY_TAIL_ROWS = frozenset(range(10, 20))

STEP_BASE = Draft(Step(PROD.session_id, 3, 9, 4100, 32, 2, 0x3F800000, 1, 5, DIGEST), SMALL_REPLY)
STEP_FAULTS: tuple[Fault[Draft], ...] = (
    Fault(1, "SESSION_MISMATCH", bump("session_id", 1)),
    Fault(2, "TOO_MANY_SLOTS", edit(slot=PROD.max_slots)),
    Fault(3, "DEPTH_MISMATCH", edit(depth=PROD.depth + 1)),
    Fault(4, "SUPPORT_ABOVE_MAX", edit(support_policy=PROD.max_support + 1)),
    Fault(5, "UNEXPECTED_SIZE", edit(support_policy=0)),
    Fault(6, "NON_FINITE_VALUE", edit(temperature=NAN)),
    Fault(7, "NEGATIVE_VALUE", edit(temperature=NEG_ONE)),
)
ROUTE_FAULTS: tuple[Fault[Draft], ...] = STEP_FAULTS[:2]
COMPLETION_BASE = Draft(Completion(PROD.session_id, 3, 9, 4100, 2, 100, 7, 1, 5, 0, DIGEST), PROD)
COMPLETION_FAULTS = ROUTE_FAULTS + (
    Fault(3, "DEPTH_MISMATCH", edit(row_count=PROD.depth - 1)),
    Fault(4, "UNKNOWN_STATUS", edit(status=2)),
)
COMMIT_BASE = Draft(Commit(PROD.session_id, 3, 9, 4103, 42, 1, 2), PROD)
COMMIT_FAULTS = ROUTE_FAULTS + (
    Fault(3, "POSITION_MISMATCH", edit(accepted=PROD.depth + 1)),
    Fault(4, "TOKEN_OUT_OF_RANGE", edit(token=-2)),
)
RESET_BASE = Draft(Reset(PROD.session_id, 0x0123456789ABCDEF, 4, 4200, 1, 42), PROD)
RESET_FAULTS = ROUTE_FAULTS + (Fault(3, "TOKEN_OUT_OF_RANGE", edit(token=PROD.vocab)),)
HELLO_ANSWER_BASE = Draft(HelloAnswer(PROD.session_id, layout.HELLO_ACCEPTED, bytes(32)), PROD)
HELLO_ANSWER_FAULTS = (Fault(1, "UNKNOWN_STATUS", edit(status=layout.HELLO_REFUSED + 1)),)
CANCEL_BASE = Draft(Cancel(PROD.session_id, 3, 1), PROD)

#: The offer that breaks each HELLO identity or bound field, in the order of ``negotiation``.
HELLO_OFFERS: dict[str, object] = {
    "wire_version": 3,
    "semantic_id": ascii_field("dyadic24-standard-v2"),
    "verifier_id": ascii_field("greedy-v1"),
    "rng_abi_id": ascii_field("philox4x32-7"),
    "vocab": PROD.vocab + 1,
    "id_map_hash": bytes(32),
    "draft_identity": bytes(32),
    "draft_adapted": 1,
    "target_identity": b"\xff" * 32,
    "precision": 2,
    "id_bytes": 8,
    "q_bytes": 8,
    "dense_stride": PROD.dense_stride + 256,
    "depth": PROD.depth - 1,
    "max_support": PROD.max_support + 1,
    "max_reply_bytes": PROD.max_reply_bytes + 1,
    "max_slots": PROD.max_slots + 1,
    "max_requests": PROD.max_requests + 1,
}
HELLO_BASE = Draft(PROD, PROD, negotiated=False)
HELLO_FAULTS: tuple[Fault[Draft], ...] = (
    Fault(1, "UNEXPECTED_MESSAGE", lambda d: replace(d, negotiated=True)),
) + tuple(
    Fault(row, code, edit(**{name: HELLO_OFFERS[name]}))
    for row, (name, code) in enumerate(IDENTITY_FIELDS + BOUND_FIELDS, start=2)
)


@dataclass(frozen=True)
class V1Draft:
    """A v1 frame under construction."""

    tokens: tuple[int, ...] = (3, 5, 7)
    version: int = layout.V1_VERSION
    message_type: int = layout.V1_GREEDY.code
    payload_length: int | None = None  # None: 4 + 4 * len(tokens)
    token_count: int | None = None  # None: len(tokens)
    short_payload: bool = False  # the payload is 2 bytes (payload_length 2)
    cut: int = 0  # bytes removed from the end
    append: int = 0  # bytes added at the end
    header_only: bool = False  # cut to 11 bytes

    def frame(self) -> bytes:
        count = len(self.tokens) if self.token_count is None else self.token_count
        payload = b"\0\0" if self.short_payload else struct.pack(f"<I{len(self.tokens)}i", count, *self.tokens)
        length = len(payload) if self.payload_length is None else self.payload_length
        data = struct.pack("<4sHHI", layout.V1_MAGIC, self.version, self.message_type, length) + payload
        data = data[: len(data) - self.cut] + b"\0" * self.append
        return data[: layout.V1_HEADER_SIZE - 1] if self.header_only else data


def v1_edit(**changes) -> Callable[[V1Draft], V1Draft]:
    return lambda d: replace(d, **changes)


V1_FAULTS: tuple[Fault[V1Draft], ...] = (
    Fault(1, "TRUNCATED", v1_edit(header_only=True)),
    Fault(2, "UNKNOWN_VERSION", v1_edit(version=2)),
    Fault(3, "UNKNOWN_MESSAGE_TYPE", v1_edit(message_type=2)),
    Fault(4, "UNEXPECTED_SIZE", v1_edit(short_payload=True)),
    Fault(5, "TRUNCATED", v1_edit(cut=1)),
    Fault(6, "LENGTH_MISMATCH", v1_edit(append=1)),
    Fault(7, "UNEXPECTED_SIZE", v1_edit(token_count=layout.V1_MAX_TOKENS + 1)),
    Fault(8, "LENGTH_MISMATCH", v1_edit(token_count=4)),
    Fault(9, "TOKEN_OUT_OF_RANGE", v1_edit(tokens=(3, -5, 7))),
)


def pairs(
    rows: range, *groups: tuple[set[int] | frozenset[int], set[int] | frozenset[int]]
) -> frozenset[frozenset[int]]:
    """Every pair {a, b} with a in one set and b in the other, for each (set, set) group."""
    return frozenset(
        frozenset((a, b)) for left, right in groups for a in left for b in right if a != b and a in rows and b in rows
    )


REPLY_DENSE_ONLY, REPLY_SPARSE_ONLY = {2, 13}, {3, 10, 11, 12, 17}
#: message -> row pairs that cannot fail together in one frame, and why
EXCLUSIVE: dict[str, tuple[frozenset[frozenset[int]], str]] = {
    "REPLY": (
        pairs(
            range(1, 20), ({1}, {3} | REPLY_TAIL_ROWS), ({4}, REPLY_DENSE_ONLY | REPLY_SPARSE_ONLY | REPLY_TAIL_ROWS)
        ),
        (
            "entry_count 0 declares no row to judge and is not above max_support; representation 3 has no "
            "layout, so no dense, sparse or tail-content rule applies; dense and sparse rules never meet "
            "(each representation is generated on its own)"
        ),
    ),
    "STEP": (frozenset({frozenset({6, 7})}), "one temperature cannot be both non-finite and finite non-positive"),
    "V1_GREEDY_TOKENS": (
        pairs(range(1, 10), ({1}, set(range(4, 10))), ({4}, {7, 8, 9}), ({5}, {6})),
        (
            "an 11-byte frame has no complete payload_length; a 2-byte payload has no token_count "
            "or tokens; a frame cannot be both short and long"
        ),
    ),
}


@dataclass(frozen=True)
class Family(Generic[D]):
    """One message's faults, its valid base frame(s) and how a draft becomes (config, negotiated, bytes)."""

    name: str
    bases: dict[str, D]
    faults: tuple[Fault[D], ...]
    codes: tuple[str, ...]  # the codes of its check table, row by row (the spec's)


def table_codes(name: str) -> tuple[str, ...]:
    if name == "HELLO":
        return ("UNEXPECTED_MESSAGE",) + tuple(code for _, code in IDENTITY_FIELDS + BOUND_FIELDS)
    if name == "V1_GREEDY_TOKENS":
        return tuple(c.code for c in checks.V1_CHECKS)
    return tuple(c.code for c in checks.MESSAGE_CHECKS[layout.MESSAGE_CODES[name]])


MESSAGE_FAMILIES: tuple[Family[Draft], ...] = tuple(
    Family(name, bases, faults, table_codes(name))
    for name, bases, faults in (
        ("HELLO", {"": HELLO_BASE}, HELLO_FAULTS),
        ("STEP", {"": STEP_BASE}, STEP_FAULTS),
        ("REPLY", {"sparse": reply_base("sparse"), "dense": reply_base("dense")}, ALL_REPLY_FAULTS),
        ("COMPLETION", {"": COMPLETION_BASE}, COMPLETION_FAULTS),
        ("COMMIT", {"": COMMIT_BASE}, COMMIT_FAULTS),
        ("RESET", {"": RESET_BASE}, RESET_FAULTS),
        ("CANCEL", {"": CANCEL_BASE}, ROUTE_FAULTS),
        ("HELLO_ANSWER", {"": HELLO_ANSWER_BASE}, HELLO_ANSWER_FAULTS),
    )
)
V1_FAMILY: Family[V1Draft] = Family("V1_GREEDY_TOKENS", {"": V1Draft()}, V1_FAULTS, table_codes("V1_GREEDY_TOKENS"))


def rendered(draft: Draft | V1Draft) -> tuple[Hello, bool, bytes]:
    """(HELLO, negotiated, frame bytes) of a draft."""
    if isinstance(draft, V1Draft):
        return PROD, True, draft.frame()
    assert isinstance(draft, Draft)
    return draft.config, draft.negotiated, draft.frame()


def slug(fault: Fault) -> str:
    return f"r{fault.row:02d}-{fault.code.lower()}"


@dataclass(frozen=True)
class OrderCase:
    """One ``check_order`` frame: its name, comment, HELLO, negotiated flag, bytes and the code it must get."""

    name: str
    comment: str
    config: Hello
    negotiated: bool
    data: bytes
    want: str


def order_cases() -> Iterator[OrderCase]:
    """Each fault alone, then each pair of faults that can fail together, for every message and representation."""
    for family in MESSAGE_FAMILIES:
        yield from family_cases(family)
    yield from family_cases(V1_FAMILY)


def family_cases(family: Family[D]) -> Iterator[OrderCase]:
    """The ``check_order`` cases of one message (every representation of it)."""
    assert tuple(f.code for f in family.faults) == family.codes, f"{family.name}: faults do not follow its table"
    exclusive = EXCLUSIVE.get(family.name, (frozenset(), ""))[0]
    kind = family.name.lower().replace("_greedy_tokens", "")
    for variant, base in family.bases.items():
        prefix = f"{kind}-{variant}-" if variant else f"{kind}-"
        usable = [f for f in family.faults if f.only in (None, variant or None)]
        for fault in usable:
            config, negotiated, data = rendered(fault.apply(base))
            yield OrderCase(
                prefix + slug(fault),
                f"{family.name}: row {fault.row} alone fails ({fault.code}).",
                config,
                negotiated,
                data,
                fault.code,
            )
        for first, second in combinations(usable, 2):
            if frozenset((first.row, second.row)) in exclusive or first.code == second.code:
                continue
            config, negotiated, data = rendered(first.apply(second.apply(base)))
            yield OrderCase(
                f"{prefix}{slug(first)}-{slug(second)}",
                f"{family.name}: rows {first.row} ({first.code}) and {second.row} ({second.code}) "
                f"both fail; the earlier row is the reason.",
                config,
                negotiated,
                data,
                first.code,
            )
