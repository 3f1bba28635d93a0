"""``qconform endpoint verifier`` over real TCP: keys never come back, strangers never touch the live link.

Issue #10 §1: the reconnection sequence (HELLO with 4 slots, RESET slot 3 to
generation 1, STEP round 0 at anchor 100, disconnect, HELLO with 1 slot,
disconnect, HELLO with 4 slots, the same RESET, STEP and an old REPLY) is
played against the endpoint process, each connection a real TCP connection
closed for real; every old key is refused. A stranger connection that sends
one bad-magic frame and closes changes nothing on the live link, whose round
then completes and commits. docs/wire-v2.md, "Keys are never accepted twice"
and "Connections".
"""

from __future__ import annotations

import signal
import socket
from dataclasses import replace

import pytest
from test_endpoint_cli import LISTENING, processes  # noqa: F401 - ``processes`` is a fixture

from qconform.adapters.endpoint import control
from qconform.generators.families.wire_frames import PROD
from qconform.generators.families.wire_sessions import Script
from qconform.harness.transport.tcp_adapter import EndpointLink
from qconform.spec.wire.codec import completion_for, encode_frame
from qconform.spec.wire.messages import Commit, Reset

pytestmark = pytest.mark.rules("R12", "R22", "R24", "R25", "R28")

SEED = 0x5EED


class Connection:
    """One real TCP connection to the endpoint; frames go in APPLY envelopes, so each gets its verdict."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.link = EndpointLink("127.0.0.1", port)
        self.number = self.link.command("connection")["connection"]

    def apply(self, frame: bytes) -> tuple[str, str | None, list[int]]:
        answer = self.link.request(control.APPLY, frame)
        return answer["verdict"], answer.get("reason"), answer["discarded"]

    def close(self) -> None:
        """Close for real, and wait (over another connection) until the endpoint saw the disconnect."""
        self.link.close()
        probe = EndpointLink("127.0.0.1", self.port)
        try:
            probe.command("disconnect_status", connection=self.number)
        finally:
            probe.close()


@pytest.fixture
def verifier(processes):  # noqa: F811 - the fixture of test_endpoint_cli
    process = processes("verifier", "--port", "0")
    port = int(process.wait_for(LISTENING).group(1))
    yield port
    assert process.stop(signal.SIGTERM) == 0


def hello(script: Script, **changes) -> bytes:
    return encode_frame(replace(script.config, session_id=script.session_id, **changes))


def test_a_reconnection_never_brings_back_an_old_key(verifier):
    s = Script(PROD)
    first = Connection(verifier)
    assert first.apply(hello(s))[0] == "accept"
    assert first.apply(encode_frame(Reset(s.session_id, SEED, 1, 100, 3)))[0] == "accept"
    round0 = s.step(3, 1, 0, 100, send=False)
    assert first.apply(encode_frame(round0))[0] == "accept"
    old_reply = s.reply_frame(round0, 0)
    first.close()

    shrunk = Connection(verifier)
    assert shrunk.apply(hello(s, max_slots=1))[0] == "accept"
    assert shrunk.apply(encode_frame(Reset(s.session_id, SEED, 1, 100, 3)))[1] == "TOO_MANY_SLOTS"
    shrunk.close()

    grown = Connection(verifier)
    assert grown.apply(hello(s))[0] == "accept"
    assert grown.apply(encode_frame(Reset(s.session_id, SEED, 1, 100, 3)))[1] == "DUPLICATE_GENERATION"
    assert grown.apply(encode_frame(round0))[1] == "STALE_GENERATION"
    assert grown.apply(old_reply)[1] == "LATE_REPLY"
    assert grown.apply(encode_frame(Reset(s.session_id, SEED, 2, 100, 3))) == ("accept", None, [])
    assert grown.apply(old_reply)[1] == "LATE_REPLY"
    fresh = s.step(3, 2, 0, 100, send=False)
    assert grown.apply(encode_frame(fresh))[0] == "accept"
    assert grown.apply(s.reply_frame(fresh, 0))[0] == "accept"
    grown.link.close()


def test_a_stranger_connection_cannot_touch_the_live_link(verifier):
    s = Script(PROD)
    live = Connection(verifier)
    assert live.apply(hello(s))[0] == "accept"
    assert live.apply(encode_frame(Reset(s.session_id, SEED, 1, 100, 0)))[0] == "accept"
    round1 = s.step(0, 1, 1, 100, send=False)
    assert live.apply(encode_frame(round1))[0] == "accept"
    frames = [s.reply_frame(round1, i) for i in range(5)]
    for frame in frames[:2]:
        assert live.apply(frame)[0] == "accept"

    stranger = socket.create_connection(("127.0.0.1", verifier), timeout=30)
    stranger.sendall(b"JUNK" + bytes(16))  # a raw frame, no HELLO: the endpoint judges it and closes
    assert stranger.recv(1) == b""  # closed by the endpoint: the stream is out of step
    stranger.close()

    for frame in frames[2:]:
        assert live.apply(frame) == ("accept", None, [])
    assert live.apply(encode_frame(completion_for(round1, frames)))[0] == "accept"
    commit = Commit(s.session_id, 1, 1, 103, 1, 0, 2)
    assert live.apply(encode_frame(commit)) == ("accept", None, [])
    state = live.link.command("state")
    assert state["final"]["negotiated"] is True
    assert state["final"]["slots"][0]["committed"] == 103
    assert state["counters"]["BAD_MAGIC"] == 1
    assert "discarded_proposals" not in state["counters"]
    live.link.close()
