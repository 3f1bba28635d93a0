"""The worker endpoint: the drafter leader, serving proposals over wire v2 (R01, R15, R16, R22, R24).

It listens on TCP. On every connection it first sends its HELLO (the offer;
each connection is a new session), then serves the target's commands:

* RESET opens a slot's generation with an explicit seed and committed position;
* STEP samples the round's fixed-depth chain with the torch candidate under the
  RNG ABI (the worker leader owns the PROPOSAL draws, R22) and sends one REPLY
  per position, dense or sparse as the STEP's support policy asks, then the
  COMPLETION; a retried identical STEP gets the identical frames again (R24), a
  STEP it cannot serve gets a COMPLETION with status FAILED;
* COMMIT moves the committed position and the previous token (``x_0`` of the
  next round); CANCEL ends the generation.

Slot state outlives a connection (the next session resumes after a RESET).
With control allowed it also answers the test-control envelopes of
``control.py`` (``about``, ``configure``, ``model``, ``trace``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import numpy as np

from qconform.adapters.torch_candidate.errors import CandidateError
from qconform.adapters.torch_candidate.proposal import Proposal, propose

from . import control, layout, stream
from .answers import hello_fields
from .codec import Decoder, Message, Refusal, encode
from .model import DraftModel
from .replies import completion_frame, row_reply
from .server import Endpoint
from .validation import Validator

log = logging.getLogger("qconform.endpoint.worker")

#: the torch candidate's declared numerics (its precision profile)
PRECISION = {
    "fp64_allocation": True,
    "exp_ulp": "1/1048576",
    "notes": "torch candidate: FP64 allocation, FP64 exp rounded once to FP32",
}


@dataclass
class WorkerSlot:
    """The worker's view of one slot; ``cache`` holds the last round's STEP fields and frames."""

    generation: int = 0
    live: bool = False
    seed: int = 0
    committed: int = 0
    last_token: int = 0
    last_round: int | None = None
    cache: tuple[dict, list[bytes]] | None = None
    draws: list[dict] = field(default_factory=list)
    #: the draft tokens of the last round served
    tokens: list[int] = field(default_factory=list)


def f32_value(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def draws_json(result: Proposal) -> list[dict]:
    counters, u24 = result.counters[0].tolist(), result.u24[0].tolist()
    return [
        {"position": c[0], "counter": [f"0x{w & 0xFFFFFFFF:08x}" for w in c], "u24": u} for c, u in zip(counters, u24)
    ]


class WorkerEndpoint(Endpoint):
    """The drafter leader on TCP (see the module docstring)."""

    role = "worker"

    def __init__(self, hello: dict, model: DraftModel, control_allowed: bool = True, device: str = "cpu") -> None:
        super().__init__(control_allowed)
        self.hello = hello
        self.model = model
        self.device = device
        self.slots: dict[int, WorkerSlot] = {}

    # -- one connection --------------------------------------------------------------------

    async def serve(self, reader: stream.FrameReader, writer: stream.FrameWriter, number: int) -> None:
        params = {**self.hello, "session_id": (self.hello["session_id"] + number - 1) % (1 << 64)}
        await stream.send(writer, encode(layout.HELLO, params))
        log.info(
            "conn %d: sent HELLO session=%#x vocab=%d stride=%d max_support=%d",
            number,
            params["session_id"],
            params["vocab"],
            params["dense_stride"],
            params["max_support"],
        )
        decoder, validator = Decoder(), Validator()
        while True:
            item = await stream.read_item(reader, decoder, params, self.control_allowed)
            if item is None:
                return
            if item.kind == stream.BROKEN:
                log.warning("conn %d: unreadable bytes %r, closing", number, item.data[:24])
                return
            if item.kind == stream.ENVELOPE:
                await stream.send(writer, await self.answer(item, number))
                continue
            try:
                message = decoder.decode(item.data, params)
                if message.type == layout.HELLO_ANSWER:
                    validator.validate(message, params)
                    if message["status"] == layout.HELLO_REFUSED:
                        log.warning(
                            "conn %d: HELLO refused: %s; closing",
                            number,
                            message["reason"].rstrip(b"\0").decode("ascii", "replace"),
                        )
                        return
                    log.info("conn %d: HELLO accepted", number)
                    continue
                if message.type in (layout.STEP, layout.COMMIT, layout.RESET, layout.CANCEL):
                    validator.validate(message, params)
                else:
                    raise Refusal("UNEXPECTED_MESSAGE", f"{message.name} from the target")
            except Refusal as refusal:
                log.warning("conn %d: refused a frame: %s", number, refusal)
                continue
            frames = await self.on_command(message, number)
            if frames:
                await stream.send(writer, *frames)

    async def on_command(self, message: Message, number: int) -> list[bytes]:
        index = message["slot"]
        slot = self.slots.setdefault(index, WorkerSlot(last_token=self.model.last_token))
        if message.type == layout.RESET:
            if message["generation"] <= slot.generation:
                log.warning("conn %d: slot %d RESET to stale generation %d", number, index, message["generation"])
                return []
            keep = message["token"]  # the committed token the prefix ends with (R01, R22)
            if keep == layout.NO_TOKEN:  # an empty prefix: the model's initial token
                keep = slot.last_token if message["committed"] == slot.committed else self.model.last_token
            self.slots[index] = WorkerSlot(message["generation"], True, message["seed"], message["committed"], keep)
            log.info(
                "conn %d: slot %d RESET generation=%d committed=%d",
                number,
                index,
                message["generation"],
                message["committed"],
            )
        elif message.type == layout.CANCEL and message["generation"] == slot.generation:
            slot.live = False
            log.info("conn %d: slot %d CANCEL generation=%d", number, index, slot.generation)
        elif message.type == layout.COMMIT and slot.live and message["generation"] == slot.generation:
            token = message["token"]
            if token == layout.NO_TOKEN:  # an early end: the last accepted draft is the last committed token
                token = (
                    slot.tokens[message["accepted"] - 1]
                    if 0 < message["accepted"] <= len(slot.tokens)
                    else slot.last_token
                )
            slot.committed, slot.last_token = message["new_committed"], token
            log.info(
                "conn %d: slot %d COMMIT round=%d accepted=%d token=%d committed=%d",
                number,
                index,
                message["round"],
                message["accepted"],
                message["token"],
                slot.committed,
            )
        elif message.type == layout.STEP:
            return await self.on_step(message, slot, number)
        return []

    async def on_step(self, step: Message, slot: WorkerSlot, number: int) -> list[bytes]:
        index = step["slot"]
        if slot.cache is not None and slot.cache[0] == step.fields:
            log.info("conn %d: slot %d STEP round=%d retried: identical frames again", number, index, step["round"])
            return slot.cache[1]
        problem = self.step_problem(step, slot)
        if problem is None:
            try:
                frames, slot.draws = await asyncio.to_thread(self.sample, step, slot)
            except CandidateError as error:
                problem = f"sampling refused: {error}"
        if problem is not None:
            log.warning("conn %d: slot %d STEP round=%d failed: %s", number, index, step["round"], problem)
            return [completion_frame(step, [], layout.STATUS_FAILED)]
        slot.last_round, slot.cache = step["round"], (step.fields, frames)
        log.info(
            "conn %d: slot %d STEP generation=%d round=%d anchor=%d %s: sent %d REPLY + COMPLETION (%d bytes)",
            number,
            index,
            step["generation"],
            step["round"],
            step["anchor"],
            f"top-{step['support_policy']}" if step["support_policy"] else "dense",
            len(frames) - 1,
            sum(len(f) for f in frames),
        )
        return frames

    def step_problem(self, step: Message, slot: WorkerSlot) -> str | None:
        if not slot.live or step["generation"] != slot.generation:
            return f"generation {step['generation']} is not live"
        if slot.last_round is not None and step["round"] <= slot.last_round:
            return f"round {step['round']} is not above {slot.last_round}"
        if step["anchor"] != slot.committed:
            return f"anchor {step['anchor']} is not the committed position {slot.committed}"
        if step["depth"] != self.model.base_logits.shape[0] or self.hello["vocab"] != self.model.vocab:
            return "the draft model does not match the negotiated depth and vocabulary"
        return None

    def sample(self, step: Message, slot: WorkerSlot) -> tuple[list[bytes], list[dict]]:
        """The round's frames, sampled with the torch candidate, and its proposal draws."""
        model, policy = self.model, step["support_policy"]
        result = propose(
            [slot.seed],
            step["generation"],
            step["round"],
            step["anchor"],
            slot.last_token,
            model.base_logits[None].to(self.device),
            f32_value(step["temperature"]),
            (model.left, model.right),
            policy or None,
        )
        frames = []
        slot.tokens = result.tokens[0].tolist()
        for i, token in enumerate(slot.tokens):
            if result.sparse is None:
                assert result.counts is not None  # a dense proposal carries its counts
                counts, ids = result.counts[0, i].cpu().numpy(), None
            else:
                counts, ids = result.sparse.counts[0, i].cpu().numpy(), result.sparse.ids[0, i].cpu().numpy()
            frames.append(row_reply(step, i, token, counts, ids, self.hello["dense_stride"]))
        return [f.data for f in frames] + [completion_frame(step, frames)], draws_json(result)

    # -- test control ------------------------------------------------------------------------

    def about(self) -> dict:
        return {
            "role": self.role,
            "families": ["proposal_chain"],
            "precision": PRECISION,
            "devices": [self.device],
            "mutant": None,
        }

    async def command(self, request: dict, number: int) -> dict:
        op = request.get("op")
        if op == "configure":
            if "hello" in request:
                self.hello = hello_fields(request["hello"])
            if "model" in request:
                self.model = DraftModel.from_json(request["model"])
            self.slots.clear()
            log.info("configured: vocab=%d, model V=%d", self.hello["vocab"], self.model.vocab)
            return {"ok": True}
        if op == "model":
            return {"model": self.model.to_json()}
        if op == "trace":
            slot = self.slots.get(int(request.get("slot", 0)))
            return {"draws": [] if slot is None else slot.draws}
        raise control.ControlError(f"unknown op {op!r}")
