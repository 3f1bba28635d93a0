"""The verifier endpoint's receiving role on a real TCP stream (R12, R16, R18, R24, R25).

Raw wire frames on a connection go through the receiver as on a production
link, with no answer; a header whose declared length fails the negotiated
bounds is refused at once (UNEXPECTED_SIZE) and the connection closed, without
waiting for, reading or allocating the payload (R18). A closed connection is a
Disconnect event that discards the open round (R25). The test-control commands
expose the state, the journal of what was consumed and discarded, and refuse
malformed requests with an error answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct

import pytest

from qconform.adapters.endpoint import control, layout, stream
from qconform.adapters.endpoint.answers import fields_json
from qconform.adapters.endpoint.codec import Decoder
from qconform.adapters.endpoint.deployment import hello_config
from qconform.adapters.endpoint.verifier import VerifierEndpoint
from qconform.generators.families.wire_frames import hello_from_json
from qconform.spec.constants import M
from qconform.spec.qrow import QRow
from qconform.spec.wire.codec import completion_for, encode_frame, reply_from_row
from qconform.spec.wire.messages import Commit, Reset, Step

pytestmark = pytest.mark.rules("R12", "R16", "R18", "R24", "R25", "R28")

CONFIG = hello_config(vocab=40, max_support=8)
HELLO = hello_from_json(fields_json(layout.HELLO, CONFIG))
SID = CONFIG["session_id"]
WAIT_S = 10.0


def round_frames(anchor: int = 100) -> tuple[list[bytes], list[bytes], bytes, bytes]:
    """(commands before, REPLY frames, COMPLETION, COMMIT) of one sparse round on slot 0."""
    step = Step(SID, 1, 1, anchor, 4, 1, 0x3F800000, 0, 5, bytes(32))
    replies = [
        encode_frame(
            reply_from_row(SID, 0, 1, 1, anchor + i, 3 + i, QRow.sparse(40, (3 + i, 20), (M // 2, M // 2)), 40)
        )
        for i in range(5)
    ]
    commit = encode_frame(Commit(SID, 1, 1, anchor + 3, 7, 0, 2))
    return (
        [encode_frame(HELLO), encode_frame(Reset(SID, 5, 1, anchor, 0)), encode_frame(step)],
        replies,
        encode_frame(completion_for(step, replies)),
        commit,
    )


async def ask(reader, writer, kind: int, body: bytes) -> dict:
    """The answer to one control envelope (a HELLO_ANSWER frame the endpoint sent meanwhile is passed over)."""
    await stream.send(writer, control.envelope(kind, body))
    while True:
        item = await asyncio.wait_for(stream.read_item(reader, Decoder(), CONFIG), WAIT_S)
        assert item is not None
        if not (item.kind == stream.FRAME and Decoder().decode(item.data, CONFIG).type == layout.HELLO_ANSWER):
            break
    assert item.kind == stream.ENVELOPE and item.envelope_kind == control.ANSWER
    return control.json_body(item.data)


async def hello_answer(reader) -> tuple[int, int, str]:
    """(session ID, status, reason) of the next frame, which must be a HELLO_ANSWER."""
    item = await asyncio.wait_for(stream.read_item(reader, Decoder(), CONFIG), WAIT_S)
    assert item is not None
    answer = Decoder().decode(item.data, CONFIG)
    assert answer.type == layout.HELLO_ANSWER
    return answer["session_id"], answer["status"], answer["reason"].rstrip(b"\0").decode("ascii")


def test_every_hello_gets_its_answer_on_the_stream():
    async def scenario(endpoint, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await stream.send(writer, encode_frame(dataclasses.replace(HELLO, vocab=41)))
        refused = await hello_answer(reader)
        await stream.send(writer, encode_frame(HELLO))
        accepted = await hello_answer(reader)
        await stream.send(writer, encode_frame(HELLO))
        again = await hello_answer(reader)
        writer.close()
        return refused, accepted, again

    refused, accepted, again = with_endpoint(scenario)
    assert refused == (SID, layout.HELLO_REFUSED, "VOCAB_MISMATCH")
    assert accepted == (SID, layout.HELLO_ACCEPTED, "")
    assert again == (SID, layout.HELLO_REFUSED, "UNEXPECTED_MESSAGE")


async def command(reader, writer, **request) -> dict:
    return await ask(reader, writer, control.COMMAND, control.json_bytes(request))


async def closed_by_peer(reader) -> bool:
    """Whether the endpoint closes the connection (EOF) within the wait, having sent nothing but HELLO answers."""
    data = await asyncio.wait_for(reader.read(), WAIT_S)
    size = layout.HEADER_SIZE + layout.SIZES[layout.HELLO_ANSWER]
    return len(data) % size == 0 and all(data[i + 6] == layout.HELLO_ANSWER for i in range(0, len(data), size))


def with_endpoint(scenario, mutant: str | None = None):
    async def main():
        endpoint = VerifierEndpoint(CONFIG, mutant=mutant)
        port = await endpoint.start()
        try:
            return await asyncio.wait_for(scenario(endpoint, port), 2 * WAIT_S)
        finally:
            await endpoint.close()

    return asyncio.run(main())


def test_raw_stream_round_is_consumed_and_journaled():
    async def scenario(endpoint, port):
        before, replies, completion, commit = round_frames()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await stream.send(writer, *before, *replies, completion, commit)
        state = await command(reader, writer, op="state")
        journal = await command(reader, writer, op="journal")
        writer.close()
        return state, journal

    state, journal = with_endpoint(scenario)
    assert state["counters"] == {"accepted": 10}
    assert state["final"]["slots"][0]["committed"] == 103
    consumed = [e for e in journal["journal"] if e["event"] == "consumed"]
    assert consumed == [
        {
            "event": "consumed",
            "slot": 0,
            "generation": 1,
            "round": 1,
            "anchor": 100,
            "rows": 5,
            "tokens": [3, 4, 5, 6, 7],
            "accepted": 2,
            "token": 7,
            "new_committed": 103,
            "completed": True,
        }
    ]


def test_oversized_header_is_refused_without_reading_the_payload():
    async def scenario(endpoint, port):
        before, replies, _, _ = round_frames()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        huge = bytearray(replies[2][: layout.HEADER_SIZE])
        struct.pack_into("<I", huge, 12, 0xFFFFFFFF)
        await stream.send(writer, *before, replies[0], replies[1], bytes(huge))
        closed = await closed_by_peer(reader)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return closed, await command(reader, writer, op="journal")

    closed, journal = with_endpoint(scenario)
    assert closed
    assert journal["counters"]["UNEXPECTED_SIZE"] == 1 and journal["counters"]["disconnects"] == 1
    discarded = [e for e in journal["journal"] if e["event"] == "discarded"]
    assert discarded == [
        {
            "event": "discarded",
            "slot": 0,
            "generation": 1,
            "round": 1,
            "anchor": 100,
            "rows": 2,
            "reason": "UNEXPECTED_SIZE",
        }
    ]


def test_copy_first_mutant_waits_for_the_oversized_payload():
    async def scenario(endpoint, port):
        before, replies, _, _ = round_frames()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        huge = bytearray(replies[0][: layout.HEADER_SIZE])
        struct.pack_into("<I", huge, 12, 0xFFFFFFFF)
        await stream.send(writer, *before, bytes(huge))
        try:
            await asyncio.wait_for(reader.read(), 0.5)
        except asyncio.TimeoutError:
            return "still reading"
        return "closed"

    assert with_endpoint(scenario, mutant="bounds-after-copy") == "still reading"


def test_garbage_magic_closes_the_stream_and_discards():
    async def scenario(endpoint, port):
        before, replies, _, _ = round_frames()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await stream.send(writer, *before, replies[0], b"GET / HTTP/1.1\r\n\r\n")
        closed = await closed_by_peer(reader)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return closed, await command(reader, writer, op="state")

    closed, state = with_endpoint(scenario)
    assert closed
    assert state["counters"]["BAD_MAGIC"] == 1 and state["counters"]["discarded_proposals"] == 1
    assert state["final"]["negotiated"] is False and state["final"]["slots"][0]["open"] is None


def test_disconnect_mid_round_then_status_and_resume():
    async def scenario(endpoint, port):
        before, replies, completion, _ = round_frames()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await stream.send(writer, *before, replies[0], replies[1])
        await command(reader, writer, op="state")
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        status = await command(reader, writer, op="disconnect_status")
        late = await ask(reader, writer, control.APPLY, replies[2])
        hello = await ask(reader, writer, control.APPLY, before[0])
        stale = await ask(reader, writer, control.APPLY, replies[3])
        return status, late, hello, stale

    status, late, hello, stale = with_endpoint(scenario)
    assert status == {"verdict": "accept", "discarded": [0]}
    assert late["reason"] == "V2_BEFORE_HELLO" and late["allocated"] == 0
    assert hello["verdict"] == "accept"
    assert stale["reason"] == "LATE_REPLY" and stale["discarded"] == []


def test_control_refusals_are_answers_not_crashes():
    async def scenario(endpoint, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answers = [
            await ask(reader, writer, control.COMMAND, b"not json"),
            await command(reader, writer, op="launch"),
            await command(reader, writer, op="disconnect_status"),
            await command(reader, writer, op="configure", config={"vocab": 3}),
            await command(reader, writer, op="about"),
        ]
        return answers

    bad_json, unknown, no_disconnect, bad_config, about = with_endpoint(scenario)
    assert "not JSON" in bad_json["error"] and "unknown op" in unknown["error"]
    assert "no disconnect" in no_disconnect["error"] and "KeyError" in bad_config["error"]
    assert about == {
        "role": "verifier",
        "families": ["wire_frames", "wire_sessions"],
        "precision": {},
        "devices": ["cpu"],
        "mutant": None,
    }


def test_oversized_control_envelope_breaks_the_stream():
    async def scenario(endpoint, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await stream.send(writer, control.ENVELOPE.pack(control.MAGIC, control.COMMAND, 0, control.MAX_BODY + 1))
        return await closed_by_peer(reader)

    assert with_endpoint(scenario)


def test_a_receiver_keeps_the_disconnects_of_the_newest_connections_only(monkeypatch):
    """A served verifier's receiver records the verdict of each connection's disconnect for the newest
    ``control.ENDED_KEPT`` connections only, however many it served: a soak's target reconnects after
    every lost link, so one entry per connection ever opened would grow without bound. The verifier's
    ``disconnect_status`` names a forgotten one (docs/endpoint.md, "The control protocol")."""
    from qconform.adapters.endpoint import verifier as verifier_module
    from qconform.adapters.endpoint.receiver import Receiver

    monkeypatch.setattr(control, "ENDED_KEPT", 4)
    monkeypatch.setattr(verifier_module, "DISCONNECT_WAIT_S", 0.01)
    receiver = Receiver(CONFIG)
    for connection in range(1, 14):
        receiver.disconnect(connection)
    assert sorted(receiver.disconnects) == [10, 11, 12, 13]
    endpoint = VerifierEndpoint(CONFIG)
    newest = asyncio.run(endpoint.disconnect_of(13, receiver))
    assert newest is receiver.last_disconnect
    with pytest.raises(control.ControlError, match="connection 1 did not end, or ended before the newest 4"):
        asyncio.run(endpoint.disconnect_of(1, receiver))
