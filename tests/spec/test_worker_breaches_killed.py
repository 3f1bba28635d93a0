"""The worker breaches of issue #20, as spec mutants, are each killed by the worker_sessions vectors alone.

Each mutant patches one function of ``spec/wire/worker.py`` the way a faulty
worker behaves; the committed cases are re-solved with it and at least one answer
must differ from the corpus (the same oracle as ``qconform adequacy``). These are
the spec-side twins of the endpoint's seeded worker mutants.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.families.worker_sessions import solve
from qconform.generators.validation import load_vector_file
from qconform.spec.wire import worker
from qconform.spec.wire.messages import Commit, Step
from qconform.spec.wire.worker import NEGOTIATED, Link, Output, WorkerSlot, WorkerState

pytestmark = pytest.mark.rules("R01", "R12", "R22", "R24")

ORIGINAL = {name: getattr(worker, name) for name in ("await_answer", "command", "step_problem", "serve")}


def serves_before_acceptance(
    state: WorkerState, data: bytes, connection: int, link: Link
) -> tuple[WorkerState, Output]:
    """The accepting answer is taken as such; any other first frame leaves the link open and
    negotiated, and a command is served (the bundled endpoint's breach 1)."""
    answered, output = ORIGINAL["await_answer"](state, data, connection, link)
    if output.kind == worker.ACCEPT and not output.close:
        return answered, output
    link = replace(link, phase=NEGOTIATED)
    return ORIGINAL["command"](worker.with_link(state, connection, link), data, connection, link)


def live_on_any_link(slot: WorkerSlot, connection: int) -> bool:
    """A live generation is live for every connection."""
    return slot.live


def keeps_generation_live(state: WorkerState, connection: int) -> tuple[WorkerState, Output]:
    """A disconnect forgets the link but leaves its generations live."""
    worker.open_link(state, connection)
    return worker.counted(worker.with_link(state, connection, None), "disconnects"), Output(worker.ACCEPT)


def redraws_a_used_round(slot: WorkerSlot, step: Step, data: bytes, connection: int) -> str | None:
    """A round ID already served is served again, under the keys it was drawn with."""
    problem = ORIGINAL["step_problem"](slot, step, data, connection)
    return None if problem in ("DUPLICATE_ROUND", "STALE_ROUND") else problem


def retry_served_again(slot: WorkerSlot, step: Step, data: bytes, connection: int) -> str | None:
    """The open round's own STEP is served again instead of answered with the frames already sent."""
    problem = ORIGINAL["step_problem"](slot, step, data, connection)
    return None if problem == worker.DUPLICATE else problem


def redrawn_on_retry(state: WorkerState, step: Step, data: bytes) -> tuple[WorkerState, Output]:
    """A round served while it is open (a retry) is drawn under another seed: other bytes."""
    slot = state.slots[step.slot]
    if slot.open is None:
        return ORIGINAL["serve"](state, step, data)
    state, output = ORIGINAL["serve"](worker.with_slot(state, step.slot, replace(slot, seed=slot.seed ^ 1)), step, data)
    return worker.with_slot(state, step.slot, replace(state.slots[step.slot], seed=slot.seed)), output


def stale_committed_token(state: WorkerState, commit: Commit, data: bytes, connection: int):
    """A COMMIT moves the position but keeps the committed token of the round before."""
    before = state.slots[commit.slot].committed_token
    state, output = worker.receive_commit(state, commit, data, connection)
    return worker.with_slot(state, commit.slot, replace(state.slots[commit.slot], committed_token=before)), output


def serves_unreset_slot(slot: WorkerSlot, step: Step, data: bytes, connection: int) -> str | None:
    """A STEP for a generation this link never RESET is served."""
    problem = ORIGINAL["step_problem"](slot, step, data, connection)
    return None if problem == "STALE_GENERATION" and slot.open is None else problem


#: breach -> the (worker function, replacement) pairs that make the spec behave so
BREACHES: dict[str, tuple[tuple[str, Callable], ...]] = {
    "serves-before-acceptance": (("await_answer", serves_before_acceptance),),
    "keeps-a-generation-across-links": (("live_here", live_on_any_link),),
    "keeps-a-generation-after-disconnect": (("disconnect", keeps_generation_live),),
    "redraws-under-a-used-key": (("step_problem", redraws_a_used_round),),
    "identical-retry-with-other-bytes": (("step_problem", retry_served_again), ("serve", redrawn_on_retry)),
    "conditions-on-a-stale-committed-token": (("HANDLERS", stale_committed_token),),
    "serves-a-slot-never-reset": (("step_problem", serves_unreset_slot),),
}

CASES = sorted(
    (c for g in load_vector_file(default_vectors_dir() / "worker_sessions.json")["testGroups"] for c in g["tests"]),
    key=lambda c: len(str(c["input"])),
)


@pytest.mark.parametrize("name", list(BREACHES))
def test_the_corpus_kills_the_breach(name, monkeypatch):
    for target, patch in BREACHES[name]:
        if target == "HANDLERS":
            monkeypatch.setitem(worker.HANDLERS, Commit, patch)
        else:
            monkeypatch.setattr(worker, target, patch)
    killed = next((case["id"] for case in CASES if _differs(case)), None)
    assert killed is not None, f"no worker_sessions case tells the {name} mutant from the spec"


def _differs(case: dict) -> bool:
    try:
        return solve(case["input"]) != case["expected"]
    except Exception:  # noqa: BLE001 - a mutant that crashes on a valid input is told apart too
        return True


def test_the_unpatched_spec_tells_no_case_apart():
    """The control: without a breach every case solves to its expected answer, so a kill above is the breach's."""
    assert [case["id"] for case in CASES if _differs(case)] == []
