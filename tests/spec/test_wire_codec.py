"""Wire v2 encode/decode and stateless validation (R03, R12-R20, R27)."""

from __future__ import annotations

import dataclasses
import math
import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.constants import M
from qconform.spec.qrow import QRow
from qconform.spec.wire import layout
from qconform.spec.wire.checks import q_value_class
from qconform.spec.wire.checksum import crc32c
from qconform.spec.wire.codec import completion_for, decode_frame, encode_frame, encode_v1, reply_from_row
from qconform.spec.wire.header import seal
from qconform.spec.wire.messages import MESSAGE_CLASSES, Hello, Message, Reply, Step, V1Greedy, reply_tail
from qconform.spec.wire.negotiation import check_hello, example_config
from qconform.spec.wire.reasons import REASONS, WireReject
from qconform.spec.wire.receiver import check_frame
from qconform.spec.wire.validation import validate_message, validate_reply

pytestmark = pytest.mark.rules("R03", "R12", "R13", "R14", "R15", "R16", "R17", "R18", "R19", "R20")

PROD = example_config()
DEV = example_config(vocab=40, dense_stride=48, max_support=12)

WIDTH = {"u16": 16, "u32": 32, "u64": 64, "f32": 32}


def field_values(f: layout.Field):
    if f.type in WIDTH:
        return st.integers(0, (1 << WIDTH[f.type]) - 1)
    if f.type == "i32":
        return st.integers(-(1 << 31), (1 << 31) - 1)
    return st.binary(min_size=32, max_size=32)


@st.composite
def fixed_messages(draw):
    """Any message of a fixed-size type, with arbitrary field values (no validation implied)."""
    code = draw(st.sampled_from([c for c in MESSAGE_CLASSES if c != layout.REPLY.code]))
    cls = MESSAGE_CLASSES[code]
    return cls(**{f.name: draw(field_values(f)) for f in cls.LAYOUT.fields})


def rejected(data: bytes, params: Hello | None) -> str:
    with pytest.raises(WireReject) as info:
        decode_frame(data, params)
    return info.value.code


@given(fixed_messages())
@settings(max_examples=120, deadline=None)
def test_fixed_messages_round_trip(message):
    data = encode_frame(message)
    assert len(data) == layout.HEADER_SIZE + type(message).LAYOUT.size
    magic, version, code, header_length, payload_length, checksum = struct.unpack_from("<4sHHIII", data)
    assert (magic, version, code, header_length) == (b"QSMP", 2, type(message).LAYOUT.code, 20)
    assert payload_length == len(data) - 20 and checksum == crc32c(data[:16] + data[20:])
    assert decode_frame(data, PROD) == message


@st.composite
def q_rows(draw, vocab: int, max_support: int | None):
    """A valid q row: sparse (strictly ascending IDs, positive counts) or dense, summing to M."""
    k = draw(st.integers(1, min(max_support or vocab, 24)))
    ids = sorted(draw(st.sets(st.integers(0, vocab - 1), min_size=k, max_size=k)))
    cuts = sorted(draw(st.lists(st.integers(1, M - 1), min_size=k - 1, max_size=k - 1, unique=True)))
    counts = [b - a for a, b in zip([0, *cuts], [*cuts, M])]
    if max_support is None:
        dense = [0] * vocab
        for token, count in zip(ids, counts):
            dense[token] = count
        return QRow.dense(dense)
    return QRow.sparse(vocab, ids, counts)


@given(st.data())
@settings(max_examples=50, deadline=None)
def test_reply_round_trip_recovers_exact_counts(data):
    config = data.draw(st.sampled_from([PROD, DEV]))
    sparse = config is PROD or data.draw(st.booleans())
    row = data.draw(q_rows(config.vocab, config.max_support if sparse else None))
    token = data.draw(st.sampled_from([v for v, _ in row.support()]))
    reply = reply_from_row(config.session_id, 1, 2, 3, 4, token, row, config.dense_stride)
    frame = encode_frame(reply)
    entries = len(row.counts) if sparse else config.dense_stride
    assert len(frame) == 20 + 36 + (8 if sparse else 4) * entries
    decoded = decode_frame(frame, config)
    assert decoded == reply and isinstance(decoded, Reply)
    # independent: each FP32 value read by the struct module is exactly count / M
    floats = struct.unpack_from(f"<{len(reply.values)}f", frame, 20 + 36 + 4 * len(reply.ids))
    assert [Fraction(x) * M for x in floats[: len(row.counts)]] == list(row.counts)
    assert all(x == 0 and math.copysign(1, x) > 0 for x in floats[len(row.counts) :])  # padding: +0.0 bytes
    assert validate_reply(decoded, config) == row


