"""The ranks of a command: torchrun's, or those ``--ranks N`` forks (docs/distributed.md).

:func:`prepare_ranks` checks them and starts what they share, :func:`command_ranks` starts them;
:func:`run_as_rank` runs the rest of the command in a rank,
where a forked rank ends with the command's status (it never returns into what called the
command) and a rank that ended before the gather becomes one line on rank 0 with that rank's
status; :func:`group_errors` makes torchrun's process group failing a rank one line too.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from qconform.cli.errors import StartLineError, UsageLineError
from qconform.harness.run.distributed import GroupFailed, Ranks

if TYPE_CHECKING:
    from qconform.harness.run.signals import SignalGuard

RANKS_HELP = (
    "Run as N ranks that this command forks, each with its own adapter and a contiguous 1/N of the "
    "cases, gathered without torch (docs/distributed.md); the same result as one rank or torchrun's ranks."
)


class RankLineError(click.ClickException):
    """A rank ended before the gather: one line, with that rank's exit status."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        # click exits with the instance's exit_code; its stubs type it a ClassVar (most of its
        # exceptions have a fixed status), but this status is the failed rank's own
        vars(self)["exit_code"] = exit_code


@dataclasses.dataclass
class PreparedRanks:
    """A command's ranks, checked and with what they share already started, not yet themselves
    (:func:`prepare_ranks`, then :func:`command_ranks`)."""

    device: str
    #: the ``--ranks`` count: 1 for torchrun's ranks or one rank alone
    count: int
    #: ends what :func:`prepare_ranks` started (the adapter zygote); at rank 0's end, or at once
    #: when the command stops before its ranks start
    close: Callable[[], None] = lambda: None


def prepare_ranks(device: str, ranks: int, adapter: str | None = None) -> PreparedRanks:
    """Check ``--ranks`` (a usage error under torchrun, or without ``os.fork``) and, for forked
    ranks of a registered ``adapter``, start the one adapter zygote that will fork every rank's
    adapter, which imports the adapter's modules once for all of them (harness/transport/zygote.py;
    docs/distributed.md). The command calls this before its own imports and checks, so that the
    zygote's import (torch's, most of a run's start-up) runs beside them (docs/accumulated.md,
    "Start-up")."""
    from qconform.harness.run.distributed import launched_by_torchrun

    if ranks == 1:
        return PreparedRanks(device, 1)
    if launched_by_torchrun():
        raise UsageLineError("--ranks starts its own ranks; under torchrun leave it out (torchrun sets the ranks)")
    if not hasattr(os, "fork"):
        raise UsageLineError("--ranks needs os.fork (Linux, macOS); run the ranks under torchrun instead")
    if adapter is None:
        return PreparedRanks(device, ranks)
    from qconform.harness.run.forked_ranks import set_rank_environment
    from qconform.harness.transport.zygote import start_zygote

    set_rank_environment()  # before the zygote: the ranks' adapters are its forks
    started = start_zygote(adapter, device)
    return PreparedRanks(device, ranks, started.close if started is not None else lambda: None)


@contextmanager
def group_errors() -> Iterator[None]:
    """torchrun's process group failing this rank (:class:`GroupFailed`) as one line: at the
    rendezvous, the ranks never met and nothing ran (3, as for an adapter that cannot start); at a
    collective, the run is incomplete (1). docs/distributed.md, "When a rank is lost"."""
    try:
        yield
    except GroupFailed as exc:
        if exc.at_start:
            raise StartLineError(str(exc)) from None
        raise RankLineError(f"{exc} (the run is incomplete)", 1) from None


def command_ranks(prepared: PreparedRanks, guard: SignalGuard | None = None) -> Ranks:
    """This process's ranks: forked ones for ``--ranks`` > 1, else torchrun's (one rank without it;
    torchrun's rendezvous stopped by a signal at ``guard``'s checkpoints)."""
    from qconform.harness.run.distributed import torchrun_ranks

    if prepared.count == 1:
        with group_errors():
            return torchrun_ranks(prepared.device, guard)
    from qconform.harness.run.forked_ranks import fork_ranks

    return fork_ranks(prepared.count, prepared.close)


def closing_at_gather(ranks: Ranks, close: Callable[[], None]) -> Ranks:
    """``ranks`` whose gather first starts ``close`` (this rank's adapter) on a thread of its own.
    When a rank reaches the gather its share is answered and judged, and nothing after the gather
    asks the adapter anything, so the adapter's shutdown runs while the rank waits for the slowest
    one and merges, not after (docs/distributed.md, "Without torchrun": the end of a run). The
    command's own close of the adapter, when it leaves the adapter's ``with``, returns once that
    shutdown is complete (the client closes under its lock), so no adapter outlives its rank."""

    def gather(obj: Any) -> list[Any]:
        threading.Thread(target=close, name="adapter-close").start()
        return ranks.gather(obj)

    return dataclasses.replace(ranks, gather=gather)


def run_as_rank(ranks: Ranks, run: Callable[[], None]) -> None:
    """``run`` the rest of the command in this rank. In a forked rank, end the process here with the
    command's status (its error lines on its standard error, which rank 0 quotes if it failed)."""
    from qconform.harness.run.forked_ranks import RankFailed

    if not ranks.forked:
        try:
            with group_errors():
                run()
        except RankFailed as exc:
            raise RankLineError(f"{exc} (the run is incomplete)", exc.status if 0 < exc.status < 256 else 1) from None
        return
    status = 1
    try:
        run()
        status = 0
    except click.exceptions.Exit as exc:
        status = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        status = exc.exit_code
    except RankFailed as exc:  # rank 0 ended first (its own death would have killed this rank)
        click.echo(f"Error: {exc}", err=True)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - a forked rank never returns into its caller's stack
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
