"""The reference endpoint's own codec and receiver, in-process: independent of the spec, and equal to it.

The endpoint is a candidate, so it must share no code with the spec: a scan of
its imports proves it never imports ``qconform.spec`` (nor the generators or the
harness). Its CRC-32C, decoder, q validation and state machine are then held to
the spec: every ``wire_frames`` and ``wire_sessions`` vector, property tests of
its frames against the spec's decoder and back, and the R18 allocation
accounting (a frame refused on its bounds costs no payload buffer).
"""

from __future__ import annotations

import ast
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from endpoint_vectors import cases, played_session, raw
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.adapters.endpoint import answers, layout
from qconform.adapters.endpoint.codec import Decoder, Message, Refusal, encode
from qconform.adapters.endpoint.crc32c import crc32c, crc32c_of_blocks, crc32c_update, shift_register
from qconform.adapters.endpoint.crc32c import raw as raw_register
from qconform.adapters.endpoint.deployment import hello_config
from qconform.adapters.endpoint.receiver import Receiver
from qconform.adapters.endpoint.replies import completion_frame, dense_tail, reply_frame, sparse_tail
from qconform.generators.families.wire_frames import fields_to_json, hello_from_json
from qconform.spec.constants import M
from qconform.spec.qrow import QRow
from qconform.spec.wire import checksum
from qconform.spec.wire.codec import encode_frame, reply_from_row
from qconform.spec.wire.header import seal
from qconform.spec.wire.messages import Completion, Reply
from qconform.spec.wire.negotiation import example_config
from qconform.spec.wire.receiver import check_frame

pytestmark = pytest.mark.rules("R03", "R12", "R15", "R16", "R18", "R19", "R20", "R21")

ENDPOINT_DIR = Path(__file__).resolve().parents[3] / "adapters" / "endpoint"
FORBIDDEN = ("qconform.spec", "qconform.generators", "qconform.harness")


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module or "")
    return names


def test_endpoint_never_imports_the_spec():
    files = sorted(ENDPOINT_DIR.glob("*.py"))
    assert len(files) >= 10
    for path in files:
        for name in imported_modules(path):
            assert not name.startswith(FORBIDDEN), f"{path.name} imports {name}"


def test_import_scan_sees_a_spec_import(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("import os\nfrom qconform.spec.wire import codec\n", encoding="utf-8")
    assert "qconform.spec.wire" in imported_modules(sneaky)


# -- CRC-32C --------------------------------------------------------------------------------


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 12288), st.integers(0, 255), st.integers(0, 5))
def test_crc32c_matches_the_spec_small_and_large(head, extra, fill, cut):
    data = head + bytes([fill]) * extra + head[::-1]
    assert crc32c(data) == checksum.crc32c(data)
    split = min(cut * 1000, len(data))
    assert crc32c(data[:split], memoryview(bytearray(data))[split:]) == checksum.crc32c(data)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=5))
def test_blocks_combine_from_their_raw_registers(blocks):
    """A CRC of consecutive blocks built from each block's raw register alone (R16, R21)."""
    whole = b"".join(blocks)
    assert crc32c_of_blocks([(len(b), raw_register(b)) for b in blocks]) == checksum.crc32c(whole)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, (1 << 32) - 1), st.integers(0, 1 << 20) | st.sampled_from([0, 1, 517120, 517140]))
def test_shifting_a_register_reads_no_byte_and_equals_feeding_zeros(register, n_bytes):
    """shift_n by the x^(8n) operator, never by a CRC pass over n zero bytes (one pass per side)."""
    register_after_zeros = checksum_zeros(register, n_bytes)
    assert shift_register(register, n_bytes) == register_after_zeros


def checksum_zeros(register: int, n_bytes: int) -> int:
    """The raw register after ``n_bytes`` zero bytes, by feeding them (the definition)."""
    return crc32c_update(register, bytes(n_bytes))


# -- every vector, in-process ------------------------------------------------------------------


def frame_answer(receiver: Receiver, data: bytes, negotiated: bool) -> dict:
    try:
        message, row = receiver.check(data)
    except Refusal as refusal:
        return {"verdict": "reject", "reason": refusal.code}
    if message.type == layout.HELLO and negotiated:
        return {"verdict": "reject", "reason": "UNEXPECTED_MESSAGE"}
    return {"verdict": "accept", "message": answers.message_json(message, row)}


