"""Sharding a harness run over ``torch.distributed`` ranks launched by ``torchrun`` (docs/distributed.md).

``qconform stat`` and ``qconform accumulate`` split their work into units whose results do
not depend on which process computed them: rank ``r`` of ``W`` takes the cases ``u`` with
``u % W == r`` (``stat``, :meth:`Ranks.mine`), or a contiguous ``1 / W`` of the stream's
cases (``accumulate``, :meth:`Ranks.share`), and every rank gathers every unit's result
with ``all_gather_object``. So the result is the same for any world size.

Launched by ``torchrun`` (``WORLD_SIZE`` and ``RANK`` in the environment), the process
group is initialised from torchrun's own rendezvous (``env://``): gloo for a CPU
device, NCCL for CUDA. Without torchrun the run is one rank and torch is not imported,
unless ``qconform accumulate --ranks N`` forks its own ranks
(:mod:`qconform.harness.run.forked_ranks`), which gather without torch.
"""

from __future__ import annotations

import atexit
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from qconform.harness.run.signals import OnThread, SignalGuard

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process's rank, the world size, and how to gather one object from every rank."""

    rank: int
    world: int
    gather: Callable[[Any], list[Any]]
    #: how rank 0 of ranks it forked itself ends them (:func:`finish`); None under torchrun or alone
    end: Callable[[bool], None] | None = None
    #: this process is a rank that rank 0 forked: it ends with the command (``os._exit``), never
    #: returning into what called the command
    forked: bool = False

    def mine(self, units: Sequence[T]) -> list[T]:
        """The units this rank computes: every ``world``-th, starting at ``rank``."""
        return list(units[self.rank :: self.world])

    def share(self, count: int) -> tuple[int, int]:
        """This rank's contiguous ``1 / world`` of ``count`` units, ``[first, last)``: the shares of
        the ranks differ by at most one unit and cover ``0 .. count - 1`` in rank order."""
        return count * self.rank // self.world, count * (self.rank + 1) // self.world

    def merged(self, local: dict) -> dict:
        """Every rank's ``{unit: result}``, merged (identical on every rank)."""
        merged: dict = {}
        for part in self.gather(local):
            merged.update(part)
        return merged


SINGLE = Ranks(rank=0, world=1, gather=lambda obj: [obj])


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def backend_for(device: str, world: int) -> str:
    """gloo on CPU, NCCL on CUDA with one GPU per rank (the collectives qconform already uses,
    docs/sharding.md). NCCL cannot put two ranks on one GPU, so more ranks than GPUs (ranks
    that feed one device from many CPU cores) gather their results over gloo."""
    if device.startswith("cuda"):
        import torch

        if world <= torch.cuda.device_count():
            return "nccl"
    return "gloo"


#: the names of the waits of :func:`collective`, as its lines say them
RENDEZVOUS, GATHER, BARRIER = "rendezvous", "gather", "barrier"
#: the place in torch's source that its C++ errors begin with (``[.../pair.cc:553] Connection closed...``)
SOURCE_PLACE = re.compile(r"^\[[^\]]*:\d+\]\s*")


class GroupFailed(Exception):
    """torchrun's process group failed this rank: its rendezvous or a collective raised in torch's
    C++, because a peer rank is gone (its connection closed: it crashed, or torchrun stopped it) or
    did not come in time (docs/distributed.md, "When a rank is lost")."""

    def __init__(self, what: str, why: str) -> None:
        #: the rendezvous failed: the ranks never met, so nothing was run
        self.at_start = what == RENDEZVOUS
        super().__init__(f"torchrun's process group failed at the {what}: {why}")


def torch_said(exc: BaseException) -> str:
    """The first sentence of a torch.distributed error, without the place in torch's source it
    names (gloo goes on with advice for torch's own developers)."""
    lines = str(exc).strip().splitlines()
    return SOURCE_PLACE.sub("", lines[0]).split(". ")[0] if lines else type(exc).__name__


def collective(what: str, call: Callable[[], T], guard: SignalGuard | None = None) -> T:
    """``call``, a rendezvous or collective of torch.distributed, which blocks in C++ where a signal
    cannot stop it (a peer that never comes: up to torch's 30-minute timeout), on a thread of its
    own (:class:`OnThread`): the command waits for it where SIGINT or SIGTERM stops the wait (at
    ``guard``'s checkpoints, or anywhere inside its ``interrupting`` block). A wait so stopped
    leaves the process group to the process's end, not destroyed at exit (its collective is still
    under way). What torch raises (a ``RuntimeError``: its ``DistError`` family, and gloo's own) is
    :class:`GroupFailed`."""
    try:
        return OnThread(call, f"torch.distributed {what}").result(guard)
    except KeyboardInterrupt:
        import torch.distributed as dist

        atexit.unregister(dist.destroy_process_group)
        raise
    except RuntimeError as exc:
        raise GroupFailed(what, torch_said(exc)) from None


def torchrun_ranks(device: str, guard: SignalGuard | None = None) -> Ranks:
    """The ranks of this run: :data:`SINGLE` unless launched by torchrun with more than one
    process, else this process's rank in a process group initialised from the environment (its
    rendezvous waited for as :func:`collective` does, stopped by a signal at ``guard``'s checkpoints)."""
    if not launched_by_torchrun():
        return SINGLE
    import torch
    import torch.distributed as dist

    backend = backend_for(device, int(os.environ["WORLD_SIZE"]))
    if not dist.is_initialized():
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        collective(RENDEZVOUS, lambda: dist.init_process_group(backend=backend, init_method="env://"), guard)
        atexit.register(dist.destroy_process_group)
    world = dist.get_world_size()

    def gather(obj: Any) -> list[Any]:
        parts: list[Any] = [None] * world
        collective(GATHER, lambda: dist.all_gather_object(parts, obj))
        return parts

    return Ranks(rank=dist.get_rank(), world=world, gather=gather)


def finish(ranks: Ranks, completed: bool = True, guard: SignalGuard | None = None) -> None:
    """Wait for every rank (a no-op for a single rank) when the run ``completed``. The process group
    stays up for a next command in the same process and is destroyed at exit. Ranks forked by this
    process are waited for when the run completed, else ended at once
    (:mod:`~qconform.harness.run.forked_ranks`). Under torchrun, a rank whose run did not complete
    (interrupted, or failed) does not wait for the others: they were interrupted too, or torchrun
    ends them when this one exits; the barrier is a :func:`collective`."""
    if ranks.end is not None:
        ranks.end(completed)
    elif ranks.world > 1 and not ranks.forked and completed:
        import torch.distributed as dist

        if dist.is_initialized():
            collective(BARRIER, dist.barrier, guard)
