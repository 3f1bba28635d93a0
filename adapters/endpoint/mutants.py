"""Seeded bugs of the verifier endpoint: each must be caught by the harness (docs/endpoint.md).

``qconform endpoint verifier --mutant NAME`` serves a receiver with one bug:

* ``accepts-unsorted-support``: sparse IDs are never checked for ascending order (R19);
* ``renormalizes-q``: a row whose counts do not sum to M is rescaled to M instead
  of refused: receiver-only renormalization (R02, R03);
* ``ignores-stale-generation``: a frame naming another generation than the
  slot's is taken as the slot's (R19, R28);
* ``consumes-before-completion``: a round is consumable once its K rows
  arrived, before its COMPLETION validated (R16, R28);
* ``bounds-after-copy``: the payload is copied (and, on a stream, read) before
  its declared length is checked against the negotiated bounds (R18); the
  copy shows in the per-frame allocation the endpoint reports;
* ``recreates-dropped-slots``: a HELLO with fewer slots drops the others, and a
  later one re-creates them at generation 0, so old keys come back (R24);
* ``discards-consumable``: a worker-side fault or the watchdog discards a round
  whose COMPLETION validated (R28);
* ``shares-the-link``: every connection is the same link, so a stranger's
  garbage or close discards the live link's rounds and forgets its HELLO.
"""

from __future__ import annotations

import numpy as np

from . import layout
from .codec import Decoder, Refusal
from .receiver import ACCEPT, Disposition, OpenRound, Receiver, Slot
from .validation import Validator, scaled


class UnsortedValidator(Validator):
    @staticmethod
    def check_order(ids: np.ndarray, route) -> None:
        return None


class RenormalizingValidator(Validator):
    #: the bug is in the NumPy path's last check, so this mutant validates rows there
    native = None

    def counts(self, values: np.ndarray, route) -> np.ndarray:
        count = scaled(values)
        total = float(count.sum())
        if total <= 0:
            raise Refusal("WRONG_TOTAL_MASS", "no mass to renormalize", route)
        counts = np.floor(count * layout.M / total).astype(np.int64)
        counts[int(np.argmax(counts))] += layout.M - int(counts.sum())
        return counts


class CopyFirstDecoder(Decoder):
    bounds_before_read = False

    def read_payload(self, view: memoryview, start: int, length: int, limits: tuple[int, int]) -> memoryview:
        payload = self.take(view[start : start + length])
        self.check_extent(view, start + length)
        self.check_bounds(length, limits)
        return payload


class UnsortedReceiver(Receiver):
    validator_class = UnsortedValidator


class RenormalizingReceiver(Receiver):
    validator_class = RenormalizingValidator


class StaleGenerationReceiver(Receiver):
    def worker_problem(self, slot: Slot, generation: int, round_id: int) -> str | None:
        return self.round_problem(slot, round_id)

    def command_problem(self, slot: Slot, generation: int) -> str | None:
        return None if slot.live else "STALE_GENERATION"


class EarlyConsumingReceiver(Receiver):
    @staticmethod
    def is_consumable(current: OpenRound) -> bool:
        return len(current.replies) == current.step["depth"]


class CopyFirstReceiver(Receiver):
    decoder_class = CopyFirstDecoder


class SlotDroppingReceiver(Receiver):
    def on_hello(self, message, row, data: bytes) -> Disposition:
        verdict = super().on_hello(message, row, data)
        if verdict.kind == ACCEPT:
            del self.slots[message["max_slots"] :]
        return verdict


class ConsumableDiscardingReceiver(Receiver):
    def discard(self, indices: tuple[int, ...], reason: str, force: bool = False) -> tuple[int, ...]:
        return super().discard(indices, reason, force=True)

    def timeout(self, index: int) -> Disposition:
        if index < len(self.slots) and self.slots[index].open is not None:
            self.counters["timeouts"] += 1
            return Disposition(ACCEPT, None, self.discard((index,), "timeout"))
        return super().timeout(index)


class SharedLinkReceiver(Receiver):
    def feed(self, data: layout.FrameBytes, connection: int = 0) -> Disposition:
        return super().feed(data, 0)

    def check(self, data: layout.FrameBytes, connection: int = 0, reads_answers: bool = True):
        return super().check(data, 0, reads_answers)

    def link(self, connection: int) -> dict | None:
        return super().link(0)

    def disconnect(self, connection: int = 0) -> Disposition:
        verdict = super().disconnect(0)
        self.disconnects[connection] = verdict
        return verdict


#: mutant name -> (receiver class, the bug in one line)
MUTANTS: dict[str, tuple[type[Receiver], str]] = {
    "accepts-unsorted-support": (UnsortedReceiver, "sparse IDs are not checked for ascending order"),
    "renormalizes-q": (RenormalizingReceiver, "a q row not summing to M is rescaled to M instead of refused"),
    "ignores-stale-generation": (StaleGenerationReceiver, "a frame of another generation is taken as the slot's"),
    "consumes-before-completion": (EarlyConsumingReceiver, "rows are consumable once all K arrived, before COMPLETION"),
    "bounds-after-copy": (CopyFirstReceiver, "the payload is copied before its length is checked against the bounds"),
    "recreates-dropped-slots": (SlotDroppingReceiver, "a HELLO with fewer slots drops the others; old keys come back"),
    "discards-consumable": (
        ConsumableDiscardingReceiver,
        "a worker-side fault discards a round whose COMPLETION validated",
    ),
    "shares-the-link": (SharedLinkReceiver, "every connection is one link: a stranger disturbs the live one"),
}


def receiver_class(name: str | None) -> type[Receiver]:
    """The receiver of mutant ``name`` (None: the correct one)."""
    if name is None:
        return Receiver
    if name not in MUTANTS:
        raise KeyError(f"unknown endpoint mutant {name!r}; known: {', '.join(MUTANTS)}")
    return MUTANTS[name][0]
