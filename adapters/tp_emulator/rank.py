"""One rank of the TP emulator: its shard, its collectives, exact partial sums, agreed refusals.

Every cross-rank value goes through a ``torch.distributed`` collective on the work
group: ``all_reduce`` (sum, max, min), ``all_gather`` and ``broadcast``. Tensors live
on the rank's device (CPU with gloo, the rank's GPU with NCCL).

Exact sums. A shifted sum (or any weight sum) is reduced exactly, independently of
the summation order: every FP64 value ``m * 2^e`` (53-bit integer ``m``) is split at
27 bits and its two halves are added into an int64 bucket per binary exponent
(:func:`exact_buckets`). Buckets are all-reduced with a plain int64 sum and turned
into an exact rational on the host (:func:`bucket_value`); the FP64 value every
rank then uses is that rational correctly rounded. Each bucket gets addends below
2^27 from at most 2^17 tokens per rank, far from int64 overflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import torch
import torch.distributed as dist

from qconform.adapters.torch_candidate.errors import CandidateError

#: bucket index of 2^0 (the lowest bit of an FP64 subnormal, 2^-1074, minus 53 bits of significand headroom)
BUCKET_OFFSET = 1126
#: significand halves: low 27 bits, high 26 bits
HALF_BITS = 27
BUCKETS = BUCKET_OFFSET + 1024 + HALF_BITS


class EmulatorRefusal(ValueError):
    """A refusal of the emulator itself (a code the torch candidate does not have)."""

    def __init__(self, code: str, detail: str = "") -> None:
        self.code = code
        super().__init__(f"{code}: {detail}" if detail else code)


class ShardCountMismatch(Exception):
    """The case names a number of shards other than this group's ranks: not run (``unsupported``)."""


@dataclass(frozen=True)
class Span:
    """The global IDs ``start <= v < end`` a rank owns in one case."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def even_spans(vocab: int, world: int) -> list[Span]:
    """``world`` contiguous spans whose sizes differ by at most one, larger first (some may be empty)."""
    base, extra = divmod(vocab, world)
    spans, start = [], 0
    for r in range(world):
        end = start + base + (1 if r < extra else 0)
        spans.append(Span(start, end))
        start = end
    return spans


def checked_spans(ranges: Sequence[Sequence[int]], vocab: int, world: int) -> list[Span]:
    """The case's global shard ranges as spans, one per rank; BAD_SHARD_RANGES unless they are
    nonempty, contiguous and cover ``0..V-1``."""
    spans = [Span(int(a), int(b)) for a, b in ranges]
    starts_ok = all(s.start == (spans[i - 1].end if i else 0) and s.size > 0 for i, s in enumerate(spans))
    if not spans or not starts_ok or spans[-1].end != vocab:
        raise EmulatorRefusal("BAD_SHARD_RANGES", f"{ranges} do not partition 0..{vocab - 1}")
    if len(spans) != world:
        raise ShardCountMismatch(f"the case has {len(spans)} shards, this group runs {world} ranks")
    return spans


@dataclass
class Rank:
    """This process's rank in the work group, and the seeded bug it runs (None: none)."""

    rank: int
    world: int
    device: torch.device
    group: dist.ProcessGroup
    mutant: str | None = None

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def ints(self, values, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.as_tensor(values, dtype=dtype, device=self.device)

    def all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM) -> torch.Tensor:
        out = tensor.clone()
        dist.all_reduce(out, op=op, group=self.group)
        return out

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """``[world, *shape]``: every rank's tensor of the same shape, in rank order."""
        parts = [torch.empty_like(tensor) for _ in range(self.world)]
        dist.all_gather(parts, tensor.contiguous(), group=self.group)
        return torch.stack(parts)

    def all_gather_ragged(self, tensor: torch.Tensor, fill: float | int) -> list[torch.Tensor]:
        """Every rank's 1-D tensor of its own length: padded to the longest with ``fill``, gathered, trimmed."""
        lengths = self.all_gather(self.ints([tensor.numel()])).reshape(-1).tolist()
        width = max(max(lengths), 1)
        padded = torch.full((width,), fill, dtype=tensor.dtype, device=self.device)
        padded[: tensor.numel()] = tensor
        gathered = self.all_gather(padded)
        return [gathered[r, :n] for r, n in enumerate(lengths)]

    def broadcast(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        out = tensor.clone().contiguous()
        dist.broadcast(out, src=src, group=self.group)
        return out

    def agree(self, local: str | None, priority: Sequence[str]) -> None:
        """Raise on every rank the highest-priority refusal any rank found (an all-reduce MIN
        over priority positions), so every rank refuses with the same code at the same point."""
        position = priority.index(local) if local is not None else len(priority)
        agreed = int(self.all_reduce(self.ints([position]), dist.ReduceOp.MIN)[0])
        if agreed < len(priority):
            raise CandidateError(priority[agreed], "agreed over the ranks")

    def exact_sum(self, values: torch.Tensor) -> list[Fraction]:
        """The exact all-reduced sums of the rows of nonnegative finite ``values`` ``[..., n]``
        (one per leading index, flattened)."""
        return [bucket_value(row) for row in self.all_reduce(exact_buckets(values)).reshape(-1, BUCKETS).tolist()]

    def gather_exact_sums(self, values: torch.Tensor) -> list[Fraction]:
        """Every rank's exact local sum of a 1-D tensor, in rank order (a report, not a reduction)."""
        return [bucket_value(row) for row in self.all_gather(exact_buckets(values)).tolist()]


def exact_buckets(values: torch.Tensor) -> torch.Tensor:
    """int64 buckets ``[..., BUCKETS]`` with ``sum_i bucket_i * 2^(i - BUCKET_OFFSET)`` = the exact sum
    of each row of nonnegative finite ``values`` ``[..., n]`` (converted to FP64 exactly)."""
    values = values.to(torch.float64)
    mantissa, exponent = torch.frexp(values)
    significand = (mantissa * float(1 << 53)).to(torch.int64)
    base = exponent.to(torch.int64) - 53 + BUCKET_OFFSET
    buckets = torch.zeros(values.shape[:-1] + (BUCKETS,), dtype=torch.int64, device=values.device)
    buckets.scatter_add_(-1, base, significand & ((1 << HALF_BITS) - 1))
    buckets.scatter_add_(-1, base + HALF_BITS, significand >> HALF_BITS)
    return buckets


def bucket_value(buckets: Sequence[int]) -> Fraction:
    """The exact rational held by a bucket vector."""
    total = sum(count << i for i, count in enumerate(buckets) if count)
    return Fraction(total, 1 << BUCKET_OFFSET)


def fp64(value: Fraction, code: str = "INCONSISTENT_ALLOCATION") -> float:
    """``value`` correctly rounded to FP64; refused with ``code`` when it overflows."""
    try:
        return float(value)
    except OverflowError:
        raise CandidateError(code, "an all-reduced sum overflows FP64") from None
