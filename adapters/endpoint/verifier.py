"""The verifier endpoint in its receiving role: every frame through the receiver state machine.

It listens on TCP and runs one receiver (mutants.py may swap in a seeded bug)
whose slots outlive connections and whose links do not: every frame is fed
under its connection's number, so each connection negotiates its own HELLO,
and a frame that cannot be attributed, or a connection that closes, touches
only that connection's rounds (a stranger cannot disturb the live link).
Raw wire frames on a connection are fed to the receiver as they come, with no
answer but a HELLO's HELLO_ANSWER, as on a production link; a header that leaves the stream out of step
is judged and the connection closed. A closed connection is a Disconnect event
of that connection: a reconnection resumes the slots after a RESET to a higher
generation (no key ever comes back).

With control allowed it answers the envelopes of ``control.py``: CHECK (the
stateless verdict on one frame, with the decoded message), APPLY (one frame
through the state machine: its verdict, the discarded slots and the payload
bytes the decoder allocated), and the commands ``about``, ``configure`` (a
fresh receiver under a HELLO-shaped configuration), ``encode`` (the frame this
endpoint sends for a message given as JSON, under a configuration), ``timeout`` (a slot's
watchdog), ``connection`` (this connection's number), ``disconnect_status``
(the verdict of connection N's disconnect once it ended; without N, of the last
disconnect once the other connections of this receiver ended), ``state``, ``journal`` (what was
consumed, committed and discarded: the newest entries) and, with a target attached, ``rounds``
(the kept round records, from a ``seq`` on: docs/endpoint.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from . import control, layout, stream
from .answers import counters_json, hello_fields, message_frame, message_json, state_json, verdict_json
from .blobs import blob
from .codec import Refusal
from .deployment import config_problem
from .mutants import receiver_class
from .receiver import Disposition, Receiver
from .server import Endpoint

if TYPE_CHECKING:  # the driving target needs torch, which the verifier alone does not
    from .target import Target

log = logging.getLogger("qconform.endpoint.verifier")

#: seconds ``disconnect_status`` waits for the other connections of the receiver to end
DISCONNECT_WAIT_S = 5.0


def describe(verdict: Disposition) -> str:
    text = verdict.kind + (f" {verdict.reason}" if verdict.reason else "")
    return text + (f", discarded slots {list(verdict.discarded)}" if verdict.discarded else "")


class VerifierEndpoint(Endpoint):
    """The receiving side on TCP (see the module docstring)."""

    role = "verifier"

    def __init__(self, config: dict, mutant: str | None = None, control_allowed: bool = True) -> None:
        super().__init__(control_allowed)
        self.mutant = mutant
        self.receiver: Receiver = receiver_class(mutant)(config)
        self.bound: dict[int, Receiver] = {}
        #: the active driver of rounds, when one is attached (target.py)
        self.target: Target | None = None

    async def serve(self, reader: stream.FrameReader, writer: stream.FrameWriter, number: int) -> None:
        self.bound[number] = self.receiver
        while True:
            receiver = self.bound[number]
            item = await stream.read_item(reader, receiver.decoder, receiver.link(number), self.control_allowed)
            if item is None:
                return
            if item.kind == stream.ENVELOPE:
                await stream.send(writer, await self.answer(item, number))
                continue
            verdict = receiver.feed(item.data, number)
            log.info("conn %d: %d-byte frame: %s", number, len(item.data), describe(verdict))
            if verdict.answer is not None:  # a HELLO is answered: accepted, or refused with its reason
                await stream.send(writer, verdict.answer)
            if item.kind == stream.BROKEN:
                log.warning("conn %d: the stream is out of step after %s; closing", number, verdict.reason)
                return

    def closed(self, number: int) -> None:
        receiver = self.bound.pop(number, None)
        if receiver is not None:
            log.info("conn %d: disconnect: %s", number, describe(receiver.disconnect(number)))

    def frame_envelope(self, item: stream.Item, number: int) -> dict:
        receiver = self.bound[number]
        if item.envelope_kind == control.APPLY:
            verdict = receiver.feed(item.data, number)
            log.info("conn %d: applied %d-byte frame: %s", number, len(item.data), describe(verdict))
            return {**verdict_json(verdict), "allocated": verdict.allocated}
        try:
            message, row = receiver.check(item.data, number)
            if message.type == layout.HELLO and receiver.link(number) is not None:
                raise Refusal("UNEXPECTED_MESSAGE", "a second HELLO")
            out = {"verdict": "accept", "message": message_json(message, row)}
        except Refusal as refusal:
            out = {"verdict": "reject", "reason": refusal.code}
        return {**out, "allocated": receiver.decoder.allocated}

    def about(self) -> dict:
        return {
            "role": self.role,
            "families": ["wire_frames", "wire_sessions"],
            "precision": {},
            "devices": ["cpu"],
            "mutant": self.mutant,
        }

    async def command(self, request: dict, number: int) -> dict:
        op = request.get("op")
        receiver = self.bound[number]
        if op == "configure":
            config = hello_fields(request["config"])
            problem = config_problem(config)
            if problem is not None:  # the receiver does not start under it (docs/formats/wire_sessions.md)
                return {"refused": "BAD_SHAPE", "detail": problem}
            self.receiver = receiver_class(self.mutant)(config)
            self.bound[number] = self.receiver
            return {"ok": True}
        if op == "encode":
            return {"frame": blob("u8", list(message_frame(hello_fields(request["config"]), request["message"])))}
        if op == "timeout":
            verdict = receiver.timeout(int(request["slot"]))
            log.info("conn %d: slot %s watchdog: %s", number, request["slot"], describe(verdict))
            return verdict_json(verdict)
        if op == "connection":
            return {"connection": number}
        if op == "disconnect_status" and "connection" in request:
            return verdict_json(await self.disconnect_of(int(request["connection"]), receiver))
        if op == "disconnect_status":
            await self.others_ended(number, receiver)
            if receiver.last_disconnect is None:
                raise control.ControlError("no disconnect happened")
            return verdict_json(receiver.last_disconnect)
        if op == "state":
            return {"final": state_json(receiver, number), "counters": counters_json(receiver)}
        if op == "journal":
            return {"journal": list(receiver.journal), "counters": counters_json(receiver)}
        if op == "rounds" and self.target is not None:
            first, limit = request.get("from"), request.get("limit")
            if not all(v is None or (isinstance(v, int) and v >= 0) for v in (first, limit)):
                raise control.ControlError("rounds: from and limit are counts (integers >= 0)")
            oldest, records = self.target.rounds_from(first, limit)
            return {
                "rounds": [record.to_json() for record in records],
                "first": oldest,
                "next": records[-1].seq + 1 if records else min(max(first or 0, oldest), self.target.opened),
                "opened": self.target.opened,
            }
        raise control.ControlError(f"unknown op {op!r}")

    async def disconnect_of(self, other: int, receiver: Receiver) -> Disposition:
        """The verdict of connection ``other``'s disconnect, once it ended."""
        deadline = time.monotonic() + DISCONNECT_WAIT_S
        while other not in receiver.disconnects and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        if other not in receiver.disconnects:
            raise control.ControlError(control.forgotten(other))
        return receiver.disconnects[other]

    async def others_ended(self, number: int, receiver: Receiver) -> None:
        deadline = time.monotonic() + DISCONNECT_WAIT_S
        while any(r is receiver and n != number for n, r in self.bound.items()) and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
