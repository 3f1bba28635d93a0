"""``qconform accumulate`` with a timeline of its start-up, run, and end (bench_accumulate_ranks.py --phases).

    BENCH_T0=$(date +%s.%N) BENCH_TIMELINE=marks.txt python bench/accumulate_timeline.py accumulate ...

Runs the command in this process (as ``qconform`` would, or as a torchrun rank with ``--no-python``)
and appends one line per mark to the file ``BENCH_TIMELINE``: ``RANK SECONDS MARK``, seconds since
``BENCH_T0`` (wall clock, so the marks of several processes line up). The marks, in order: ``up``
(this interpreter runs), ``started`` (the options are checked and the adapter's start begun: the
zygote for ``--ranks``, else the child's start on its thread; docs/accumulated.md, "Start-up"),
``ranks`` (the command asks for its ranks: its imports and the accumulated file are done),
``ranks ready`` (under torchrun: torch imported and the process group up; with ``--ranks``:
forked), ``adapter ready`` (its child started and answered ``get_config``), ``begin`` (the timed run
starts), ``block 1`` (the first block answered), ``at gather`` (this rank's share computed: it enters
the gather), ``gathered`` (every rank's results merged),
``closed`` (the adapter shut down), ``done`` (the command returned). The wrappers only
observe: each calls the function it wraps and returns its result. This script imports the modules
it wraps before the command runs, so its ``started`` comes 0.05 to 0.1 s later than the plain
command's, whose imports come after that start.
"""

from __future__ import annotations

import os
import time
from typing import Any

T0 = float(os.environ.get("BENCH_T0", time.time()))
FILE = os.environ.get("BENCH_TIMELINE", os.devnull)
RANK = [os.environ.get("RANK", "0")]


def mark(what: str) -> None:
    line = f"{RANK[0]} {time.time() - T0:.3f} {what}\n"
    fd = os.open(FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


mark("up")

import qconform.cli.arguments as arguments  # noqa: E402
import qconform.cli.ranks as ranks_module  # noqa: E402
import qconform.harness.run.accumulate as run_accumulate  # noqa: E402
from qconform.harness.run.distributed import Ranks  # noqa: E402


def wrapped_prepare(prepare_ranks):
    def prepare_marked(*args: Any, **kwargs: Any) -> Any:
        prepared = prepare_ranks(*args, **kwargs)
        mark("started")
        return prepared

    return prepare_marked


def wrapped_ranks(command_ranks):
    def command_ranks_marked(*args: Any, **kwargs: Any) -> Ranks:
        mark("ranks")
        ranks = command_ranks(*args, **kwargs)
        RANK[0] = str(ranks.rank)
        mark("ranks ready")
        return ranks

    return command_ranks_marked


def wrapped_open(open_checked):
    def open_marked(*args: Any, **kwargs: Any):
        client = open_checked(*args, **kwargs)
        mark("adapter ready")
        run_block, close, answered, closed = client.run_block, client.close, [0], []

        def run_block_marked(*a: Any, **k: Any):
            answer = run_block(*a, **k)
            answered[0] += 1
            if answered[0] == 1:
                mark("block 1")
            return answer

        def close_marked() -> None:  # the first close (at the gather); the later ones do nothing
            close()
            if not closed:
                closed.append(True)
                mark("closed")

        client.run_block, client.close = run_block_marked, close_marked
        return client

    return open_marked


def wrapped_accumulate(accumulate):
    def accumulate_marked(*args: Any, **kwargs: Any):
        mark("begin")
        ranks: Ranks = args[5] if len(args) > 5 else kwargs["ranks"]
        merged = ranks.merged

        def merged_marked(local: dict) -> dict:
            mark("at gather")
            result = merged(local)
            mark("gathered")
            return result

        object.__setattr__(ranks, "merged", merged_marked)
        return accumulate(*args, **kwargs)

    return accumulate_marked


if hasattr(ranks_module, "prepare_ranks"):  # a tree before the adapter started first (--tree) has none
    ranks_module.prepare_ranks = wrapped_prepare(ranks_module.prepare_ranks)
ranks_module.command_ranks = wrapped_ranks(ranks_module.command_ranks)
arguments.open_checked = wrapped_open(arguments.open_checked)
run_accumulate.accumulate = wrapped_accumulate(run_accumulate.accumulate)

if __name__ == "__main__":
    from qconform.cli import main

    try:
        main()
    finally:
        mark("done")
