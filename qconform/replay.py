"""Replay the RNG ABI's draws into an engine that takes a float uniform source (docs/sdk.md, "Replay").

Many engines draw through an injectable ``rng()`` that returns a float in [0, 1)
and never see Philox words. To check such an engine draw for draw, serve it the
spec's draws as floats, in the order it asks:

* a proposal draw ``u24`` is served as ``u24 / 2^24``, an acceptance, correction or
  bonus draw ``u32`` as ``u32 / 2^32``. Both are **exact** in float64: an integer
  below 2^53 times a power of two is a float64 with no rounding (:func:`as_float`),
  so the engine receives the very value the spec decides with.
* A verification round asks for the acceptance draws of x_1, x_2, ... in order; the
  call after the first rejection (x_{j+1} rejected, j accepted) is the correction
  at position ``anchor + j``, and after K acceptances the bonus at ``anchor + K``.
  Which one the engine asks for next depends on its own decision, which the stream
  cannot see; :func:`replay_round` therefore runs the round twice when it must: once
  assuming full acceptance (``a_1..a_K``, then the bonus), and, when the engine
  reports j < K accepted, again with ``a_1..a_{j+1}`` then the correction ``c_j``.
  An engine is deterministic given its draws, so the second run repeats the first
  j + 1 decisions exactly.

Every served draw is recorded (:class:`ServedDraw`: domain, position, u32), which is
what the ``draws`` of a ``verification_round`` answer report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from qconform.sdk import draw_key

R = TypeVar("R")

#: widths of the draws: proposal draws are the top 24 bits of word 0, the others all 32
PROPOSAL_BITS = 24
UNIFORM_BITS = 32


class ReplayError(RuntimeError):
    """The engine asked for a draw the round does not have (more draws than the schedule holds),
    or reported an accepted count outside 0..K."""


@dataclass(frozen=True)
class ServedDraw:
    """One draw served to the engine: its key's domain, position and draw counter, the integer
    draw (``u24`` for a proposal draw, ``u32`` otherwise) and the float it was served as."""

    domain: str
    position: int
    draw_counter: int
    draw: int
    value: float


def as_float(draw: int, bits: int) -> float:
    """``draw / 2^bits`` as a float64, exactly: ``draw < 2^bits <= 2^53``, so the quotient is
    a float64 (``math.ldexp`` scales the exponent only). Refuses a draw that does not fit."""
    if not 0 <= draw < (1 << bits) or bits > 53:
        raise ValueError(f"draw {draw} is not a {bits}-bit integer (bits <= 53)")
    return math.ldexp(draw, -bits)


class FloatStream:
    """A float uniform source: each call serves the next of a fixed list of draws and records it."""

    def __init__(self, draws: Sequence[tuple[str, int, int, int, int]]) -> None:
        """``draws``: (domain, position, draw counter, integer draw, bits) in serving order."""
        self._draws = list(draws)
        self.served: list[ServedDraw] = []

    def __call__(self) -> float:
        if len(self.served) == len(self._draws):
            raise ReplayError(
                f"the engine asked for draw {len(self.served) + 1}; this schedule holds {len(self._draws)}"
            )
        domain, position, counter, draw, bits = self._draws[len(self.served)]
        served = ServedDraw(domain, position, counter, draw, as_float(draw, bits))
        self.served.append(served)
        return served.value

    @property
    def calls(self) -> int:
        return len(self.served)


@dataclass(frozen=True)
class RoundIdentity:
    """What keys the draws of one round of one request (docs/rng-abi.md)."""

    seed: int
    generation: int
    round: int
    anchor: int

    def at(self, offset: int) -> int:
        return (self.anchor + offset) % (1 << 32)

    def draw(self, domain: str, offset: int, bits: int) -> tuple[str, int, int, int, int]:
        key = draw_key(self.seed, self.generation, self.round, self.at(offset), domain)
        return domain, self.at(offset), 0, key.u24 if bits == PROPOSAL_BITS else key.u32, bits


def proposal_stream(ident: RoundIdentity, depth: int) -> FloatStream:
    """The proposal draws of x_1..x_K as ``u24 / 2^24``, in order (positions anchor .. anchor + K - 1)."""
    return FloatStream([ident.draw("PROPOSAL", i, PROPOSAL_BITS) for i in range(depth)])


def verification_stream(ident: RoundIdentity, depth: int, accepted: int) -> FloatStream:
    """The draws of a round in which ``accepted`` drafts are accepted, in the order they are used:
    ``a_1..a_{j+1}`` then the correction ``c_j`` for j = ``accepted`` < K; ``a_1..a_K`` then the
    bonus ``c_K`` for j = K."""
    if not 0 <= accepted <= depth:
        raise ReplayError(f"accepted count {accepted} is outside 0..{depth}")
    tested = min(accepted + 1, depth)
    draws = [ident.draw("ACCEPT", i, UNIFORM_BITS) for i in range(tested)]
    return FloatStream([*draws, ident.draw("CORRECTION", accepted, UNIFORM_BITS)])


def replay_round(
    engine_round: Callable[[Callable[[], float]], R], accepted_of: Callable[[R], int], ident: RoundIdentity, depth: int
) -> tuple[R, list[ServedDraw]]:
    """Run one verification round of a float-rng engine on the spec's draws (module docstring).

    ``engine_round(rng)`` runs the engine's round with ``rng`` as its uniform source and
    returns its result; ``accepted_of(result)`` reads the number of drafts it accepted.
    Returns the result and the draws the engine consumed, in order.
    """
    stream = verification_stream(ident, depth, depth)
    result = engine_round(stream)
    accepted = accepted_of(result)
    if accepted == depth:
        return result, stream.served
    stream = verification_stream(ident, depth, accepted)
    result = engine_round(stream)
    if accepted_of(result) != accepted:
        raise ReplayError(
            f"the engine accepted {accepted} drafts, then {accepted_of(result)} on the same "
            "draws: it is not deterministic given its draws"
        )
    return result, stream.served
