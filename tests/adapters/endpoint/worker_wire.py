"""A harness-side view of one real TCP connection to a worker endpoint: its HELLO, frames out, frames and the
``sync`` verdict back. The frames are the spec's (``qconform.spec.wire``): a test may import the spec, a candidate not."""

from __future__ import annotations

from dataclasses import replace

from qconform.generators.encoding import decode_blob
from qconform.harness.transport.tcp_adapter import EndpointFailure, EndpointLink, LinkClosed
from qconform.spec.wire import layout
from qconform.spec.wire.codec import decode_frame, encode_frame
from qconform.spec.wire.messages import Hello, HelloAnswer, Reset, Step
from qconform.spec.wire.worker import (
    DraftModel,
    WorkerSlot,
    WorkerState,
    failed_completion,
    initial_state,
    round_frames,
    round_proposal,
)

ONE_F32 = 0x3F800000
#: seconds a test waits to see whether the worker sends anything more, or closes
QUIET_S = 2.0


class WorkerConnection:
    """One real connection: the worker's HELLO read at once; ``hello`` its decoded offer."""

    def __init__(self, port: int) -> None:
        self.link = EndpointLink("127.0.0.1", port)
        hello = decode_frame(self.link.read_frame(), None)
        assert isinstance(hello, Hello), hello  # a worker speaks first, with its HELLO
        self.hello = hello
        self.session = self.hello.session_id

    def send(self, *messages) -> None:
        """Send frames; once the worker has closed the connection the rest are not sent (a write then
        fails with a broken pipe, or not, depending on when the close reaches this side)."""
        for message in messages:
            try:
                self.link.send(message if isinstance(message, bytes) else encode_frame(message))
            except LinkClosed:
                return

    def accept(self, **changes) -> None:
        """Answer the HELLO (accepted, unless ``changes`` say otherwise)."""
        answer = HelloAnswer(self.session, layout.HELLO_ACCEPTED, bytes(32))
        self.send(replace(answer, **changes))

    def reset(self, slot: int, generation: int, seed: int, committed: int = 0, token: int = -1) -> Reset:
        message = Reset(self.session, seed, generation, committed, slot, token)
        self.send(message)
        return message

    def step(self, slot: int, generation: int, round_id: int, anchor: int = 0, policy: int = 0) -> Step:
        message = Step(
            self.session, generation, round_id, anchor, policy, 1, ONE_F32, slot, self.hello.depth, bytes(32)
        )
        self.send(message)
        return message

    def sync(self) -> tuple[list[bytes], dict | None]:
        """The frames the worker sent since the last sync and the verdict of the last frame it read;
        None for the verdict when the worker closed the connection instead."""
        try:
            answer = self.link.command("sync")
        except EndpointFailure as failure:
            if "closed" not in str(failure):
                raise
            answer = None
        frames, self.link.frames = self.link.frames, []
        #: the PROPOSAL draws of the last event (``sync`` reports them beside the verdict)
        self.draws = [] if answer is None else answer.pop("draws")
        return frames, answer

    def rest(self) -> tuple[list[bytes], bool]:
        """Every frame the worker sends within QUIET_S of silence, and whether it closed the connection."""
        self.link.sock.settimeout(QUIET_S)
        frames: list[bytes] = []
        try:
            while True:
                frames.append(self.link.read_frame())
        except EndpointFailure as failure:
            if "timed out" in str(failure):
                return frames, False
            return frames, True  # the worker closed (or reset) the connection

    def decoded(self, frames: list[bytes]) -> list:
        return [decode_frame(frame, self.hello) for frame in frames]

    def command(self, op: str, **args) -> dict:
        return self.link.command(op, **args)

    def close(self) -> None:
        self.link.close()


def spec_model(model: dict) -> DraftModel:
    """The spec's view of the draft model the worker's ``model`` op answers."""

    def rows(obj: dict) -> tuple[tuple[int, ...], ...]:
        flat, (count, width) = decode_blob(obj, "f32")
        return tuple(tuple(flat[r * width : (r + 1) * width]) for r in range(count))

    left, right = rows(model["markov"]["left"]), rows(model["markov"]["right"])
    return DraftModel(rows(model["base_logits"]), left, right, model["last_committed_token"])


def spec_state(connection: WorkerConnection) -> WorkerState:
    """The spec worker under this worker's HELLO (as offered on ``connection``) and draft model."""
    return initial_state(connection.hello, spec_model(connection.command("model")["model"]))


def spec_failed(connection: WorkerConnection, step: Step) -> bytes:
    """The spec worker's FAILED COMPLETION of a refused STEP (docs/wire-v2.md, "Worker state machine")."""
    return failed_completion(spec_state(connection), step)


def spec_served(connection: WorkerConnection, step: Step, seed: int, token: int) -> tuple[bytes, ...]:
    """The spec worker's frames of a STEP served on a slot RESET with ``seed`` and committed ``token``
    at the STEP's anchor: the rows drawn under the spec's keys, conditioned on that token (R01, R22)."""
    state = spec_state(connection)
    slot = WorkerSlot(token, step.generation, True, 0, seed, step.anchor)
    result, _ = round_proposal(state.model, slot, step)
    return round_frames(state.config, step, result)