@given(st.one_of(st.integers(0, (1 << 32) - 1), st.just(0x80000000)))
@settings(max_examples=200, deadline=None)
def test_q_value_class_matches_float_reading(bits):
    (x,) = struct.unpack("<f", struct.pack("<I", bits))
    if math.isnan(x) or math.isinf(x):
        want = "NON_FINITE_VALUE"
    elif math.copysign(1, x) < 0:  # -0.0 included: a zero count is sent only as +0.0
        want = "NEGATIVE_VALUE"
    elif (Fraction(x) * M).denominator != 1:
        want = "NON_DYADIC_VALUE"
    else:
        want = None
    assert q_value_class(bits) == want


def test_payload_length_is_bounded_before_the_payload_is_read():
    step = encode_frame(Step(PROD.session_id, 1, 1, 0, 4, 0, 0x3F800000, 0, 5, bytes(32)))
    reply = encode_frame(reply_from_row(PROD.session_id, 0, 1, 1, 0, 5, QRow.sparse(PROD.vocab, [5], [M]), 0))
    for declared in (67, 69, 0, 0xFFFFFFFF):
        assert rejected(step[:12] + struct.pack("<I", declared) + step[16:20], PROD) == "UNEXPECTED_SIZE"
    largest = 36 + 4 * PROD.dense_stride
    assert rejected(reply[:12] + struct.pack("<I", largest + 1) + reply[16:], PROD) == "UNEXPECTED_SIZE"
    assert rejected(reply[:12] + struct.pack("<I", largest) + reply[16:], PROD) == "TRUNCATED"
    assert rejected(reply[:12] + struct.pack("<I", 35) + reply[16:], PROD) == "UNEXPECTED_SIZE"


@given(
    st.sampled_from(sorted(set(MESSAGE_CLASSES) - {layout.HELLO.code})),
    st.integers(0, (1 << 32) - 1),
    st.binary(max_size=64),
)
@settings(max_examples=100, deadline=None)
def test_v2_before_hello_precedes_every_payload_check(code, declared, rest):
    header = struct.pack("<4sHHIII", b"QSMP", 2, code, 20, declared, 0)
    assert rejected(header + rest, None) == "V2_BEFORE_HELLO"


@given(st.lists(st.integers(0, (1 << 31) - 1), max_size=64), st.booleans())
@settings(max_examples=60, deadline=None)
def test_v1_frames_stay_v1(tokens, negotiated):
    message, row = check_frame(encode_v1(tokens), PROD, PROD if negotiated else None)
    assert message == V1Greedy(tuple(tokens)) and row is None


def test_hello_negotiation_checks_each_identity_and_bound():
    assert check_hello(PROD, PROD) == PROD
    lowered = dataclasses.replace(PROD, max_support=32, max_slots=1, max_requests=1, max_reply_bytes=292)
    assert check_hello(lowered, PROD) == lowered
    expectations = {
        "semantic_id": "SEMANTIC_ID_MISMATCH",
        "verifier_id": "VERIFIER_MISMATCH",
        "rng_abi_id": "RNG_ABI_MISMATCH",
        "id_map_hash": "ID_MAP_MISMATCH",
        "draft_identity": "IDENTITY_MISMATCH",
        "target_identity": "IDENTITY_MISMATCH",
    }
    for name, code in expectations.items():
        with pytest.raises(WireReject) as info:
            check_hello(dataclasses.replace(PROD, **{name: bytes(32)}), PROD)
        assert info.value.code == code
    for name, value, code in (
        ("vocab", 129281, "VOCAB_MISMATCH"),
        ("depth", 4, "DEPTH_MISMATCH"),
        ("max_requests", 5, "TOO_MANY_REQUESTS"),
        ("max_slots", 0, "TOO_MANY_SLOTS"),
        ("precision", 2, "PRECISION_MISMATCH"),
        ("draft_adapted", 1, "IDENTITY_MISMATCH"),
        ("max_support", 257, "SUPPORT_ABOVE_MAX"),
        ("wire_version", 1, "UNKNOWN_VERSION"),
    ):
        with pytest.raises(WireReject) as info:
            check_hello(dataclasses.replace(PROD, **{name: value}), PROD)
        assert info.value.code == code, name


