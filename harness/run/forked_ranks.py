"""Ranks that ``qconform accumulate --ranks N`` starts itself, without torchrun (docs/distributed.md,
"Without torchrun").

The command's process is rank 0. Once its options are checked it forks ranks ``1 .. N - 1``, so
every rank starts with the command's modules already imported and starts its own adapter at once.
A rank does what a torchrun rank does: the same contiguous share of the cases
(:meth:`~qconform.harness.run.distributed.Ranks.share`) and the same gather of every rank's
results, so the result is the one a single process computes. What it does not do is import
torch: the ranks gather over a socket pair each with rank 0 (pickled, as ``all_gather_object``
pickles), and rank 0 sends the gathered list back. torchrun's own start (its torch import and
rendezvous) and each rank's torch import and process group are what a 2-rank run on 2 cores
spends most of its start-up on (bench/RESULTS.md, "Issue #24: ranks, night").

Rank 0 prints. A forked rank writes nothing to the terminal: its standard output goes to
``/dev/null`` and its standard error to a file that rank 0 quotes if the rank ends before the
gather (:class:`RankFailed`, with the rank's exit status). Every forked rank gets SIGKILL when
rank 0 dies (``PR_SET_PDEATHSIG``; its adapter's keeper then ends the adapter), and rank 0 ends
them itself when it stops before the gather (an error of its own, an interruption), so no rank
outlives the command.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe
from typing import IO, Any, Callable

from qconform.harness.run.distributed import SINGLE, Ranks

#: seconds rank 0 waits for the forked ranks to end after a completed run (each closes its adapter)
#: before it kills the ones still running
END_WAIT_S = 30.0
#: how often that wait looks at the ranks
END_POLL_S = 0.02
#: the per-process thread count of a rank's adapter where the caller set none: one, as torchrun sets
#: for more than one process per host, so N ranks' torch children do not share N cores N times over
THREADS = {"OMP_NUM_THREADS": "1"}


class RankFailed(Exception):
    """A rank ended before its results reached the gather (or rank 0 did, seen from a forked rank)."""

    def __init__(self, rank: int, status: int, said: str) -> None:
        self.rank = rank
        #: the rank's exit status as a shell reports it (128 + N for death by signal N)
        self.status = status
        #: the last line the rank wrote to its standard error ("" if none)
        self.said = said
        super().__init__(f"rank {rank} ended before the gather with status {status}" + (f": {said}" if said else ""))


@dataclass
class RankProcess:
    """A forked rank as rank 0 sees it: its pid, its end of the gather link, its standard error."""

    rank: int
    pid: int
    link: Connection
    stderr: IO[bytes]
    status: int | None = None

    def reap(self, block: bool) -> int | None:
        """The rank's exit status once it has ended (``block``: wait for it), else None."""
        if self.status is None:
            pid, wait_status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            if pid != 0:
                code = os.waitstatus_to_exitcode(wait_status)
                self.status = 128 - code if code < 0 else code
        return self.status

    def said(self) -> str:
        """The last non-empty line the rank wrote to its standard error, without its ``Error:``."""
        self.stderr.seek(0)
        lines = [line.strip() for line in self.stderr.read().decode("utf-8", "replace").splitlines()]
        last = next((line for line in reversed(lines) if line), "")
        return last.removeprefix("Error: ")

    def failure(self) -> RankFailed:
        return RankFailed(self.rank, self.reap(block=True) or 1, self.said())


def set_rank_environment() -> None:
    """The environment every forked rank's adapter inherits (:data:`THREADS`, where the caller set
    none): set before the first fork, and before anything that starts an adapter for the ranks (the
    adapter zygote)."""
    for name, value in THREADS.items():
        os.environ.setdefault(name, value)


def fork_ranks(world: int, after_end: Callable[[], None] = lambda: None) -> Ranks:
    """Fork ranks ``1 .. world - 1`` of this command; return this process's :class:`Ranks` (rank 0
    in the caller, rank r in the r-th fork). A forked rank runs the rest of the command and must end
    with ``os._exit`` (:attr:`Ranks.forked`): it never returns into its caller's caller.
    ``after_end`` runs at rank 0's end, after every rank has ended (the adapter zygote's close)."""
    if world == 1:
        return SINGLE
    set_rank_environment()  # before the fork: every rank's adapter inherits it
    sys.stdout.flush()
    sys.stderr.flush()  # nothing buffered here is written twice, once by each process
    parent = os.getpid()
    processes: list[RankProcess] = []
    for rank in range(1, world):
        here, there = Pipe()
        stderr = tempfile.TemporaryFile()
        pid = os.fork()
        if pid == 0:
            return _become_rank(rank, world, parent, there, stderr, processes, here)
        there.close()
        processes.append(RankProcess(rank, pid, here, stderr))

    def gather(obj: Any) -> list[Any]:
        parts = [obj]
        for process in processes:
            try:
                parts.append(process.link.recv())
            except (EOFError, OSError):
                raise process.failure() from None
        for process in processes:
            try:
                process.link.send(parts)
            except OSError:
                pass  # it ended after sending its part: the run is whole; reaped at the end
        return parts

    def end(completed: bool) -> None:
        try:
            _end_ranks(processes, completed)
        finally:
            after_end()

    return Ranks(0, world, gather, end=end)


def _become_rank(
    rank: int,
    world: int,
    parent: int,
    link: Connection,
    stderr: IO[bytes],
    siblings: list[RankProcess],
    parents_end: Connection,
) -> Ranks:
    """In the fork: close what belongs to rank 0 and the earlier ranks, die with rank 0, write to
    ``stderr`` only."""
    from qconform.harness.transport.client import die_with_parent

    die_with_parent(parent)
    parents_end.close()
    for sibling in siblings:  # rank 0's links to earlier ranks: open here, rank 0 would never see EOF
        sibling.link.close()
        sibling.stderr.close()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    os.dup2(stderr.fileno(), 2)
    stderr.close()

    def gather(obj: Any) -> list[Any]:
        try:
            link.send(obj)
            return link.recv()
        except (EOFError, OSError):
            raise RankFailed(0, 1, "") from None

    return Ranks(rank, world, gather, forked=True)


def _end_ranks(processes: list[RankProcess], completed: bool) -> None:
    """Rank 0's end: after a completed run, wait for the forked ranks (each closes its adapter and
    exits with the run's status), killing those that take longer than :data:`END_WAIT_S`; otherwise
    (rank 0 stopped before or at the gather) kill them at once. Every rank is reaped."""
    deadline = time.monotonic() + (END_WAIT_S if completed else 0.0)
    waiting = list(processes)
    while waiting and time.monotonic() < deadline:
        waiting = [process for process in waiting if process.reap(block=False) is None]
        if waiting:
            time.sleep(END_POLL_S)
    for process in waiting:
        if process.reap(block=False) is None:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.reap(block=True)
    for process in processes:
        process.link.close()
        process.stderr.close()
