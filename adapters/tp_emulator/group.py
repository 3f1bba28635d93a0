"""The rank group: starting S ranks, sending them batches, surviving a crash; and each rank's serving loop.

The adapter process is rank 0, the leader. It starts ranks 1..S-1 as processes
(``python -m qconform.adapters.tp_emulator.worker``), which meet it through a
``torch.distributed`` TCPStore on 127.0.0.1 and form one process group. Two
groups are built over the same ranks:

* the **control** group (the default group, gloo, a timeout of days): the leader
  broadcasts each batch to every rank with ``broadcast_object_list`` and ranks
  wait in it, idle, between batches;
* the **work** group (gloo on CPU, NCCL on CUDA, a timeout of
  ``QCONFORM_TP_TIMEOUT_S`` seconds, default 60): every collective of a case.

The group is started once per adapter process and kept across batches. A rank
that dies makes the others' next collective fail (gloo sees the closed
connection at once; a hang ends at the work timeout), and a rank that meets an
unexpected exception exits on purpose: the leader then reports the case as an
adapter error, tears the group down and starts a fresh one for the rest of the
batch. Refusals (``{"error": CODE}``) are raised at the same point on every rank
(:meth:`Rank.agree`), so they never break the lockstep.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time
import traceback
from datetime import timedelta
from typing import Sequence

import torch
import torch.distributed as dist

from qconform.adapters.torch_candidate.errors import CandidateError
from qconform.harness.adapter import AdapterError, Outcome, Unimplemented

from .families import FAMILIES
from .rank import EmulatorRefusal, Rank, ShardCountMismatch

#: how long ranks wait, idle, for the next batch
IDLE_TIMEOUT = timedelta(days=7)
#: how long one collective of a case may take before it is an error
WORK_TIMEOUT_S = float(os.environ.get("QCONFORM_TP_TIMEOUT_S", "60"))
#: how long the ranks may take to start
STARTUP_TIMEOUT_S = 180.0
#: group failures within one batch before its remaining cases are given up
MAX_RESTARTS = 2
LOCALHOST = "127.0.0.1"


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def rank_device(device: str, rank: int, world: int) -> torch.device:
    """CPU, or GPU ``rank``: NCCL needs one distinct GPU per rank (two ranks on one
    GPU are refused by NCCL), so a group wider than the visible GPUs is refused here."""
    if not device.startswith("cuda"):
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count < world:
        raise RuntimeError(
            f"device cuda with {world} ranks needs {world} GPUs (NCCL takes one GPU per rank), "
            f"but {count} {'is' if count == 1 else 'are'} visible"
        )
    return torch.device("cuda", rank)


def join(store: dist.Store, rank: int, world: int, device: str, work_timeout_s: float) -> Rank:  # pyright: ignore[reportPrivateImportUsage]  # torch.distributed re-exports it from C without listing it in __all__
    """Join the control and work groups as ``rank`` (every rank calls this, in the same order)."""
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=IDLE_TIMEOUT)
    where = rank_device(device, rank, world)
    if where.type == "cuda":
        torch.cuda.set_device(where)
    work = dist.new_group(backend=backend_for(device), timeout=timedelta(seconds=work_timeout_s))
    assert isinstance(work, dist.ProcessGroup)  # every rank is a member of the work group
    return Rank(rank, world, where, work)


def run_case(rank: Rank, family: str, case_input: dict) -> Outcome | None:
    """One case on this rank: the answer (leader), None (other ranks), a refusal, or ``Unimplemented``."""
    try:
        return FAMILIES[family](rank, case_input)
    except (CandidateError, EmulatorRefusal) as refusal:
        return {"error": refusal.code}
    except ShardCountMismatch as mismatch:
        return Unimplemented(str(mismatch))


def receive_command() -> tuple:
    holder: list = [None]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def serve(rank: Rank) -> None:
    """A non-leader rank's loop: run each broadcast batch in lockstep until ``stop``; exit the
    process on any unexpected exception, so the leader's next collective fails at once."""
    while True:
        command = receive_command()
        if command[0] == "stop":
            return
        _, family, inputs, rank.mutant = command
        try:
            for case_input in inputs:
                run_case(rank, family, case_input)
        except Exception:  # noqa: BLE001 - a broken rank must not leave the others waiting
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)