def test_every_wire_frames_vector():
    for case in cases("wire_frames"):
        inp = case["input"]
        if "encode" in inp:  # the endpoint's own sender writes the same bytes
            sent = answers.message_frame(answers.hello_fields(inp["hello"]), inp["encode"])
            assert sent == raw(case["expected"]["frame"]), case["id"]
            continue
        receiver = Receiver(answers.hello_fields(inp["hello"]))
        receiver.negotiated = receiver.config if inp["negotiated"] else None
        assert frame_answer(receiver, raw(inp["frame"]), inp["negotiated"]) == case["expected"], case["id"]


def sent_frame(inp: dict) -> bytes | None:
    """The frame the endpoint's sender writes for an ``encode`` case input; None when it cannot."""
    try:
        return answers.message_frame(answers.hello_fields(inp["hello"]), inp["encode"])
    except (ValueError, struct.error):
        return None


def encoding_failures() -> list[str]:
    """The ``encoding`` cases of ``wire_frames`` whose bytes the endpoint's sender does not write."""
    return [
        case["id"]
        for case in cases("wire_frames")
        if "encode" in case["input"] and sent_frame(case["input"]) != raw(case["expected"]["frame"])
    ]


@pytest.mark.parametrize(
    ("bug", "caught"),
    [
        # a dense row sent without its zero padding up to the stride (R20)
        ("dense_tail", ("reply_dense_padded",)),
        # a v1 frame whose payload length leaves out the token count
        ("encode_v1", ("v1_greedy", "v1_greedy_empty", "v1_greedy_max")),
        # a target that names the last emitted token even after an early end (it must send -1)
        ("commit_token", ("commit_outcome_early_end",)),
        # a target that commits anchor + accepted + 1 whatever was emitted (the early end emits one fewer)
        ("commit_position", ("commit_outcome_early_end",)),
        # a target that forgets the 2^32 wrap of the committed position
        ("commit_wrap", ("commit_outcome_wraps",)),
    ],
)
def test_encoding_vectors_catch_a_seeded_sender_bug(monkeypatch, bug: str, caught: tuple[str, ...]):
    from qconform.adapters.endpoint import replies

    if bug == "dense_tail":
        monkeypatch.setattr(replies, "dense_tail", lambda counts, stride: replies.q_values(counts))
    elif bug.startswith("commit_"):
        right = answers.commit_fields

        def wrong(anchor: int, accepted: int, emitted: list[int]) -> tuple[int, int, int]:
            accepted, token, committed = right(anchor, accepted, emitted)
            if bug == "commit_token":
                token = emitted[-1]
            elif bug == "commit_position":
                committed = (anchor + accepted + 1) % layout.POSITIONS
            else:
                committed = anchor + len(emitted)
            return accepted, token, committed

        monkeypatch.setattr(answers, "commit_fields", wrong)
    else:

        def short_v1(tokens: list[int]) -> bytes:
            payload = struct.pack(f"<I{len(tokens)}i", len(tokens), *tokens)
            return layout.V1_HEADER.pack(layout.V1_MAGIC, 1, 1, len(payload) - 4) + payload

        monkeypatch.setattr(answers, "encode_v1", short_v1)
    assert encoding_failures() == [f"wire_frames/encoding/{name}" for name in caught]


def test_every_wire_sessions_vector():
    for case in cases("wire_sessions"):
        assert played_session(case) == case["expected"], case["id"]


# -- frames both ways -------------------------------------------------------------------------

DEV = example_config(vocab=40, dense_stride=48, max_support=12)
DEV_FIELDS = answers.hello_fields(fields_to_json(DEV))


@st.composite
def q_rows(draw, vocab: int = 40, max_support: int = 12):
    """A dyadic24 row (dense or sparse) and a token of positive count."""
    size = draw(st.integers(1, max_support))
    ids = sorted(draw(st.sets(st.integers(0, vocab - 1), min_size=size, max_size=size)))
    cuts = sorted(draw(st.sets(st.integers(1, M - 1), min_size=size - 1, max_size=size - 1)))
    counts = [b - a for a, b in zip([0, *cuts], [*cuts, M])]
    token = ids[draw(st.integers(0, size - 1))]
    if draw(st.booleans()):
        dense = [0] * vocab
        for i, c in zip(ids, counts):
            dense[i] = c
        return QRow.dense(dense), token
    return QRow.sparse(vocab, ids, counts), token