def sparse_frame(ids, values, token=5, config=PROD) -> bytes:
    reply = Reply(config.session_id, 1, 1, 0, token, len(ids), 0, 0, layout.REPR_SPARSE, tuple(ids), tuple(values))
    return encode_frame(dataclasses.replace(reply, q_checksum=crc32c(reply_tail(reply))))


def decoded_v2(data: bytes, config: Hello) -> Message:
    """decode_frame() of a frame the test built as a v2 message (never a v1 greedy frame)."""
    message = decode_frame(data, config)
    assert not isinstance(message, V1Greedy)
    return message


def reason(data: bytes, config: Hello = PROD) -> str:
    with pytest.raises(WireReject) as info:
        validate_message(decoded_v2(data, config), config)
    return info.value.code


HALF, QUARTER, NAN, NEG = 0x3F000000, 0x3E800000, 0x7FC00000, 0xBE800000


@given(st.permutations([0, 1, 2]))
@settings(max_examples=6, deadline=None)
def test_value_classes_do_not_depend_on_entry_order(order):
    values = [HALF, NEG, NAN]
    permuted = [values[i] for i in order]
    assert reason(sparse_frame([5, 6, 7], permuted)) == "NON_FINITE_VALUE"
    assert reason(sparse_frame([5, 6, 7], [HALF, NEG, 0x33000000][:2] + [0x33000000])) == "NEGATIVE_VALUE"


def test_sparse_support_precedence():
    assert reason(sparse_frame([5, 5, -1], [HALF, QUARTER, QUARTER])) == "SPARSE_ID_OUT_OF_RANGE"
    assert reason(sparse_frame([9, 5, 9], [HALF, QUARTER, QUARTER])) == "DUPLICATE_SPARSE_ID"
    assert reason(sparse_frame([9, 5, 7], [HALF, QUARTER, QUARTER])) == "UNSORTED_SUPPORT"
    assert reason(sparse_frame([5, 6, 7], [HALF, HALF, 0])) == "NONCANONICAL_SUPPORT"
    assert reason(sparse_frame([5, 6, 7], [HALF, QUARTER, 0x3E7FFFFC])) == "WRONG_TOTAL_MASS"
    assert reason(sparse_frame([5, 6, 7], [HALF, QUARTER, QUARTER], token=8)) == "ZERO_Q_AT_TOKEN"
    good = sparse_frame([5, 6, 7], [HALF, QUARTER, QUARTER])
    assert validate_message(decoded_v2(good, PROD), PROD) == QRow.sparse(
        PROD.vocab, [5, 6, 7], [M // 2, M // 4, M // 4]
    )
    corrupt = bytearray(good)
    corrupt[-1] ^= 1
    assert reason(seal(bytes(corrupt))) == "Q_CHECKSUM_MISMATCH"
    assert rejected(bytes(corrupt), PROD) == "CHECKSUM_MISMATCH"


def test_dense_padding_is_all_zero_bytes():
    row = QRow.dense([M] + [0] * (DEV.vocab - 1))
    reply = reply_from_row(DEV.session_id, 0, 1, 1, 0, 0, row, DEV.dense_stride)
    assert reply.values[DEV.vocab :] == (0,) * (DEV.dense_stride - DEV.vocab)
    for bits in (0x80000000, 1, NAN):
        values = list(reply.values)
        values[-1] = bits
        bad = dataclasses.replace(reply, values=tuple(values))
        bad = dataclasses.replace(bad, q_checksum=crc32c(reply_tail(bad)))
        assert reason(encode_frame(bad), DEV) == "NONZERO_DENSE_PADDING"


def test_completion_for_covers_the_reply_frames():
    step = Step(PROD.session_id, 1, 2, 10, 4, 3, 0x3F800000, 0, 5, bytes(range(32)))
    frames = [
        encode_frame(reply_from_row(PROD.session_id, 0, 1, 2, 10 + i, 5, QRow.sparse(PROD.vocab, [5], [M]), 0))
        for i in range(5)
    ]
    completion = completion_for(step, frames)
    assert completion.reply_bytes == sum(map(len, frames)) and completion.reply_checksum == crc32c(b"".join(frames))
    assert (completion.row_count, completion.anchor, completion.prefix_digest) == (5, 10, bytes(range(32)))
    assert validate_message(decoded_v2(encode_frame(completion), PROD), PROD) is None


def test_every_reason_has_a_rule():
    assert all(rule.startswith("R") for rule, _ in REASONS.values())