class RankGroup:
    """The leader's handle on a group of ``world`` ranks on ``device``."""

    def __init__(self, world: int, device: str = "cpu", work_timeout_s: float = WORK_TIMEOUT_S) -> None:
        if world < 1:
            raise ValueError(f"a rank group needs at least one rank, not {world}")
        self.world = world
        self.device = device
        self.work_timeout_s = work_timeout_s
        self.rank: Rank | None = None
        self.workers: list[subprocess.Popen] = []

    def start(self) -> None:
        rank_device(self.device, 0, self.world)  # refuse a CUDA group wider than the GPUs before spawning
        store = dist.TCPStore(  # pyright: ignore[reportPrivateImportUsage]  # torch.distributed re-exports it from C without listing it in __all__
            LOCALHOST,
            0,
            self.world,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=STARTUP_TIMEOUT_S),
        )
        command = [
            sys.executable,
            "-m",
            "qconform.adapters.tp_emulator.worker",
            "--world",
            str(self.world),
            "--port",
            str(store.port),
            "--device",
            self.device,
            "--timeout",
            str(self.work_timeout_s),
            "--parent",
            str(os.getpid()),
        ]
        self.workers = [
            subprocess.Popen(command + ["--rank", str(r)], stdin=subprocess.DEVNULL, stdout=2)
            for r in range(1, self.world)
        ]
        try:
            self.wait_ready(store)
            self.rank = join(store, 0, self.world, self.device, self.work_timeout_s)
        except BaseException:
            self.kill_workers(force=True)
            raise

    def wait_ready(self, store: dist.Store) -> None:  # pyright: ignore[reportPrivateImportUsage]  # torch.distributed re-exports it from C without listing it in __all__
        """Wait until every worker registered in the store; fail fast if one exits."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        waiting = set(range(1, self.world))
        while waiting:
            for r in list(waiting):
                if store.check([f"ready/{r}"]):
                    waiting.discard(r)
                elif self.workers[r - 1].poll() is not None:
                    raise RuntimeError(f"rank {r} exited with status {self.workers[r - 1].returncode} while starting")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ranks {sorted(waiting)} did not start within {STARTUP_TIMEOUT_S:.0f} s")
            time.sleep(0.05)

    def run(self, family: str, inputs: Sequence[dict], mutant: str | None = None) -> list[Outcome]:
        """Every case's outcome. A failure of the group answers the case it happened on with an
        adapter error; the rest of the batch runs on a fresh group (at most :data:`MAX_RESTARTS`
        times). A group that a dead rank left behind since the last batch is replaced first."""
        outcomes: list[Outcome] = []
        pending = list(inputs)
        failures = 0
        while pending:
            if failures > MAX_RESTARTS:
                return outcomes + [AdapterError("rank group gave up after repeated failures")] * len(pending)
            fresh = self.rank is None
            try:
                if fresh:
                    self.start()
                dist.broadcast_object_list([("run", family, pending, mutant)], src=0)
            except Exception as exc:  # noqa: BLE001 - a group that cannot start or receive
                self.close(healthy=False)
                if fresh:
                    return outcomes + [AdapterError(f"rank group unavailable: {type(exc).__name__}: {exc}")] * len(
                        pending
                    )
                continue
            assert self.rank is not None  # start() joined the group, or it was already up
            self.rank.mutant = mutant
            done = self.run_pending(family, pending, outcomes)
            pending = pending[done:]
            failures += 1 if pending else 0
        return outcomes

    def run_pending(self, family: str, pending: list[dict], outcomes: list[Outcome]) -> int:
        """Run the broadcast cases in order; return how many were answered (all, or up to and
        including the one where the group failed, after tearing it down)."""
        rank = self.rank
        assert rank is not None  # run() calls this on a started group
        for index, case_input in enumerate(pending):
            try:
                outcome = run_case(rank, family, case_input)
                assert outcome is not None  # this process is rank 0, the leader: it always answers
                outcomes.append(outcome)
            except Exception as exc:  # noqa: BLE001 - a dead or hung rank is this case's error
                outcomes.append(AdapterError(f"rank group failed: {type(exc).__name__}: {exc}"))
                self.close(healthy=False)
                return index + 1
        return len(pending)

    def close(self, healthy: bool = True) -> None:
        """Stop the ranks (politely when the group is healthy) and leave the process group."""
        if self.rank is not None:
            if healthy:
                try:
                    dist.broadcast_object_list([("stop",)], src=0)
                except Exception:  # noqa: BLE001 - stopping is best effort
                    pass
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001
                pass
            self.rank = None
        self.kill_workers(force=not healthy)

    def kill_workers(self, force: bool = False) -> None:
        """End the worker processes: after ``stop`` they exit by themselves; otherwise (or if they
        linger) they are killed."""
        for worker in self.workers:
            if force:
                worker.kill()
            try:
                worker.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        self.workers = []


#: this process's rank group (torch.distributed allows one default group per process)
_SHARED: RankGroup | None = None


def shared_group(world: int, device: str = "cpu") -> RankGroup:
    """The process's rank group of ``world`` ranks on ``device``, replacing one of another shape."""
    global _SHARED
    if _SHARED is not None and (_SHARED.world, _SHARED.device) != (world, device):
        _SHARED.close()
        _SHARED = None
    if _SHARED is None:
        _SHARED = RankGroup(world, device)
    return _SHARED


@atexit.register
def close_shared_group() -> None:
    global _SHARED
    if _SHARED is not None:
        _SHARED.close()
        _SHARED = None
