"""Helpers of the endpoint tests: endpoints served on a background asyncio loop, and the spec's view of a round.

Every endpoint listens on 127.0.0.1 with an ephemeral port; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING, Iterator

from qconform import soak_audit
from qconform.spec.proposal import ProposalResult, SupportPolicy
from qconform.spec.verification import RoundResult

if TYPE_CHECKING:  # torch is needed only by the tests that drive rounds
    from qconform.adapters.endpoint.model import DraftModel, TargetModel
    from qconform.adapters.endpoint.target import RoundRecord

#: seconds any single wait of a test may take
WAIT_S = 30.0


class LoopThread:
    """An asyncio loop on a daemon thread, so synchronous code (the TCP adapter) can talk to endpoints."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = WAIT_S):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_S)
        self.loop.close()


@contextlib.contextmanager
def serving(loop: LoopThread, endpoint) -> Iterator[str]:
    """``endpoint`` listening on an ephemeral loopback port for the block; yields its tcp:// URL."""
    port = loop.run(endpoint.start("127.0.0.1", 0))
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        loop.run(endpoint.close())


#: FP32 bit patterns of a tensor, as the spec reads weights
f32_bits = soak_audit.f32_bits


def spec_round(
    model: DraftModel, target: TargetModel, record: RoundRecord, support: SupportPolicy
) -> tuple[ProposalResult, RoundResult]:
    """The spec's proposal chain and verification of the round ``record`` names (its key and prefix)."""
    named = {k: getattr(record, k) for k in ("seed", "generation", "round", "anchor", "draft_previous")}
    return soak_audit.spec_round(model, target, named, support)


def check_committed_round(model: DraftModel, target: TargetModel, record: RoundRecord, support: SupportPolicy) -> None:
    """A committed round consumed exactly the spec's q rows and tokens, and committed the spec's verdict."""
    chain, verdict = spec_round(model, target, record, support)
    assert record.tokens == chain.tokens, (record.round, record.tokens, chain.tokens)
    assert record.rows is not None, record.round  # a committed round still holds its rows
    for got, want in zip(record.rows, chain.rows, strict=True):
        assert (None if got.ids is None else got.ids.tolist()) == (None if want.q.ids is None else list(want.q.ids))
        assert got.counts.tolist() == list(want.q.counts)
    assert (record.accepted, record.token) == (verdict.accepted, verdict.emitted[-1])
    assert record.new_committed == (record.anchor + verdict.accepted + 1) % (1 << 32)
