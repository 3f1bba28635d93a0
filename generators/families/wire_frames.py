"""Vector family ``wire_frames``: single wire v2 frames, accepted or refused with a reason (R12-R21, R27).

Each case hands an implementation the negotiated HELLO (or, before negotiation,
the receiver's own configuration, which has the same shape), whether HELLO has
been negotiated, and the bytes of one frame. The answer is the stateless
verdict of ``qconform.spec.wire.receiver.check_frame``: the decoded message, or
the reason code of the first failing check (docs/wire-v2.md, "Decoding order").

An ``encode`` case instead hands over a message (a REPLY: its routing fields,
token and q row) and the answer is the exact frame a sender writes for it
(:func:`encoded`): the sender's bytes are normative too.

Groups: one valid frame per message type (the production V = 129280 dense row
included), at least one invalid frame per stateless reason class, and
systematic mutations of small valid frames (every header field off by one,
truncation at every field boundary, checksum and payload bit flips).
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any, Iterator

from qconform.generators.encoding import (
    decode_blob,
    decode_u64,
    encode_blob,
    encode_u64,
    encode_word,
)
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import blob_schema
from qconform.generators.schemas import closed_object as closed
from qconform.generators.wire_frame_faults import order_cases
from qconform.spec.constants import M
from qconform.spec.qrow import QRow
from qconform.spec.wire import layout
from qconform.spec.wire.checksum import crc32c
from qconform.spec.wire.codec import (
    completion_for,
    encode_frame,
    encode_v1,
    reply_from_row,
)
from qconform.spec.wire.header import seal
from qconform.spec.wire.layout import FIELD_TYPES, HEADER, HEADER_SIZE, Field
from qconform.spec.wire.messages import (
    MESSAGE_CLASSES,
    Cancel,
    Commit,
    Hello,
    HelloAnswer,
    Message,
    Reply,
    Reset,
    Step,
    V1Greedy,
    ascii_field,
    ascii_text,
    reply_tail,
)
from qconform.spec.wire.negotiation import example_config
from qconform.spec.wire.reasons import REASONS, WireReject
from qconform.spec.wire.receiver import check_frame, commit_for_round

FAMILY_RULES = ("R03", "R07", "R12", "R13", "R14", "R15", "R16", "R17", "R18", "R19", "R20", "R21", "R25", "R27")

NOTES = {
    "VALID_FRAME": Note(
        "BASIC",
        "A well-formed frame under the negotiated HELLO; the decoded fields are the answer.",
        "Catches an encoder or decoder that disagrees with the normative layout.",
    ),
    "PRODUCTION_SHAPE": Note(
        "BASIC",
        "The production example: V = 129280, depth 5, four requests and slots.",
        "Pins the layout at the size the design's table describes (R26).",
    ),
    "DEV_PROFILE": Note(
        "EDGE_CASE",
        "A development configuration: vocabulary 60 with a dense stride of 64, so "
        "dense rows carry 4 padding entries, and max support 16.",
        "Small dense rows exercise R20 padding without megabyte vectors.",
    ),
    "REASON_CLASS": Note(
        "MALFORMED_INPUT",
        "An invalid frame built to fail exactly one check; every other check "
        "before it passes (checksums are resealed).",
        "Catches a receiver that accepts the class, or refuses it for another reason.",
    ),
    "HEADER_OFF_BY_ONE": Note(
        "MALFORMED_INPUT",
        "One header field of a valid frame, plus or minus one, checksum not resealed.",
        "Catches a header field that is not checked, or checked after the payload is read.",
    ),
    "TRUNCATION": Note(
        "MALFORMED_INPUT",
        "A valid frame cut at a field boundary.",
        "Catches a decoder that reads past the bytes it has (R18).",
    ),
    "BIT_FLIP": Note(
        "MALFORMED_INPUT",
        "A valid frame with one bit flipped in the checksum or the payload.",
        "Catches a checksum that is not verified, or not over every payload byte (R21).",
    ),
    "BOUNDS_FIRST": Note(
        "EDGE_CASE",
        "A declared length out of bounds and also inconsistent with the bytes present; the bound is checked first.",
        "Catches a decoder that reads or allocates before checking the negotiated bounds (R18).",
    ),
    "V1_COEXISTENCE": Note(
        "FUNCTIONALITY",
        "A v1 greedy frame, or a v2 frame before HELLO (R12).",
        "Catches v1 treated as sampled, or v2 honoured before negotiation.",
    ),
    "CHECK_ORDER": Note(
        "MALFORMED_INPUT",
        "A frame breaking one row of its message's check table, or two rows at "
        "once; the answer is the earlier row's code (docs/wire-v2.md, Check order). The case name "
        "names the rows: r03-support_above_max-r14-non_finite_value.",
        "Catches a decoder that checks one message's rules in another order than the document.",
    ),
    "NEGATIVE_ZERO": Note(
        "EDGE_CASE",
        "-0.0 (sign bit set, zero magnitude) in a q row or as the temperature: "
        "NEGATIVE_VALUE, dense and sparse alike; a zero count is sent only as +0.0.",
        "Catches a receiver that compares values (-0.0 == 0) where the wire decides on bits.",
    ),
    "SPARSE_ABOVE_DENSE": Note(
        "EDGE_CASE",
        "A configuration whose full sparse support (36 + 8 max_support bytes) is larger than "
        "its dense row (36 + 4 dense_stride): V = 60, stride 64, max support 40.",
        "Catches a receiver that bounds a REPLY by the dense row alone, or by the sparse one alone (R18).",
    ),
    "ENCODING": Note(
        "BASIC",
        "A message (for a REPLY: its routing fields, token and q row) and the exact frame bytes a sender writes.",
        "Catches a sender whose bytes differ from the normative layout: field order, dense padding, "
        "entry count, FP32 q values, checksums (R12-R17, R20, R21).",
    ),
    "FULL_VOCAB_DENSE": Note(
        "EDGE_CASE",
        "A dense REPLY over the full 129280-token vocabulary (517,176-byte frame).",
        "Pins the production dense row size.",
    ),
}

U64_BITS = 64
DIGEST_PATTERN = "^[0-9a-f]{64}$"


# ---------------------------------------------------------------- JSON <-> messages


def field_to_json(f: Field, value: Any) -> object:
    """One fixed field's JSON encoding by its layout type (``value``: bytes for a byte array, else int)."""
    if f.type == "u64":
        return encode_u64(value)
    if f.type == "f32":
        return {"f32": encode_word(value)}
    if f.type == "char[32]":
        return ascii_text(value)
    if f.type == "u8[32]":
        return value.hex()
    return value


def field_from_json(f: Field, value: Any) -> Any:
    """One fixed field from its JSON encoding: a JSON value, and an int or bytes, by the layout type."""
    if f.type == "u64":
        return decode_u64(value)
    if f.type == "f32":
        return int(value["f32"], 16)
    if f.type == "char[32]":
        return ascii_field(value)
    if f.type == "u8[32]":
        return bytes.fromhex(value)
    return value


