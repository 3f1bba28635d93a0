"""One dyadic24 q row, dense or sparse (R03, R04, R07, R19).

A q row is the exact categorical that sampled one draft token: integer counts
``c_v >= 0`` summing to exactly ``M = 2^24``, with ``q(v) = c_v / M`` (R03). A
sparse row lists its support by strictly ascending global IDs with positive
counts and declares zero everywhere else (R07); a zero count is exactly zero
probability (R04).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator, Sequence

from qconform.spec.constants import M
from qconform.spec.errors import refuse
from qconform.spec.rules import defines

DENSE = "dense"
SPARSE = "sparse"


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


#: One q row as given: its sparse IDs (None for a dense row) and its counts.
RawRow = tuple[Sequence[int] | None, Sequence[int]]


@defines("R03", "R07", "R19")
def check_q_rows(vocab: int, rows: Sequence[RawRow]) -> None:
    """Refuse the first row of ``refusal_order.QROW_REFUSALS`` that fails on **any** of ``rows``.

    Each condition is judged over every row given (one q row, or every q row of a request), so
    which entry, or which row, is bad first never decides the code: the shapes, then any ID out
    of range, then any ID not above the one before it, then any zero sparse count, then the sums
    (R03, R07, R19; docs/formats/categorical_sampling.md, "Refusal precedence").
    """
    for ids, counts in rows:
        if ids is None and len(counts) != vocab:
            raise refuse("BAD_SHAPE", f"a dense q row needs exactly {vocab} counts, not {len(counts)}")
        if ids is not None and len(ids) != len(counts):
            raise refuse("BAD_SHAPE", f"{len(ids)} sparse IDs but {len(counts)} counts")
    sparse = [(ids, counts) for ids, counts in rows if ids is not None]
    for ids, _ in sparse:
        for token in ids:
            if not isinstance(token, int) or isinstance(token, bool):
                raise refuse("BAD_SPARSE_SUPPORT", f"sparse ID {token!r} is not an integer")
    for ids, _ in sparse:
        outside = [token for token in ids if not 0 <= token < vocab]
        if outside:
            raise refuse("TOKEN_OUT_OF_RANGE", f"sparse ID {outside[0]} outside vocabulary {vocab}")
    for ids, _ in sparse:
        for previous, token in zip(ids, ids[1:]):
            if token <= previous:
                raise refuse("BAD_SPARSE_SUPPORT", f"sparse ID {token} does not ascend strictly after {previous}")
    for ids, counts in sparse:
        for token, count in zip(ids, counts):
            if is_count(count) and count == 0:
                raise refuse("BAD_SPARSE_SUPPORT", f"sparse ID {token} has a zero count")
    for _, counts in rows:
        check_counts(counts)


@defines("R03")
def check_counts(counts: Sequence[int]) -> None:
    """Refuse counts that are not nonnegative integers summing to exactly M (R03)."""
    for count in counts:
        if not is_count(count):
            raise refuse("NOT_DYADIC24", f"count {count!r} is not a nonnegative integer")
    total = sum(counts)
    if total != M:
        raise refuse("WRONG_TOTAL_MASS", f"counts sum to {total}, not M = {M}")


def check_vocab(vocab: int) -> None:
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise refuse("BAD_SHAPE", f"vocabulary size {vocab!r} is not a positive integer")


@dataclass(frozen=True)
class QRow:
    """A validated dyadic24 q row; build it with :meth:`dense` or :meth:`sparse`.

    ``ids`` is ``None`` for a dense row; ``counts`` has one entry per ID (sparse)
    or per vocabulary token (dense). Construction validates, so every QRow is a
    legal row.
    """

    vocab: int
    representation: str
    counts: tuple[int, ...]
    ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_vocab(self.vocab)
        if self.representation == DENSE:
            if self.ids is not None:
                raise refuse("BAD_SHAPE", "a dense row has no IDs")
        elif self.representation == SPARSE:
            if self.ids is None:
                raise refuse("BAD_SHAPE", "a sparse row needs its IDs")
        else:
            raise refuse("BAD_SHAPE", f"representation {self.representation!r} is not dense or sparse")
        check_q_rows(self.vocab, [(self.ids, self.counts)])

    @classmethod
    @defines("R03", "R04")
    def dense(cls, counts: Sequence[int]) -> "QRow":
        """A dense row over vocabulary ``len(counts)``; counts sum to exactly M (R03)."""
        counts = tuple(counts)
        if not counts:
            raise refuse("EMPTY_ROW", "a dense q row needs at least one count")
        return cls(vocab=len(counts), representation=DENSE, counts=counts)

    @classmethod
    @defines("R03", "R04", "R07", "R19")
    def sparse(cls, vocab: int, ids: Sequence[int], counts: Sequence[int]) -> "QRow":
        """A sparse row: strictly ascending in-range IDs with positive counts summing to M."""
        return cls(vocab=vocab, representation=SPARSE, counts=tuple(counts), ids=tuple(ids))

    @defines("R04", "R07")
    def count(self, v: int) -> int:
        """The count ``c_v``; zero outside a sparse support (R04)."""
        if not isinstance(v, int) or not 0 <= v < self.vocab:
            raise refuse("TOKEN_OUT_OF_RANGE", f"token {v!r} outside vocabulary {self.vocab}")
        if self.ids is None:
            return self.counts[v]
        index = bisect_left(self.ids, v)
        if index < len(self.ids) and self.ids[index] == v:
            return self.counts[index]
        return 0

    @defines("R03")
    def q(self, v: int) -> Fraction:
        """The exact probability ``q(v) = c_v / M``."""
        return Fraction(self.count(v), M)

    @defines("R04", "R07")
    def support(self) -> Iterator[tuple[int, int]]:
        """(token, count) for every token of positive count, in ascending ID order."""
        tokens = range(self.vocab) if self.ids is None else self.ids
        for token, count in zip(tokens, self.counts):
            if count > 0:
                yield token, count

    @defines("R04", "R07")
    def dense_counts(self) -> list[int]:
        """All ``vocab`` counts, zero outside a sparse support."""
        if self.ids is None:
            return list(self.counts)
        dense = [0] * self.vocab
        for token, count in zip(self.ids, self.counts):
            dense[token] = count
        return dense
