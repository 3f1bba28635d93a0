"""Issue #20's two breaches, replayed over real TCP against ``qconform endpoint worker`` and refused.

1. Nothing is served before the worker's HELLO is accepted (R12): with no answer
   (a command first, or nothing within the answer timeout), an answer whose
   checksum fails, one of unknown status (2), one for another session ID, the
   worker sends nothing more and closes the connection.
2. A generation belongs to the connection whose RESET opened it (R24, R28, R01):
   link A RESETs slot 0 to generation 5 (seed 111, token 3), is served, closes;
   link B's RESET to generation 5 (seed 222, token 9) is refused, its STEP
   round 2 gets a FAILED COMPLETION, not rows under A's seed and token; a third
   link's STEP on generation 5 with no RESET of its own is FAILED too; B's RESET
   to generation 6 opens the slot, and its rows are the spec's under B's seed
   and token, draw for draw.

Each test failed on the worker before the fix (it served in every case of 1, and
served B's and the third link's STEPs in 2). docs/wire-v2.md, "Worker state machine".
"""

from __future__ import annotations

import signal

import pytest

pytest.importorskip("torch")

from test_endpoint_cli import LISTENING, processes  # noqa: E402, F401 - ``processes`` is a fixture
from worker_wire import WorkerConnection, spec_failed, spec_served  # noqa: E402

from qconform.spec.wire import layout  # noqa: E402
from qconform.spec.wire.codec import encode_frame  # noqa: E402
from qconform.spec.wire.messages import Completion, Reply  # noqa: E402

pytestmark = pytest.mark.rules("R01", "R12", "R17", "R22", "R24", "R28")

ANSWER_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def worker_port():
    from test_endpoint_cli import Process

    process = Process(
        "worker", "--port", "0", "--vocab", "16", "--max-support", "4", "--answer-timeout", str(ANSWER_TIMEOUT_S)
    )
    try:
        yield int(process.wait_for(LISTENING).group(1))
        assert process.stop(signal.SIGTERM) == 0
    finally:
        process.kill()


def corrupt(frame: bytes) -> bytes:
    """The frame with one payload byte flipped: its checksum fails."""
    return frame[:-1] + bytes([frame[-1] ^ 0x01])


ANSWERS = {
    "a command first": lambda c: None,
    "bad checksum": lambda c: c.send(corrupt(encode_frame(answer_of(c)))),
    "status 2": lambda c: c.send(answer_of(c, status=2)),
    "another session": lambda c: c.send(answer_of(c, session_id=c.session ^ 1)),
}


def answer_of(connection: WorkerConnection, **changes):
    from dataclasses import replace

    from qconform.spec.wire.messages import HelloAnswer

    return replace(HelloAnswer(connection.session, layout.HELLO_ACCEPTED, bytes(32)), **changes)


@pytest.mark.parametrize("answer", list(ANSWERS))
def test_nothing_is_served_before_the_hello_is_accepted(worker_port, answer):
    connection = WorkerConnection(worker_port)
    try:
        ANSWERS[answer](connection)
        connection.reset(2, 1, seed=7)
        connection.step(2, 1, 1)
        frames, closed = connection.rest()
    finally:
        connection.close()
    assert frames == [] and closed, (answer, [type(m).__name__ for m in connection.decoded(frames)])


def test_no_answer_within_the_timeout_closes_the_connection(worker_port):
    connection = WorkerConnection(worker_port)
    try:
        connection.link.sock.settimeout(4 * ANSWER_TIMEOUT_S)
        import time

        time.sleep(ANSWER_TIMEOUT_S + 0.5)
        connection.send(b"")  # nothing: the worker's watchdog alone decides
        frames, closed = connection.rest()
        assert frames == [] and closed
    finally:
        connection.close()


def test_after_the_answer_the_worker_serves(worker_port):
    """The control: the same RESET and STEP after an accepting answer are served (5 REPLY, COMPLETION OK)."""
    connection = WorkerConnection(worker_port)
    try:
        connection.accept()
        connection.reset(1, 1, seed=7)
        connection.step(1, 1, 1)
        frames, verdict = connection.sync()
    finally:
        connection.close()
    messages = connection.decoded(frames)
    assert [type(m) for m in messages] == [Reply] * 5 + [Completion] and verdict == {"verdict": "accept"}
    assert messages[-1].status == layout.STATUS_OK


def test_a_generation_never_outlives_its_connection(worker_port):
    a = WorkerConnection(worker_port)
    a.accept()
    a.reset(0, 5, seed=111, token=3)
    a.step(0, 5, 1)
    served, _ = a.sync()
    assert len(served) == 6
    a.close()

    b = WorkerConnection(worker_port)
    try:
        b.accept()
        b.reset(0, 5, seed=222, token=9)
        step = b.step(0, 5, 2)
        # the frames first (the breach: rows under A's seed and token), then the verdicts
        assert b.link.read_frame() == spec_failed(b, step)
        b.link.frames = []
        c = WorkerConnection(worker_port)
        try:
            c.accept()
            stranger = c.step(0, 5, 3)
            assert c.link.read_frame() == spec_failed(c, stranger)
            assert c.sync() == ([], {"verdict": "reject", "reason": "STALE_GENERATION"})
        finally:
            c.close()
        b.reset(0, 5, seed=222, token=9)
        assert b.sync() == ([], {"verdict": "reject", "reason": "DUPLICATE_GENERATION"})
        b.reset(0, 6, seed=222, token=9)
        assert b.sync() == ([], {"verdict": "accept"})
        reopened = b.step(0, 6, 2)
        frames, verdict = b.sync()
        expected = spec_served(b, reopened, seed=222, token=9)
    finally:
        b.close()
    assert verdict == {"verdict": "accept"}
    assert tuple(frames) == expected  # B's seed and token, byte for byte; nothing of A's generation