def fields_to_json(message: Message) -> dict:
    return {f.name: field_to_json(f, getattr(message, f.name)) for f in type(message).LAYOUT.fields}


def hello_from_json(obj: dict) -> Hello:
    """A HELLO (or a receiver configuration) from its JSON object."""
    return Hello(**{f.name: field_from_json(f, obj[f.name]) for f in layout.HELLO.fields})


def q_row_json(row: QRow) -> dict:
    if row.ids is None:
        return {"representation": "dense", "counts": encode_blob("u32", list(row.counts))}
    return {
        "representation": "sparse",
        "ids": encode_blob("i32", list(row.ids)),
        "counts": encode_blob("u32", list(row.counts)),
    }


def message_json(message: Message | V1Greedy, row: QRow | None) -> dict:
    """The decoded message as the answer shows it: type, fixed fields, and a REPLY's validated q row."""
    if isinstance(message, V1Greedy):
        return {"type": layout.V1_GREEDY.name, "tokens": list(message.tokens)}
    out = {"type": type(message).LAYOUT.name, **fields_to_json(message)}
    if isinstance(message, Reply):
        assert row is not None
        out["q"] = q_row_json(row)
    return out


#: The REPLY fields a sender is given; ``entry_count``, ``q_checksum`` and ``representation`` follow from its q row.
REPLY_GIVEN = ("session_id", "generation", "round", "position", "token", "slot")
#: What a target's sender is given for a COMMIT in ``outcome`` form: the routing fields, and the round's
#: outcome (anchor, accepted drafts, emitted tokens); it derives accepted, token and new_committed.
COMMIT_GIVEN = ("session_id", "generation", "round", "slot")


def q_row_from_json(obj: dict, vocab: int) -> QRow:
    """A q row from its ``qRow`` object (a dense row lists ``vocab`` counts)."""
    counts = decode_blob(obj["counts"], "u32")[0]
    if obj["representation"] == "dense":
        return QRow.dense(counts)
    return QRow.sparse(vocab, decode_blob(obj["ids"], "i32")[0], counts)


def encoded(obj: dict, config: Hello) -> bytes:
    """The exact frame a sender writes for the message ``obj`` under the negotiated ``config`` (R12-R17, R20, R21).

    A REPLY is given its routing fields, its token and its q row; the sender
    derives the rest (``codec.reply_from_row``): the representation, the entry
    count (a dense row padded with zero entries to ``dense_stride``), the FP32
    q values and the probability checksum. A COMMIT given in ``outcome`` form
    (routing fields and the verified round's anchor, accepted count and emitted
    tokens) gets its accepted count, token and new committed position from
    ``receiver.commit_for_round`` (R16, R17): the target's rule.
    """
    if obj["type"] == layout.V1_GREEDY.name:
        return encode_v1(obj["tokens"])
    message = layout.MESSAGES[layout.MESSAGE_CODES[obj["type"]]]
    if message is layout.COMMIT and "outcome" in obj:
        given = {f.name: field_from_json(f, obj[f.name]) for f in message.fields if f.name in COMMIT_GIVEN}
        outcome = obj["outcome"]
        accepted, token, new_committed = commit_for_round(
            outcome["anchor"], outcome["accepted"], tuple(outcome["emitted"])
        )
        return encode_frame(Commit(**given, accepted=accepted, token=token, new_committed=new_committed))
    if message is layout.REPLY:
        given = {f.name: field_from_json(f, obj[f.name]) for f in message.fields if f.name in REPLY_GIVEN}
        row = q_row_from_json(obj["q"], config.vocab)
        sealed = reply_from_row(
            given["session_id"],
            given["slot"],
            given["generation"],
            given["round"],
            given["position"],
            given["token"],
            row,
            config.dense_stride,
        )
        return encode_frame(sealed)
    cls = MESSAGE_CLASSES[message.code]
    return encode_frame(cls(**{f.name: field_from_json(f, obj[f.name]) for f in message.fields}))


def solve(case_input: dict) -> dict:
    """The spec's verdict on one frame: ``accept`` with the decoded message, or ``reject`` with the reason.

    An ``encode`` case instead asks for the frame of a message: ``{"frame": bytes}``.
    """
    hello = hello_from_json(case_input["hello"])
    if "encode" in case_input:
        return {"frame": encode_blob("u8", list(encoded(case_input["encode"], hello)))}
    negotiated = hello if case_input["negotiated"] else None
    data = bytes(decode_blob(case_input["frame"], "u8")[0])
    try:
        message, row = check_frame(data, hello, negotiated)
    except WireReject as error:
        return {"verdict": "reject", "reason": error.code}
    if isinstance(message, Hello) and negotiated is not None:
        return {"verdict": "reject", "reason": "UNEXPECTED_MESSAGE"}
    return {"verdict": "accept", "message": message_json(message, row)}


# ---------------------------------------------------------------- building frames

PROD = example_config()
DEV = example_config(vocab=60, dense_stride=64, max_support=16)
#: A full sparse support (40 entries, 356 bytes) is larger than a dense row (64 entries, 292 bytes).
WIDE = example_config(vocab=60, dense_stride=64, max_support=40)
SID = PROD.session_id
DIGEST = bytes(range(32))
ONE_F32 = 0x3F800000


def frame_input(config: Hello, negotiated: bool, data: bytes) -> dict:
    return {"hello": fields_to_json(config), "negotiated": negotiated, "frame": encode_blob("u8", list(data))}


def case(
    name: str,
    comment: str,
    flags: tuple[str, ...],
    config: Hello,
    data: bytes,
    negotiated: bool = True,
    want: str | None = None,
) -> Case:
    """A case whose answer is :func:`solve`; ``want`` (a reason or "accept") is asserted, not trusted."""
    case_input = frame_input(config, negotiated, data)
    expected = solve(case_input)
    got = expected.get("reason", "accept")
    assert want is None or got == want, (name, want, got)
    rules = tuple(sorted({"R18", *(REASONS[got][0],)} if got != "accept" else {"R12", "R15"}))
    return Case(name=name, comment=comment, rules=rules, flags=flags, input=case_input, expected=expected)


def sparse_row(vocab: int, ids: list[int], counts: list[int]) -> QRow:
    return QRow.sparse(vocab, ids, counts)


