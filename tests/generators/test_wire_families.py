"""The wire vector families: every reason code is pinned by at least one vector (R12-R28)."""

from __future__ import annotations

import json

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.spec.wire.reasons import REASONS

pytestmark = pytest.mark.rules("R12", "R16", "R18", "R19", "R20", "R24", "R25", "R27", "R28")

#: Reasons only a sequence of events can reach (they need session state).
STATEFUL = {
    "STALE_GENERATION",
    "DUPLICATE_GENERATION",
    "STALE_ROUND",
    "DUPLICATE_ROUND",
    "LATE_REPLY",
    "RETRY_MISMATCH",
    "CONSUMED_BEFORE_COMPLETION",
    "CONTEXT_MISMATCH",
    "REPLY_SIZE_MISMATCH",
    "COMPLETION_CHECKSUM_MISMATCH",
    "REPRESENTATION_MISMATCH",
    "SLOT_EXHAUSTED",
}

#: Reasons only the worker's session state reaches (docs/wire-v2.md, Worker state machine); the
#: worker_sessions family pins them (tests/spec/test_worker_sessions_family.py).
WORKER_STATEFUL = {"SLOT_HELD"}


def cases(family: str) -> list[dict]:
    path = default_vectors_dir() / f"{family}.json"
    if not path.exists():
        pytest.skip(f"no committed {family} vectors")
    data = json.loads(path.read_text(encoding="utf-8"))
    return [case for group in data["testGroups"] for case in group["tests"]]


def test_frames_pin_every_stateless_reason():
    seen = {case["expected"].get("reason") for case in cases("wire_frames")}
    assert set(REASONS) - STATEFUL - WORKER_STATEFUL <= seen


def test_sessions_pin_every_stateful_reason():
    seen = {v.get("reason") for case in cases("wire_sessions") for v in case["expected"].get("verdicts", ())}
    assert STATEFUL <= seen


#: Every message type of wire v2, and the v1 greedy frame.
MESSAGE_TYPES = {
    "HELLO",
    "HELLO_ANSWER",
    "STEP",
    "REPLY",
    "COMPLETION",
    "COMMIT",
    "RESET",
    "CANCEL",
    "V1_GREEDY_TOKENS",
}


def test_frames_hold_valid_frames_of_every_message_type():
    accepted = {
        case["expected"]["message"]["type"]
        for case in cases("wire_frames")
        if case["expected"].get("verdict") == "accept"
    }
    assert accepted == MESSAGE_TYPES


def test_frames_pin_the_bytes_a_sender_writes_for_every_message_type():
    encoded = {case["input"]["encode"]["type"] for case in cases("wire_frames") if "encode" in case["input"]}
    assert encoded == MESSAGE_TYPES


def test_family_files_stay_small():
    for family in ("wire_frames", "wire_sessions"):
        assert (default_vectors_dir() / f"{family}.json").stat().st_size < 3_000_000
