"""Seeded bugs of the worker endpoint: each must be caught by the ``worker_sessions`` vectors (docs/endpoint.md).

``qconform endpoint worker --mutant NAME`` serves a worker with one bug:

* ``serves-before-acceptance``: the worker serves commands before its HELLO is
  accepted, and an answer it cannot trust (another session, unknown status, a
  refused frame) is logged and ignored rather than ending the connection (R12);
* ``keeps-generation-across-links``: a generation stays live when its
  connection ends and any connection may command it; a later RESET to a new
  generation is refused as held by nobody in particular (R24, R28);
* ``redraws-under-used-key``: a RESET to the slot's current generation is
  accepted, so the round IDs of that generation are served again under the
  same (seed, generation, round, position) keys (R24);
* ``retry-different-bytes``: an identical STEP retry is sampled again, its first
  row conditioned on the round's last draft (the slot's previous token moved on
  as the first serving drafted), instead of the frames already sent (R24);
* ``stale-committed-token``: a RESET with token -1 keeps the committed token the
  slot had (an earlier generation's), not the draft model's start token (R01);
* ``serves-unreset-slot``: a STEP is served on a slot this link never RESET
  (no live generation of its own), from the slot's state as it is (R17, R24).
"""

from __future__ import annotations

from . import layout
from .codec import Message
from .worker import ACCEPT, AWAITING_ANSWER, DUPLICATE, IGNORE, Link, OpenRound, Outcome, Worker, WorkerSlot


class EagerWorker(Worker):
    def decode(self, link: Link, data: layout.FrameBytes) -> Message:
        return self.decoder.decode(data, link.params)

    def feed(self, connection: int, data: layout.FrameBytes) -> Outcome:
        link = self.links.get(connection)
        outcome = super().feed(connection, data)
        if link is not None and outcome.close and outcome.verdict != ACCEPT:
            self.links[connection] = link  # the refusal is logged; the connection stays, still awaiting
            link.phase = AWAITING_ANSWER
            outcome = link.last = Outcome(outcome.verdict, outcome.reason, outcome.frames)
        return outcome

    def on_answer(self, link: Link, message: Message, data: layout.FrameBytes) -> Outcome:
        if message.type in self.HANDLERS:
            return self.route(link, message, data)
        return super().on_answer(link, message, data)

    def answer_timeout(self, connection: int) -> Outcome:
        return Outcome(IGNORE)  # no watchdog: it waits and serves


class LingeringWorker(Worker):
    def disconnect(self, connection: int) -> Outcome:
        if self.links.pop(connection, None) is None:
            return Outcome(IGNORE)
        self.counters["disconnects"] += 1
        return Outcome(ACCEPT)

    def live_on(self, slot: WorkerSlot) -> bool:
        return slot.live

    def reset_problem(self, slot: WorkerSlot, generation: int) -> str | None:
        problem = super().reset_problem(slot, generation)
        return None if problem == "SLOT_HELD" and generation > slot.generation else problem


class RedrawingWorker(Worker):
    def reset_problem(self, slot: WorkerSlot, generation: int) -> str | None:
        problem = super().reset_problem(slot, generation)
        return None if problem == "DUPLICATE_GENERATION" else problem


class RetryRedrawingWorker(Worker):
    def retried(self, step: Message, slot: WorkerSlot, current: OpenRound) -> Outcome:
        kept = slot.committed_token
        slot.committed_token = current.tokens[-1]
        try:
            frames, _, draws = self.sample(step, slot)
        finally:
            slot.committed_token = kept
        self.counters["duplicate_retries"] += 1
        return Outcome(DUPLICATE, None, frames, False, draws)


class StaleTokenWorker(Worker):
    def start_token(self, slot: WorkerSlot, token: int) -> int:
        return slot.committed_token if token == layout.NO_TOKEN else token


class UnresetSlotWorker(Worker):
    def live_on(self, slot: WorkerSlot) -> bool:
        return True

    def on_step(self, step: Message, data: layout.FrameBytes) -> Outcome:
        slot = self.slots[step["slot"]]
        if not (slot.live and slot.owner == self.connection):
            slot.generation = step["generation"]  # the STEP's generation taken as the slot's
        return super().on_step(step, data)


#: mutant name -> (worker class, the bug in one line)
WORKER_MUTANTS: dict[str, tuple[type[Worker], str]] = {
    "serves-before-acceptance": (EagerWorker, "commands are served before the HELLO is accepted"),
    "keeps-generation-across-links": (LingeringWorker, "a generation outlives its connection; any link commands it"),
    "redraws-under-used-key": (
        RedrawingWorker,
        "a RESET to the current generation is accepted: its keys are drawn again",
    ),
    "retry-different-bytes": (RetryRedrawingWorker, "an identical STEP retry is sampled again, not resent"),
    "stale-committed-token": (StaleTokenWorker, "a RESET with token -1 keeps the slot's earlier committed token"),
    "serves-unreset-slot": (UnresetSlotWorker, "a STEP on a slot this link never RESET is served"),
}


def worker_class(name: str | None) -> type[Worker]:
    """The worker of mutant ``name`` (None: the correct one)."""
    if name is None:
        return Worker
    if name not in WORKER_MUTANTS:
        raise KeyError(f"unknown worker mutant {name!r}; known: {', '.join(WORKER_MUTANTS)}")
    return WORKER_MUTANTS[name][0]