SMALL_ROW = sparse_row(PROD.vocab, [7, 1000, 129279], [M // 2, M // 4, M // 4])
K32_ROW = sparse_row(PROD.vocab, [3 * i + 11 for i in range(32)], [M // 32] * 32)
DEV_DENSE_ROW = QRow.dense([(M // 64) * 2 if v < 32 else 0 for v in range(60)])


def reply(row: QRow = SMALL_ROW, config: Hello = PROD, token: int = 7, **fields) -> Reply:
    base = reply_from_row(SID, 1, 3, 9, 4100, token, row, config.dense_stride)
    return replace(base, **fields)


def resealed_reply(base: Reply, **fields) -> Reply:
    """``base`` with ``fields`` changed and its probability checksum recomputed."""
    changed = replace(base, **fields)
    return replace(changed, q_checksum=crc32c(reply_tail(changed)))


WIDE_ROW = sparse_row(WIDE.vocab, list(range(WIDE.max_support)), [M // 64] * 32 + [M // 16] * 8)
WIDE_FRAME = encode_frame(reply(WIDE_ROW, WIDE, token=0))
STEP = Step(SID, 3, 9, 4100, 32, 2, ONE_F32, 1, 5, DIGEST)
DEV_STEP = replace(STEP, support_policy=0)
REPLY_FRAMES = [encode_frame(reply(position=4100 + i)) for i in range(5)]
COMPLETION = completion_for(STEP, REPLY_FRAMES)
COMMIT = Commit(SID, 3, 9, 4103, 42, 1, 2)
RESET = Reset(SID, 0x0123456789ABCDEF, 4, 4200, 1)
CANCEL = Cancel(SID, 3, 1)


def base_frames() -> list[tuple[str, Hello, bool, bytes]]:
    """Small valid frames: (name, config, negotiated, bytes)."""
    return [
        ("hello", PROD, False, encode_frame(PROD)),
        ("step", PROD, True, encode_frame(STEP)),
        ("reply_sparse", PROD, True, encode_frame(reply())),
        ("reply_dense", DEV, True, encode_frame(reply(DEV_DENSE_ROW, DEV, token=0))),
        ("completion", PROD, True, encode_frame(COMPLETION)),
        ("commit", PROD, True, encode_frame(COMMIT)),
        ("reset", PROD, True, encode_frame(RESET)),
        ("cancel", PROD, True, encode_frame(CANCEL)),
    ]


def valid_cases() -> Iterator[Case]:
    for name, config, negotiated, data in base_frames():
        flags = ("VALID_FRAME", "DEV_PROFILE" if config is DEV else "PRODUCTION_SHAPE")
        yield case(name, f"A valid {name.split('_')[0].upper()} frame.", flags, config, data, negotiated, "accept")
    yield case(
        "reply_sparse_k32",
        "A sparse REPLY with the k = 32 candidate support (R29).",
        ("VALID_FRAME", "PRODUCTION_SHAPE"),
        PROD,
        encode_frame(reply(K32_ROW, token=11)),
        want="accept",
    )
    yield case(
        "step_dense",
        "A STEP asking for dense rows.",
        ("VALID_FRAME", "PRODUCTION_SHAPE"),
        PROD,
        encode_frame(DEV_STEP),
        want="accept",
    )
    yield case(
        "step_support_max",
        "A STEP asking for a sparse support of exactly max_support = 256 IDs (the most).",
        ("VALID_FRAME", "PRODUCTION_SHAPE"),
        PROD,
        encode_frame(replace(STEP, support_policy=PROD.max_support)),
        want="accept",
    )
    yield case(
        "completion_failed",
        "A COMPLETION with status FAILED is a valid frame (the receiver discards).",
        ("VALID_FRAME", "PRODUCTION_SHAPE"),
        PROD,
        encode_frame(replace(COMPLETION, status=layout.STATUS_FAILED)),
        want="accept",
    )
    full = QRow.dense([M // 1024 if v % 126 == 0 and v < 126 * 1024 else 0 for v in range(PROD.vocab)])
    yield case(
        "reply_dense_full_vocab",
        "A dense REPLY over all 129280 tokens (517,176 bytes), 1024 of them with q = 2^-10.",
        ("VALID_FRAME", "PRODUCTION_SHAPE", "FULL_VOCAB_DENSE"),
        PROD,
        encode_frame(reply(full, token=126 * 1023)),
        want="accept",
    )
    yield case(
        "reply_sparse_above_dense_size",
        "A sparse REPLY of max_support = 40 entries (356 bytes): larger than the 292-byte dense row, "
        "and admitted, as the largest REPLY is the larger of the two.",
        ("VALID_FRAME", "SPARSE_ABOVE_DENSE"),
        WIDE,
        WIDE_FRAME,
        want="accept",
    )
    yield case(
        "v1_greedy",
        "A v1 greedy frame parses as v1 after HELLO and is never sampled.",
        ("V1_COEXISTENCE",),
        PROD,
        encode_v1([5, 6, 7]),
        want="accept",
    )
    yield case(
        "v1_greedy_empty",
        "A v1 greedy frame of no token (payload_length 4, the least).",
        ("V1_COEXISTENCE",),
        PROD,
        encode_v1([]),
        want="accept",
    )
    yield case(
        "v1_greedy_64_tokens",
        "A v1 greedy frame of 64 tokens (payload_length 260, the most), token 0 among them.",
        ("V1_COEXISTENCE",),
        PROD,
        encode_v1(list(range(layout.V1_MAX_TOKENS))),
        want="accept",
    )
    yield case(
        "reply_sparse_q_one",
        "A sparse REPLY of one ID with q = 1.0 (0x3f800000): the count 2^24, the largest.",
        ("VALID_FRAME", "PRODUCTION_SHAPE"),
        PROD,
        encode_frame(reply(sparse_row(PROD.vocab, [129279], [M]), token=129279)),
        want="accept",
    )
    for status, reason in ((layout.HELLO_ACCEPTED, ""), (layout.HELLO_REFUSED, "VOCAB_MISMATCH")):
        name = "accepted" if status == layout.HELLO_ACCEPTED else "refused"
        yield case(
            f"hello_answer_{name}",
            f"A HELLO_ANSWER with status {name.upper()} ({status}) is a valid frame.",
            ("VALID_FRAME", "PRODUCTION_SHAPE"),
            PROD,
            encode_frame(HelloAnswer(SID, status, ascii_field(reason))),
            want="accept",
        )
    for name, field, shown in (
        ("after_nul", b"DEPTH_MISMATCH\0garbage\xff".ljust(32, b"\x07"), "DEPTH_MISMATCH"),
        ("high_byte", b"caf\xe9".ljust(32, b"\0"), "caf\u00e9"),
    ):
        yield case(
            f"hello_answer_reason_{name}",
            f"A REFUSED HELLO_ANSWER whose reason is not canonical ASCII: its JSON form is the bytes before the "
            f"first NUL, one character per byte (U+0000-U+00FF), here {shown!r}; bytes after the NUL are not "
            "shown (docs/wire-v2.md, 'char[32] in JSON').",
            ("VALID_FRAME",),
            PROD,
            encode_frame(HelloAnswer(SID, layout.HELLO_REFUSED, field)),
            want="accept",
        )
    yield case(
        "v1_greedy_before_hello",
        "A v1 greedy frame parses as v1 before HELLO too.",
        ("V1_COEXISTENCE",),
        PROD,
        encode_v1([1]),
        negotiated=False,
        want="accept",
    )


# ---------------------------------------------------------------- one case per reason class


def patched(data: bytes, offset: int, fmt: str, value: int, reseal: bool = True) -> bytes:
    """``data`` with the ``fmt`` field at ``offset`` replaced by ``value``; checksum resealed unless told."""
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return seal(bytes(out)) if reseal else bytes(out)


def header_patched(data: bytes, name: str, value: int, reseal: bool = True) -> bytes:
    f = next(f for f in HEADER if f.name == name)
    return patched(data, f.offset, FIELD_TYPES[f.type][0], value, reseal)


def q_bits(count: int) -> int:
    """FP32 bits of ``count / 2^24`` (exact for 0 <= count <= 2^24)."""
    return struct.unpack("<I", struct.pack("<f", count / M))[0]


def sparse_reply(ids: list[int], values: list[int], token: int = 7, config: Hello = PROD) -> bytes:
    base = reply(config=config, token=token)
    return encode_frame(resealed_reply(base, ids=tuple(ids), values=tuple(values), entry_count=len(ids)))


def dense_reply(values: list[int], token: int = 0) -> bytes:
    base = reply(DEV_DENSE_ROW, DEV, token=0)
    return encode_frame(resealed_reply(base, values=tuple(values), entry_count=len(values), token=token))


HALF, QUARTER = q_bits(M // 2), q_bits(M // 4)
NAN, POS_INF, NEG_INF, NEG_ZERO = 0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000
DEV_VALUES = list(reply(DEV_DENSE_ROW, DEV, token=0).values)


def with_entry(values: list[int], index: int, bits: int) -> list[int]:
    out = list(values)
    out[index] = bits
    return out


def hello_offer(**changes) -> bytes:
    return encode_frame(replace(PROD, **changes))


def class_frames() -> Iterator[tuple[str, str, Hello, bool, bytes, tuple[str, ...]]]:
    """(reason, name, config, negotiated, bytes, extra flags) for every stateless reason class."""
    step, reply_frame = encode_frame(STEP), encode_frame(reply())
    yield "TRUNCATED", "empty", PROD, True, b"", ()
    yield "TRUNCATED", "three-bytes", PROD, True, step[:3], ()
    yield "TRUNCATED", "header-19-bytes", PROD, True, step[:19], ()
    yield "TRUNCATED", "payload-short-by-one", PROD, True, step[:-1], ()
    yield "TRUNCATED", "v1-short-by-one", PROD, True, encode_v1([1, 2])[:-1], ("V1_COEXISTENCE",)
    yield "LENGTH_MISMATCH", "trailing-byte", PROD, True, step + b"\0", ()
    yield "LENGTH_MISMATCH", "header-length-21", PROD, True, header_patched(step, "header_length", 21), ()
    yield (
        "LENGTH_MISMATCH",
        "entry-count-below-entries",
        PROD,
        True,
        patched(reply_frame, HEADER_SIZE + 24, "<I", 2),
        (),
    )
    yield (
        "LENGTH_MISMATCH",
        "v1-count-mismatch",
        PROD,
        True,
        patched(encode_v1([1, 2]), 12, "<I", 1, False),
        ("V1_COEXISTENCE",),
    )
    yield "BAD_MAGIC", "magic-qsmq", PROD, True, b"QSMQ" + step[4:], ()
    yield "BAD_MAGIC", "http-request", PROD, True, b"GET / HTTP/1.1\r\n\r\n", ()
    yield "BAD_MAGIC", "zeros", PROD, True, bytes(20), ()
    yield "BAD_MAGIC", "four-bytes", PROD, True, b"QSMQ", ()
    yield "UNKNOWN_VERSION", "header-version-3", PROD, True, header_patched(step, "version", 3), ()
    yield "UNKNOWN_VERSION", "header-version-1", PROD, True, header_patched(step, "version", 1), ()
    yield "UNKNOWN_VERSION", "v1-version-2", PROD, True, patched(encode_v1([1]), 4, "<H", 2, False), ("V1_COEXISTENCE",)
    yield "UNKNOWN_VERSION", "hello-wire-version-3", PROD, False, hello_offer(wire_version=3), ()
    yield "UNKNOWN_MESSAGE_TYPE", "type-0", PROD, True, header_patched(step, "message_type", 0), ()
    yield "UNKNOWN_MESSAGE_TYPE", "type-9", PROD, True, header_patched(step, "message_type", 9), ()
    yield (
        "UNKNOWN_MESSAGE_TYPE",
        "v1-type-2",
        PROD,
        True,
        patched(encode_v1([1]), 6, "<H", 2, False),
        ("V1_COEXISTENCE",),
    )
    yield (
        "CHECKSUM_MISMATCH",
        "checksum-plus-one",
        PROD,
        True,
        header_patched(step, "checksum", (crc_field(step) + 1) % (1 << 32), False),
        (),
    )
    yield "UNEXPECTED_SIZE", "step-payload-67", PROD, True, header_patched(step[:-1], "payload_length", 67), ()
    yield (
        "UNEXPECTED_SIZE",
        "reply-length-2pow32-1",
        PROD,
        True,
        header_patched(reply_frame, "payload_length", 0xFFFFFFFF),
        ("BOUNDS_FIRST",),
    )
    yield (
        "UNEXPECTED_SIZE",
        "reply-above-max-reply-bytes",
        replace(PROD, max_reply_bytes=50),
        True,
        reply_frame[:HEADER_SIZE],
        ("BOUNDS_FIRST",),
    )
    yield "UNEXPECTED_SIZE", "dense-entries-not-stride", DEV, True, dense_reply(DEV_VALUES[:60]), ("DEV_PROFILE",)
    yield "UNEXPECTED_SIZE", "hello-id-bytes-8", PROD, False, hello_offer(id_bytes=8), ()
    yield "UNEXPECTED_SIZE", "hello-dense-stride", PROD, False, hello_offer(dense_stride=129536), ()
    yield (
        "UNEXPECTED_SIZE",
        "hello-max-reply-above",
        PROD,
        False,
        hello_offer(max_reply_bytes=PROD.max_reply_bytes + 1),
        (),
    )
    yield (
        "UNEXPECTED_SIZE",
        "step-dense-does-not-fit",
        replace(PROD, max_reply_bytes=36 + 8 * 256),
        True,
        encode_frame(DEV_STEP),
        (),
    )
    yield (
        "UNEXPECTED_SIZE",
        "sparse-above-largest-reply",
        WIDE,
        True,
        header_patched(WIDE_FRAME + b"\0", "payload_length", len(WIDE_FRAME) - HEADER_SIZE + 1),
        ("SPARSE_ABOVE_DENSE",),
    )
    yield "UNEXPECTED_SIZE", "v1-too-many-tokens", PROD, True, encode_v1(list(range(65))), ("V1_COEXISTENCE",)
    yield (
        "UNEXPECTED_SIZE",
        "v1-payload-0",
        PROD,
        True,
        struct.pack("<4sHHI", layout.V1_MAGIC, layout.V1_VERSION, layout.V1_GREEDY.code, 0),
        ("V1_COEXISTENCE",),
    )
    yield (
        "UNEXPECTED_SIZE",
        "v1-payload-261",
        PROD,
        True,
        patched(encode_v1(list(range(layout.V1_MAX_TOKENS))) + b"\0", 8, "<I", 261, False),
        ("V1_COEXISTENCE",),
    )
    yield "V2_BEFORE_HELLO", "step", PROD, False, step, ("V1_COEXISTENCE",)
    yield "V2_BEFORE_HELLO", "reply", PROD, False, reply_frame, ("V1_COEXISTENCE",)
    yield (
        "SEMANTIC_ID_MISMATCH",
        "v2-semantics",
        PROD,
        False,
        hello_offer(semantic_id=ascii_field("dyadic24-standard-v2")),
        (),
    )
    yield "SEMANTIC_ID_MISMATCH", "softmax", PROD, False, hello_offer(semantic_id=ascii_field("unrounded-softmax")), ()
    yield "VERIFIER_MISMATCH", "verifier", PROD, False, hello_offer(verifier_id=ascii_field("greedy-v1")), ()
    yield "RNG_ABI_MISMATCH", "rng-abi", PROD, False, hello_offer(rng_abi_id=ascii_field("philox4x32-7")), ()
    yield "VOCAB_MISMATCH", "vocab-129281", PROD, False, hello_offer(vocab=129281), ()
    yield "ID_MAP_MISMATCH", "id-map-hash", PROD, False, hello_offer(id_map_hash=bytes(32)), ()
    yield "IDENTITY_MISMATCH", "draft-checkpoint", PROD, False, hello_offer(draft_identity=bytes(32)), ()
    yield "IDENTITY_MISMATCH", "draft-adapted", PROD, False, hello_offer(draft_adapted=1), ()
    yield "IDENTITY_MISMATCH", "target", PROD, False, hello_offer(target_identity=b"\xff" * 32), ()
    yield "PRECISION_MISMATCH", "precision-2", PROD, False, hello_offer(precision=2), ()
    yield "DEPTH_MISMATCH", "hello-depth-4", PROD, False, hello_offer(depth=4), ()
    yield "DEPTH_MISMATCH", "step-depth-6", PROD, True, encode_frame(replace(STEP, depth=6)), ()
    yield "DEPTH_MISMATCH", "completion-rows-4", PROD, True, encode_frame(replace(COMPLETION, row_count=4)), ()
    yield "SUPPORT_ABOVE_MAX", "hello-257", PROD, False, hello_offer(max_support=257), ()
    yield "SUPPORT_ABOVE_MAX", "hello-0", PROD, False, hello_offer(max_support=0), ()
    yield "SUPPORT_ABOVE_MAX", "step-257", PROD, True, encode_frame(replace(STEP, support_policy=257)), ()
    yield (
        "SUPPORT_ABOVE_MAX",
        "reply-17-entries",
        DEV,
        True,
        sparse_reply(list(range(17)), [q_bits(M // 16)] * 16 + [0], 0, DEV),
        ("DEV_PROFILE",),
    )
    yield "TOO_MANY_SLOTS", "hello-5", PROD, False, hello_offer(max_slots=5), ()
    yield "TOO_MANY_SLOTS", "step-slot-4", PROD, True, encode_frame(replace(STEP, slot=4)), ()
    yield "TOO_MANY_SLOTS", "commit-slot-4", PROD, True, encode_frame(replace(COMMIT, slot=4)), ()
    yield "TOO_MANY_REQUESTS", "hello-5", PROD, False, hello_offer(max_requests=5), ()
    yield "TOO_MANY_REQUESTS", "hello-0", PROD, False, hello_offer(max_requests=0), ()
    yield "SESSION_MISMATCH", "step-other-session", PROD, True, encode_frame(replace(STEP, session_id=SID + 1)), ()
    yield (
        "MISSING_Q",
        "representation-none",
        PROD,
        True,
        encode_frame(resealed_reply(reply(), representation=0, entry_count=0, ids=(), values=())),
        (),
    )
    yield (
        "MISSING_Q",
        "representation-none-with-entries",
        PROD,
        True,
        encode_frame(resealed_reply(reply(), representation=0)),
        (),
    )
    yield (
        "MISSING_Q",
        "zero-entries",
        PROD,
        True,
        encode_frame(resealed_reply(reply(), entry_count=0, ids=(), values=())),
        (),
    )
    yield (
        "UNKNOWN_REPRESENTATION",
        "representation-3",
        PROD,
        True,
        encode_frame(resealed_reply(reply(), representation=3)),
        (),
    )
    yield "TOKEN_OUT_OF_RANGE", "reply-token-minus-1", PROD, True, encode_frame(resealed_reply(reply(), token=-1)), ()
    yield "TOKEN_OUT_OF_RANGE", "reply-token-vocab", PROD, True, encode_frame(resealed_reply(reply(), token=129280)), ()
    yield "TOKEN_OUT_OF_RANGE", "commit-token-vocab", PROD, True, encode_frame(replace(COMMIT, token=129280)), ()
    yield "TOKEN_OUT_OF_RANGE", "v1-negative-token", PROD, True, encode_v1([3, -5]), ("V1_COEXISTENCE",)
    yield "TOKEN_OUT_OF_RANGE", "v1-token-minus-1", PROD, True, encode_v1([3, -1]), ("V1_COEXISTENCE",)
    yield (
        "SPARSE_ID_OUT_OF_RANGE",
        "padding-sentinel-minus-1",
        PROD,
        True,
        sparse_reply([7, 1000, -1], [HALF, QUARTER, QUARTER]),
        (),
    )
    yield (
        "SPARSE_ID_OUT_OF_RANGE",
        "id-vocab",
        PROD,
        True,
        sparse_reply([7, 1000, 129280], [HALF, QUARTER, QUARTER]),
        (),
    )
    yield (
        "SPARSE_ID_OUT_OF_RANGE",
        "id-in-dense-padding",
        DEV,
        True,
        sparse_reply([0, 1, 62], [HALF, QUARTER, QUARTER], 0, DEV),
        ("DEV_PROFILE",),
    )
    yield "DUPLICATE_SPARSE_ID", "adjacent", PROD, True, sparse_reply([7, 7, 1000], [HALF, QUARTER, QUARTER]), ()
    yield "DUPLICATE_SPARSE_ID", "not-adjacent", PROD, True, sparse_reply([7, 1000, 7], [HALF, QUARTER, QUARTER]), ()
    yield (
        "DUPLICATE_SPARSE_ID",
        "duplicate-zeros",
        PROD,
        True,
        sparse_reply([7, 1000, 5000, 5000], [HALF, HALF, 0, 0]),
        (),
    )
    yield (
        "UNSORTED_SUPPORT",
        "descending-pair",
        PROD,
        True,
        sparse_reply([1000, 7, 129279], [HALF, QUARTER, QUARTER]),
        (),
    )
    yield "NONCANONICAL_SUPPORT", "zero-entry", PROD, True, sparse_reply([7, 1000, 5000], [HALF, HALF, 0]), ()
    yield "NONZERO_DENSE_PADDING", "padding-1", DEV, True, dense_reply(with_entry(DEV_VALUES, 63, 1)), ("DEV_PROFILE",)
    yield (
        "NONZERO_DENSE_PADDING",
        "padding-negative-zero",
        DEV,
        True,
        dense_reply(with_entry(DEV_VALUES, 60, NEG_ZERO)),
        ("DEV_PROFILE",),
    )
    yield (
        "NONZERO_DENSE_PADDING",
        "padding-nan",
        DEV,
        True,
        dense_reply(with_entry(DEV_VALUES, 61, NAN)),
        ("DEV_PROFILE",),
    )
    yield "NON_FINITE_VALUE", "nan", PROD, True, sparse_reply([7, 1000, 129279], [HALF, QUARTER, NAN]), ()
    yield "NON_FINITE_VALUE", "plus-inf", PROD, True, sparse_reply([7, 1000, 129279], [HALF, POS_INF, QUARTER]), ()
    yield (
        "NON_FINITE_VALUE",
        "minus-inf-dense",
        DEV,
        True,
        dense_reply(with_entry(DEV_VALUES, 40, NEG_INF)),
        ("DEV_PROFILE",),
    )
    yield (
        "NON_FINITE_VALUE",
        "nan-after-negative",
        PROD,
        True,
        sparse_reply([7, 1000, 129279], [HALF, 0xBE800000, NAN]),
        (),
    )
    yield "NON_FINITE_VALUE", "temperature-nan", PROD, True, encode_frame(replace(STEP, temperature=NAN)), ()
    yield (
        "NEGATIVE_VALUE",
        "minus-quarter",
        PROD,
        True,
        sparse_reply([7, 1000, 129279], [HALF, 0xBE800000, QUARTER]),
        (),
    )
    yield (
        "NEGATIVE_VALUE",
        "negative-zero-sparse",
        PROD,
        True,
        sparse_reply([7, 1000, 5000], [HALF, HALF, NEG_ZERO]),
        ("NEGATIVE_ZERO",),
    )
    yield (
        "NEGATIVE_VALUE",
        "negative-zero-dense",
        DEV,
        True,
        dense_reply(with_entry(DEV_VALUES, 45, NEG_ZERO)),
        ("DEV_PROFILE", "NEGATIVE_ZERO"),
    )
    yield (
        "NEGATIVE_VALUE",
        "temperature-negative-zero",
        PROD,
        True,
        encode_frame(replace(STEP, temperature=NEG_ZERO)),
        ("NEGATIVE_ZERO",),
    )
    yield "NEGATIVE_VALUE", "temperature-zero", PROD, True, encode_frame(replace(STEP, temperature=0)), ()
    yield "NEGATIVE_VALUE", "temperature-minus-one", PROD, True, encode_frame(replace(STEP, temperature=0xBF800000)), ()
    yield (
        "NON_DYADIC_VALUE",
        "two-pow-minus-25",
        PROD,
        True,
        sparse_reply([7, 1000, 129279], [HALF, QUARTER, 0x33000000]),
        (),
    )
    yield (
        "NON_DYADIC_VALUE",
        "one-third",
        DEV,
        True,
        dense_reply(with_entry(DEV_VALUES, 59, 0x3EAAAAAB)),
        ("DEV_PROFILE",),
    )
    yield (
        "WRONG_TOTAL_MASS",
        "short-by-one",
        PROD,
        True,
        sparse_reply([7, 1000, 129279], [HALF, QUARTER, q_bits(M // 4 - 1)]),
        (),
    )
    yield (
        "WRONG_TOTAL_MASS",
        "over-by-one",
        PROD,
        True,
        sparse_reply([7, 1000, 129279], [HALF, QUARTER, q_bits(M // 4 + 1)]),
        (),
    )
    yield "WRONG_TOTAL_MASS", "single-q-two", PROD, True, sparse_reply([7], [0x40000000]), ()
    yield (
        "ZERO_Q_AT_TOKEN",
        "sparse-token-outside-support",
        PROD,
        True,
        sparse_reply([7, 1000, 129279], [HALF, QUARTER, QUARTER], token=8),
        (),
    )
    yield "ZERO_Q_AT_TOKEN", "dense-zero-count", DEV, True, dense_reply(DEV_VALUES, token=45), ("DEV_PROFILE",)
    yield (
        "Q_CHECKSUM_MISMATCH",
        "q-checksum-plus-one",
        PROD,
        True,
        encode_frame(replace(reply(), q_checksum=reply().q_checksum ^ 1)),
        (),
    )
    yield "UNKNOWN_STATUS", "status-2", PROD, True, encode_frame(replace(COMPLETION, status=2)), ()
    yield "POSITION_MISMATCH", "commit-accepted-6", PROD, True, encode_frame(replace(COMMIT, accepted=6)), ()
    yield "UNEXPECTED_MESSAGE", "hello-after-negotiation", PROD, True, encode_frame(PROD), ()


def crc_field(data: bytes) -> int:
    return struct.unpack_from("<I", data, layout.CHECKSUM_OFFSET)[0]


def class_cases() -> Iterator[Case]:
    for code, name, config, negotiated, data, extra in class_frames():
        flags = ("REASON_CLASS", *extra)
        yield case(f"{code.lower()}-{name}", f"{code}: {REASONS[code][1]}.", flags, config, data, negotiated, code)


# ---------------------------------------------------------------- systematic mutations


def header_mutation_cases() -> Iterator[Case]:
    """Every header field of every small valid frame, plus and minus one (checksum not resealed)."""
    for frame_name, config, negotiated, data in base_frames():
        for f in HEADER:
            fmt = "<I" if f.type == "u8[4]" else FIELD_TYPES[f.type][0]
            (value,) = struct.unpack_from(fmt, data, f.offset)
            for delta, sign in ((1, "plus"), (-1, "minus")):
                mutated = patched(data, f.offset, fmt, (value + delta) % (1 << (8 * f.size)), reseal=False)
                yield case(
                    f"{frame_name}-{f.name}-{sign}-1",
                    f"{frame_name}: header field {f.name} {sign} one.",
                    ("HEADER_OFF_BY_ONE",),
                    config,
                    mutated,
                    negotiated,
                )


def field_boundaries(data: bytes) -> list[int]:
    """Offsets where a field of the frame starts (header, fixed payload, REPLY tail), and the last byte."""
    message = layout.MESSAGES[struct.unpack_from("<H", data, 6)[0]]
    cuts = {f.offset for f in HEADER} | {HEADER_SIZE + f.offset for f in message.fields}
    if message is layout.REPLY:
        tail = HEADER_SIZE + layout.REPLY.size
        entries = struct.unpack_from("<I", data, HEADER_SIZE + layout.REPLY.field("entry_count").offset)[0]
        cuts |= {tail, tail + 4 * entries} if tail + 4 * entries < len(data) else {tail}
    cuts.add(len(data) - 1)
    return sorted(cuts)


def truncation_cases() -> Iterator[Case]:
    for frame_name, config, negotiated, data in base_frames():
        for cut in field_boundaries(data):
            yield case(
                f"{frame_name}-cut-{cut}",
                f"{frame_name} cut to its first {cut} bytes.",
                ("TRUNCATION",),
                config,
                data[:cut],
                negotiated,
                "TRUNCATED",
            )


def bit_flip_cases() -> Iterator[Case]:
    """Each bit of STEP's checksum field, and one bit of every payload field of every small frame."""
    step = encode_frame(STEP)
    for bit in range(32):
        byte = layout.CHECKSUM_OFFSET + bit // 8
        flipped = bytearray(step)
        flipped[byte] ^= 1 << (bit % 8)
        yield case(
            f"step-checksum-bit-{bit}",
            f"STEP with checksum bit {bit} flipped.",
            ("BIT_FLIP",),
            PROD,
            bytes(flipped),
            want="CHECKSUM_MISMATCH",
        )
    for frame_name, config, negotiated, data in base_frames():
        message = layout.MESSAGES[struct.unpack_from("<H", data, 6)[0]]
        offsets = [HEADER_SIZE + f.offset for f in message.fields] + [len(data) - 1]
        for index, offset in enumerate(offsets):
            flipped = bytearray(data)
            flipped[offset] ^= 1 << (index % 8)
            yield case(
                f"{frame_name}-byte-{offset}-bit-{index % 8}",
                f"{frame_name} with bit {index % 8} of byte {offset} flipped.",
                ("BIT_FLIP",),
                config,
                bytes(flipped),
                negotiated,
                "CHECKSUM_MISMATCH",
            )


def check_order_cases() -> Iterator[Case]:
    """Every row of every check table alone, and every pair of rows that can fail together (wire_frame_faults)."""
    for c in order_cases():
        yield case(c.name, c.comment, ("CHECK_ORDER",), c.config, c.data, c.negotiated, c.want)


# ---------------------------------------------------------------- encoding


def encode_input(config: Hello, message: Message | V1Greedy, row: QRow | None = None) -> dict:
    """An ``encode`` case input: the message as the sender is given it (a REPLY: routing fields, token, q row)."""
    if isinstance(message, V1Greedy):
        obj: dict = {"type": layout.V1_GREEDY.name, "tokens": list(message.tokens)}
    elif isinstance(message, Reply):
        assert row is not None
        fields = fields_to_json(message)
        obj = {"type": layout.REPLY.name, **{name: fields[name] for name in REPLY_GIVEN}, "q": q_row_json(row)}
    else:
        obj = message_json(message, None)
    return {"hello": fields_to_json(config), "encode": obj}


def encode_case(name: str, comment: str, config: Hello, message: Message | V1Greedy, row: QRow | None = None) -> Case:
    """An encoding case; its frame is checked to decode, under ``config``, to the message it encodes."""
    case_input = encode_input(config, message, row)
    expected = solve(case_input)
    data = bytes(decode_blob(expected["frame"], "u8")[0])
    negotiated = not isinstance(message, Hello)
    back = solve(frame_input(config, negotiated, data))
    assert back["verdict"] == "accept", (name, back)
    if row is not None:
        assert back["message"]["q"] == q_row_json(row), name
    kind = layout.V1_GREEDY if isinstance(message, V1Greedy) else type(message).LAYOUT
    rules = ENCODING_RULES[kind.name]
    return Case(name=name, comment=comment, rules=rules, flags=("ENCODING",), input=case_input, expected=expected)


#: The rules whose layout each encoding case pins (the frame checksum of every v2 frame is R21).
ENCODING_RULES = {
    "HELLO": ("R13", "R21"),
    "HELLO_ANSWER": ("R13", "R21"),
    "STEP": ("R14", "R21"),
    "REPLY": ("R15", "R20", "R21"),
    "COMPLETION": ("R16", "R21"),
    "COMMIT": ("R17", "R21"),
    "RESET": ("R17", "R21"),
    "CANCEL": ("R17", "R21"),
    layout.V1_GREEDY.name: ("R12",),
}


#: Verified round outcomes (name, comment, anchor, accepted, emitted) whose COMMIT the target derives.
COMMIT_OUTCOMES: tuple[tuple[str, str, int, int, tuple[int, ...]], ...] = (
    ("correction", "x_1 accepted, x_2 rejected: the correction 42 is the token.", 4101, 1, (17, 42)),
    ("first-rejected", "x_1 rejected at once: accepted 0, the correction 9 is the token.", 4101, 0, (9,)),
    ("bonus", "All five drafts accepted and the bonus 77: six tokens emitted.", 4101, 5, (1, 2, 3, 4, 5, 77)),
    ("early-end", "A stop token at the second accepted draft ends emission: no token (-1).", 4101, 2, (17, 2)),
    (
        "wraps",
        "Anchored at 2^32 - 1, one draft and the correction: the position wraps to 1.",
        (1 << 32) - 1,
        1,
        (17, 42),
    ),
)


def commit_outcome_cases() -> Iterator[Case]:
    """A target's COMMIT from a verified round's outcome: the sender derives accepted, token and position."""
    for name, comment, anchor, accepted, emitted in COMMIT_OUTCOMES:
        obj = {
            "type": layout.COMMIT.name,
            **{key: value for key, value in message_json(COMMIT, None).items() if key in COMMIT_GIVEN},
            "outcome": {"anchor": anchor, "accepted": accepted, "emitted": list(emitted)},
        }
        case_input = {"hello": fields_to_json(PROD), "encode": obj}
        expected = solve(case_input)
        back = solve(frame_input(PROD, True, bytes(decode_blob(expected["frame"], "u8")[0])))
        assert back["verdict"] == "accept", (name, back)
        yield Case(
            name=f"commit_outcome_{name.replace('-', '_')}",
            comment=comment + " The target's sender derives accepted, token and new committed position.",
            rules=ENCODING_RULES["COMMIT"] + ("R16",),
            flags=("ENCODING",),
            input=case_input,
            expected=expected,
        )


def encoding_cases() -> Iterator[Case]:
    """A message of every type, REPLY rows dense (padded and not) and sparse, and v1 frames: the exact bytes."""
    yield encode_case("hello", "The production HELLO.", PROD, PROD)
    yield encode_case(
        "hello_answer", "An accepting HELLO_ANSWER.", PROD, HelloAnswer(SID, layout.HELLO_ACCEPTED, bytes(32))
    )
    yield encode_case("step", "A STEP asking for a top-32 sparse support.", PROD, STEP)
    yield encode_case("step_dense", "A STEP asking for dense rows.", PROD, DEV_STEP)
    yield encode_case("completion", "The COMPLETION of five REPLY frames.", PROD, COMPLETION)
    yield encode_case("commit", "A COMMIT of one accepted draft and its correction.", PROD, COMMIT)
    yield encode_case("commit_no_token", "A COMMIT with no token (-1).", PROD, replace(COMMIT, token=layout.NO_TOKEN))
    yield from commit_outcome_cases()
    yield encode_case("reset", "A RESET to a new generation.", PROD, RESET)
    yield encode_case("cancel", "A CANCEL of a slot's generation.", PROD, CANCEL)
    for name, comment, config, row, token in (
        ("reply_sparse", "A sparse row of three IDs.", PROD, SMALL_ROW, 7),
        ("reply_sparse_k32", "A sparse row of 32 IDs.", PROD, K32_ROW, 11),
        ("reply_sparse_one", "A sparse row of one ID with q = 1.", PROD, sparse_row(PROD.vocab, [129279], [M]), 129279),
        ("reply_sparse_wide", "A sparse row of 40 IDs, larger than the dense row.", WIDE, WIDE_ROW, 0),
        (
            "reply_dense_padded",
            "A dense row of 60 counts, padded with 4 zero entries to the stride 64 (R20).",
            DEV,
            DEV_DENSE_ROW,
            0,
        ),
        (
            "reply_dense_unpadded",
            "A dense row whose vocabulary is its stride: no padding.",
            example_config(vocab=64, max_support=16),
            QRow.dense([M // 2, 0, 1, M // 2 - 1] + [0] * 60),
            3,
        ),
    ):
        message = reply(row, config, token=token)
        yield encode_case(
            name, comment + " The sender derives representation, entry count and checksum.", config, message, row
        )
    yield encode_case("v1_greedy", "A v1 greedy frame of three tokens.", PROD, V1Greedy((5, 6, 7)))
    yield encode_case("v1_greedy_empty", "A v1 greedy frame of no token.", PROD, V1Greedy(()))
    yield encode_case(
        "v1_greedy_max",
        f"A v1 greedy frame of {layout.V1_MAX_TOKENS} tokens, the most it carries.",
        PROD,
        V1Greedy(tuple(range(layout.V1_MAX_TOKENS))),
    )


def build() -> Iterator[Group]:
    yield Group(
        "valid_frames",
        "One valid frame per message type, and v1 greedy frames.",
        ("R12", "R13", "R14", "R15", "R16", "R17"),
        list(valid_cases()),
    )
    yield Group(
        "reason_classes", "At least one invalid frame per stateless reason class.", FAMILY_RULES, list(class_cases())
    )
    yield Group(
        "header_off_by_one",
        "Every header field of every small valid frame, plus and minus one.",
        ("R12", "R18", "R21"),
        list(header_mutation_cases()),
    )
    yield Group(
        "truncation", "Every small valid frame cut at every field boundary.", ("R18",), list(truncation_cases())
    )
    yield Group(
        "check_order",
        "Each row of each message's check table alone, and every pair of rows that can "
        "fail together: the earlier row is the reason.",
        FAMILY_RULES,
        list(check_order_cases()),
    )
    yield Group(
        "encoding",
        "A message of every type (a REPLY given its q row) and the exact frame bytes a sender writes.",
        ("R12", "R13", "R14", "R15", "R16", "R17", "R20", "R21"),
        list(encoding_cases()),
    )
    yield Group(
        "bit_flips",
        "Single bit flips in the checksum field and in every payload field.",
        ("R18", "R21"),
        list(bit_flip_cases()),
    )


# ---------------------------------------------------------------- schema


def scalar_schema(f: Field) -> dict:
    """The JSON Schema of one fixed field's encoding."""
    if f.type == "u64":
        return {"$ref": "#/$defs/u64"}
    if f.type == "f32":
        return {"$ref": "#/$defs/f32"}
    if f.type == "char[32]":
        # the bytes before the first NUL, one character per byte (messages.ascii_text)
        return {"type": "string", "maxLength": 32, "pattern": "^[\u0001-\u00ff]*$"}
    if f.type == "u8[32]":
        return {"type": "string", "pattern": DIGEST_PATTERN}
    if f.type == "i32":
        return {"type": "integer", "minimum": -(1 << 31), "maximum": (1 << 31) - 1}
    return {"type": "integer", "minimum": 0, "maximum": (1 << (8 * f.size)) - 1}


def fields_schema(fields: tuple[Field, ...]) -> dict:
    return {f.name: scalar_schema(f) for f in fields}


def message_schema(message: layout.MessageLayout) -> dict:
    properties = {"type": {"const": message.name}, **fields_schema(message.fields)}
    if message is layout.REPLY:
        properties["q"] = {"$ref": "#/$defs/qRow"}
    return closed(properties)


HELLO_SCHEMA = closed(fields_schema(layout.HELLO.fields))
REASON_SCHEMA = {"enum": sorted(REASONS)}

V1_SCHEMA = closed(
    {
        "type": {"const": layout.V1_GREEDY.name},
        "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    }
)
#: What a sender is given: every fixed field, but a REPLY's routing fields, token and q row only.
REPLY_GIVEN_SCHEMA = closed(
    {
        "type": {"const": layout.REPLY.name},
        **fields_schema(tuple(f for f in layout.REPLY.fields if f.name in REPLY_GIVEN)),
        "q": {"$ref": "#/$defs/qRow"},
    }
)
#: A COMMIT in ``outcome`` form: its routing fields and the verified round's outcome.
COMMIT_OUTCOME_SCHEMA = closed(
    {
        "type": {"const": layout.COMMIT.name},
        **fields_schema(tuple(f for f in layout.COMMIT.fields if f.name in COMMIT_GIVEN)),
        "outcome": closed(
            {
                "anchor": {"type": "integer", "minimum": 0, "maximum": 0xFFFFFFFF},
                "accepted": {"type": "integer", "minimum": 0},
                "emitted": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
            }
        ),
    }
)
ENCODE_SCHEMA = {
    "oneOf": [message_schema(m) for m in layout.MESSAGES.values() if m is not layout.REPLY]
    + [REPLY_GIVEN_SCHEMA, COMMIT_OUTCOME_SCHEMA, V1_SCHEMA]
}

INPUT_SCHEMA = {
    "$defs": {"helloParams": HELLO_SCHEMA},
    "oneOf": [
        closed(
            {"hello": {"$ref": "#/$defs/helloParams"}, "negotiated": {"type": "boolean"}, "frame": blob_schema("u8")}
        ),
        closed({"hello": {"$ref": "#/$defs/helloParams"}, "encode": ENCODE_SCHEMA}),
    ],
}

EXPECTED_SCHEMA = {
    "oneOf": [
        closed(
            {
                "verdict": {"const": "accept"},
                "message": {"oneOf": [message_schema(m) for m in layout.MESSAGES.values()] + [V1_SCHEMA]},
            }
        ),
        closed({"verdict": {"const": "reject"}, "reason": REASON_SCHEMA}),
        closed({"frame": blob_schema("u8")}),
    ]
}

FAMILY = Family(
    name="wire_frames",
    description="Single wire v2 frames under a negotiated HELLO: the decoded message, or the reason code of "
    "the first failing check (docs/wire-v2.md); and the exact frame a sender writes for a message.",
    rules=FAMILY_RULES,
    notes=NOTES,
    build=build,
    input_schema=INPUT_SCHEMA,
    expected_schema=EXPECTED_SCHEMA,
    solve=solve,
    comparator="wire",
)
