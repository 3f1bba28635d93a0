"""Run mutants in forked worker processes, each with a timeout and a memory cap.

The parent loads (and validates) the committed cases once and imports the
generators; each mutant runs in a fresh ``fork`` of it (copy-on-write: nothing is
re-read), applies its mutation there (:func:`.oracle.install`), re-solves, sends
its :class:`.oracle.Outcome` through a pipe and exits. The parent never imports
a mutant. A child still running after its timeout is killed: ``timeout``, which
kills the mutant (a candidate that hangs fails the harness's case timeout too);
a child that dies without an answer (a C-level crash, the memory cap) is a crash.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from qconform.generators.adequacy import oracle
from qconform.generators.adequacy.mutate import Site
from qconform.generators.adequacy.oracle import CRASH, CommittedCase, Outcome

TIMEOUT = "timeout"
#: address-space cap of one worker: a mutant that allocates without bound crashes instead of the machine
MEMORY_LIMIT_BYTES = 4 << 30

#: cases loaded by the parent before forking, read by the children
_CASES: Mapping[str, Sequence[CommittedCase]] = {}


@dataclass(frozen=True)
class Job:
    site: Site | None  # None: the unmutated spec (the baseline)
    families: tuple[str, ...]
    timeout_s: float
    trace: bool = False  # record the functions called (docs/adequacy.md, "Unreached functions")
    #: the oracle is these unit tests (``--judges``), not the committed cases of ``families``
    tests: tuple[str, ...] = ()
    #: the oracle is this fast path answering the committed cases of ``families`` (fast_paths.py)
    fast_path: str | None = None


@dataclass(frozen=True)
class Finished:
    job: Job
    outcome: Outcome
    seconds: float


def _child(job: Job, conn: Connection) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
        try:
            if job.site is not None:
                oracle.install(job.site)

            def judge() -> Outcome:
                if job.tests:
                    return oracle.run_tests(job.tests)
                if job.fast_path is not None:
                    from qconform.generators.adequacy.fast_paths import solve_fast_path

                    return solve_fast_path(job.fast_path, _CASES)
                return oracle.solve_all(job.families, _CASES)

            if job.trace and job.site is None and not job.tests:
                oracle.forget_spec()  # re-imported under the trace (docs/adequacy.md, "Unreached functions")
            outcome = oracle.traced(judge) if job.trace else judge()
        except Exception as error:  # noqa: BLE001 - a mutant that cannot even be installed is a crash
            outcome = Outcome(CRASH, None, f"{type(error).__name__}: {error}"[: oracle.DETAIL_LIMIT])
        conn.send(outcome)
        conn.close()
    finally:
        os._exit(0)


def run(
    jobs: Sequence[Job],
    cases: Mapping[str, Sequence[CommittedCase]],
    workers: int,
    done: Callable[[Finished], None] | None = None,
) -> list[Finished]:
    """The outcome of every job, in the order given; at most ``workers`` children at a time."""
    global _CASES
    _CASES = cases
    context = multiprocessing.get_context("fork")
    pending = list(enumerate(jobs))[::-1]
    running: dict[Connection, tuple[int, Job, BaseProcess, float]] = {}
    results: dict[int, Finished] = {}

    def finish(conn: Connection, outcome: Outcome) -> None:
        index, job, process, started = running.pop(conn)
        if process.is_alive():
            process.kill()
        process.join()
        conn.close()
        result = Finished(job, outcome, time.monotonic() - started)
        results[index] = result
        if done is not None:
            done(result)

    while pending or running:
        while pending and len(running) < max(1, workers):
            index, job = pending.pop()
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(job, send), daemon=True)
            process.start()
            send.close()
            running[receive] = (index, job, process, time.monotonic())
        for conn in wait(list(running), timeout=0.2):
            assert isinstance(conn, Connection)  # wait returns some of the objects it is given: our pipe ends
            try:
                outcome = conn.recv()
            except EOFError:
                process = running[conn][2]
                process.join(1)
                outcome = Outcome(CRASH, None, f"worker died with exit code {process.exitcode}")
            finish(conn, outcome)
        now = time.monotonic()
        for conn, (_index, job, _process, started) in list(running.items()):
            if now - started > job.timeout_s:
                finish(conn, Outcome(TIMEOUT, None, f"no answer within {job.timeout_s:.0f} s"))
    return [results[i] for i in range(len(jobs))]