def step_message(policy: int) -> Message:
    fields = {
        "session_id": DEV.session_id,
        "generation": 3,
        "round": 9,
        "anchor": 4100,
        "support_policy": policy,
        "context_version": 2,
        "temperature": 0x3F800000,
        "slot": 1,
        "depth": 5,
        "prefix_digest": bytes(32),
    }
    return Message(layout.STEP, fields)


@settings(max_examples=30, deadline=None)
@given(q_rows(), st.integers(0, 4))
def test_endpoint_replies_are_the_spec_replies(row_and_token, index):
    row, token = row_and_token
    if row.ids is None:
        tail, entries, representation = dense_tail(np.array(row.counts), DEV.dense_stride), DEV.dense_stride, 1
    else:
        (tail, entries), representation = sparse_tail(np.array(row.ids), np.array(row.counts)), 2
    step = step_message(0 if row.ids is None else len(row.ids))
    sealed = reply_frame(step, index, token, tail, entries, representation)
    ours = sealed.data
    theirs = encode_frame(reply_from_row(DEV.session_id, 1, 3, 9, 4100 + index, token, row, DEV.dense_stride))
    assert ours == theirs
    message, spec_row = check_frame(ours, DEV, DEV)
    assert isinstance(message, Reply)
    assert spec_row == row and message.token == token
    receiver = Receiver(DEV_FIELDS)
    receiver.negotiated = DEV_FIELDS
    _, our_row = receiver.check(theirs)
    assert our_row is not None
    assert our_row.counts.tolist() == list(row.counts)
    completion = completion_frame(step, [sealed])
    spec_completion = check_frame(completion, DEV, DEV)[0]
    assert isinstance(spec_completion, Completion)
    assert spec_completion.reply_bytes == len(ours)


def test_hello_round_trip_and_negotiation():
    config = hello_config(vocab=64, max_support=16)
    assert answers.hello_fields(fields_to_json(hello_from_json(answers.fields_json(layout.HELLO, config)))) == config
    frame = encode(layout.HELLO, config)
    assert frame == encode_frame(hello_from_json(answers.fields_json(layout.HELLO, config)))
    receiver = Receiver(config)
    assert receiver.feed(frame).kind == "accept"
    wider = Receiver(config)
    assert wider.feed(encode(layout.HELLO, {**config, "max_slots": 5})).reason == "TOO_MANY_SLOTS"


# -- R18: bounds before the payload is allocated -----------------------------------------------------


def test_allocation_is_zero_for_frames_refused_on_their_bounds():
    receiver = Receiver(DEV_FIELDS)
    assert receiver.feed(encode(layout.HELLO, DEV_FIELDS)).kind == "accept"
    row = QRow.sparse(40, (1, 2), (M // 2, M // 2))
    good = encode_frame(reply_from_row(DEV.session_id, 1, 3, 9, 4100, 1, row, DEV.dense_stride))
    assert receiver.feed(good).allocated == len(good) - layout.HEADER_SIZE
    huge = seal(good[:12] + (0xFFFFFFFF).to_bytes(4, "little") + good[16:])
    verdict = receiver.feed(huge)
    assert (verdict.reason, verdict.allocated) == ("UNEXPECTED_SIZE", 0)
    short = receiver.feed(good[:-1])
    assert (short.reason, short.allocated) == ("TRUNCATED", 0)


def test_decoder_header_checks_need_no_payload():
    decoder = Decoder()
    frame = encode_frame(replace(DEV, max_support=4))
    start, length, limits, kind = decoder.header(memoryview(frame[: layout.HEADER_SIZE]), None)
    assert (start, length, kind) == (layout.HEADER_SIZE, len(frame) - layout.HEADER_SIZE, layout.HELLO)
    assert limits == (length, length)
    with pytest.raises(Refusal, match="BAD_MAGIC"):
        decoder.header(memoryview(b"GET / HTTP/1.1"), None)
