"""A dense round's counts [K, V]: validated in place, given to the verifier as they are (receiver.py).

The receiver gives each open dense round one int32 counts array [K, V]; the
validator (native pass and NumPy path alike) writes a dense REPLY's counts
straight into the round's first row not yet accepted, and the target verifies
the round from that array (``Receiver.consumable_counts``), no stack. What must
hold, each shown to catch a seeded bug: the counts land in the round's row at
validation (no copy after it), a retry (identical or not) and a refused row
after the round became consumable leave the accepted rows as they were, a
refused row's round is never readable, and rows consumed stay valid after their
round closed and the next one filled (no array reused). Sparse rounds keep their
rows; their dense view is built when asked.
"""

from __future__ import annotations

import numpy as np
import pytest

from qconform.adapters.endpoint import layout
from qconform.adapters.endpoint.codec import Message, encode
from qconform.adapters.endpoint.deployment import hello_config
from qconform.adapters.endpoint.receiver import ACCEPT, DUPLICATE, REJECT, Receiver
from qconform.adapters.endpoint.replies import completion_frame, row_reply
from qconform.adapters.endpoint.validation import native_module

pytestmark = pytest.mark.rules("R03", "R16", "R17")

VOCAB, STRIDE = 40, 48
PARAMS = hello_config(vocab=VOCAB, dense_stride=STRIDE, max_support=VOCAB)
DEPTH = PARAMS["depth"]
NATIVE = native_module()
#: both ways of validating a dense row: the native pass (when built) and the NumPy path
PATHS = [
    pytest.param(
        NATIVE, id="native", marks=pytest.mark.skipif(NATIVE is None, reason="the native module is not built")
    ),
    pytest.param(None, id="numpy"),
]


def counts_row(rng: np.random.Generator, total: int = layout.M) -> tuple[np.ndarray, int]:
    """Counts over the vocabulary summing to ``total`` (a few zeros), and a token with a positive count."""
    weights = rng.random(VOCAB) * (rng.random(VOCAB) > 0.2)
    counts = np.floor(weights / weights.sum() * total).astype(np.int64)
    top = int(counts.argmax())
    counts[top] += total - int(counts.sum())
    return counts, top


class Session:
    """A receiver under ``PARAMS`` with slot 0 live, and the frames of its rounds."""

    def __init__(self, native, receiver_class: type[Receiver] = Receiver) -> None:
        self.receiver = receiver_class(PARAMS)
        self.receiver.validator.native = native
        self.rng = np.random.default_rng(11)
        self.committed = 0
        assert self.feed(encode(layout.HELLO, PARAMS)).kind == ACCEPT
        self.command(layout.RESET, seed=5, generation=1, committed=0, token=layout.NO_TOKEN)

    def feed(self, data: bytes):
        return self.receiver.feed(data)

    def command(self, message_type: int, **fields) -> None:
        data = encode(message_type, {"session_id": PARAMS["session_id"], "slot": 0, **fields})
        verdict = self.feed(data)
        assert verdict.kind == ACCEPT, verdict

    def step(self, round_id: int, policy: int = 0) -> Message:
        fields = {
            "session_id": PARAMS["session_id"],
            "generation": 1,
            "round": round_id,
            "anchor": self.committed,
            "support_policy": policy,
            "context_version": 1,
            "temperature": 0x3F800000,
            "slot": 0,
            "depth": DEPTH,
            "prefix_digest": bytes(32),
        }
        self.command(layout.STEP, **{k: v for k, v in fields.items() if k not in ("session_id", "slot")})
        return Message(layout.STEP, fields)

    def round(self, round_id: int, policy: int = 0) -> tuple[Message, list, np.ndarray]:
        """A round fed whole (K REPLYs, its COMPLETION): the step, the REPLY frames, the counts sent."""
        step = self.step(round_id, policy)
        rows = [counts_row(self.rng) for _ in range(DEPTH)]
        ids = np.arange(VOCAB) if policy else None
        replies = [row_reply(step, k, token, counts, ids, STRIDE) for k, (counts, token) in enumerate(rows)]
        for reply in replies:
            assert self.feed(reply.data).kind == ACCEPT
        assert self.feed(completion_frame(step, replies)).kind == ACCEPT
        return step, replies, np.stack([counts for counts, _ in rows])

    def commit(self, step: Message) -> None:
        self.committed = step["anchor"] + 1
        self.command(
            layout.COMMIT, generation=1, round=step["round"], new_committed=self.committed, token=0, accepted=0
        )


def in_row(counts: np.ndarray, rows: np.ndarray, position: int) -> bool:
    """Whether ``counts`` is row ``position`` of ``rows`` itself (not a copy)."""
    row = rows[position]
    return (
        counts.base is rows
        and counts.__array_interface__["data"][0] == row.__array_interface__["data"][0]
        and counts.shape == row.shape
    )


class NewArrayPerRow(Receiver):
    """Seeded bug: the validator writes each row into an array of its own (the round's array is
    filled by a copy after validation)."""

    def row_slot(self, message, params):
        super().row_slot(message, params)
        return None


class RowByPosition(Receiver):
    """Seeded bug: the counts go to the row the REPLY's position names, accepted or not."""

    def row_slot(self, message, params):
        current = self.slots[message["slot"]].open
        if super().row_slot(message, params) is None and (current is None or current.counts is None):
            return None
        assert current is not None and current.counts is not None
        return current.counts[(message["position"] - current.step["anchor"]) % layout.POSITIONS]


class ReusedArray(Receiver):
    """Seeded bug: one counts array per slot, reused by every round."""

    def row_slot(self, message, params):
        current = self.slots[message["slot"]].open
        if current is not None and current.counts is None:
            kept = getattr(self, "kept", None)
            current.counts = self.kept = kept if kept is not None else np.empty((DEPTH, VOCAB), dtype=np.int32)
        return super().row_slot(message, params)


@pytest.mark.parametrize("native", PATHS)
@pytest.mark.parametrize("receiver_class", [Receiver, NewArrayPerRow])
def test_the_validator_writes_each_row_into_the_rounds_counts(native, receiver_class):
    session = Session(native, receiver_class)
    receiver = session.receiver
    step = session.step(1)
    sent = []
    replies = []
    for k in range(DEPTH):
        counts, token = counts_row(session.rng)
        reply = row_reply(step, k, token, counts, None, STRIDE)
        _, row = receiver.check(reply.data)  # the stateless checks alone: the row already sits in its slot
        current = receiver.slots[0].open
        assert row is not None and current is not None and current.counts is not None
        if receiver_class is NewArrayPerRow:
            assert not in_row(row.counts, current.counts, k)
            return
        assert in_row(row.counts, current.counts, k)
        assert session.feed(reply.data).kind == ACCEPT
        sent.append(counts)
        replies.append(reply)
    assert receiver.consumable_counts(0) is None  # no COMPLETION yet
    assert session.feed(completion_frame(step, replies)).kind == ACCEPT
    q = receiver.consumable_counts(0)
    assert q is not None and q.dtype == np.int32 and q.shape == (DEPTH, VOCAB)
    assert (q == np.stack(sent)).all()
    tokens_rows = receiver.consumable_rows(0)
    assert tokens_rows is not None
    assert all(in_row(row.counts, q, k) for k, row in enumerate(tokens_rows[1]))


@pytest.mark.parametrize("native", PATHS)
@pytest.mark.parametrize("receiver_class", [Receiver, RowByPosition])
def test_retries_and_refused_rows_leave_the_accepted_rows(native, receiver_class):
    session = Session(native, receiver_class)
    receiver = session.receiver
    step = session.step(1)
    rows = [counts_row(session.rng) for _ in range(DEPTH)]
    replies = [row_reply(step, k, token, counts, None, STRIDE) for k, (counts, token) in enumerate(rows)]
    sent = np.stack([counts for counts, _ in rows])
    assert session.feed(replies[0].data).kind == ACCEPT
    assert session.feed(replies[1].data).kind == ACCEPT
    assert session.feed(replies[0].data).kind == DUPLICATE  # an identical retry while the round fills
    for reply in replies[2:]:
        assert session.feed(reply.data).kind == ACCEPT
    assert session.feed(completion_frame(step, replies)).kind == ACCEPT
    other, token = counts_row(np.random.default_rng(3))
    short, short_token = counts_row(np.random.default_rng(4), layout.M - 1)
    for data, kind, reason in (
        (replies[0].data, DUPLICATE, None),
        (row_reply(step, 0, token, other, None, STRIDE).data, REJECT, "RETRY_MISMATCH"),
        (row_reply(step, 0, short_token, short, None, STRIDE).data, REJECT, "WRONG_TOTAL_MASS"),
        (row_reply(step, DEPTH - 1, token, other, None, STRIDE).data, REJECT, "RETRY_MISMATCH"),
    ):
        verdict = session.feed(data)
        assert (verdict.kind, verdict.reason) == (kind, reason)
        q = receiver.consumable_counts(0)  # a consumable round is kept through a worker's fault (R28)
        assert q is not None
        if receiver_class is RowByPosition and kind == REJECT:
            assert not (q == sent).all()
            return
        assert (q == sent).all()


@pytest.mark.parametrize("native", PATHS)
def test_a_round_with_a_refused_row_is_never_readable(native):
    session = Session(native)
    receiver = session.receiver
    step = session.step(1)
    counts, token = counts_row(session.rng)
    assert session.feed(row_reply(step, 0, token, counts, None, STRIDE).data).kind == ACCEPT
    zero_at = int(np.flatnonzero(counts == 0)[0])
    verdict = session.feed(row_reply(step, 1, zero_at, counts, None, STRIDE).data)  # every count written, then refused
    assert (verdict.kind, verdict.reason, verdict.discarded) == (REJECT, "ZERO_Q_AT_TOKEN", (0,))
    assert receiver.consumable_rows(0) is None and receiver.consumable_counts(0) is None


@pytest.mark.parametrize("native", PATHS)
@pytest.mark.parametrize("receiver_class", [Receiver, ReusedArray])
def test_rows_consumed_stay_valid_after_their_round_closed(native, receiver_class):
    session = Session(native, receiver_class)
    receiver = session.receiver
    first, _, sent = session.round(1)
    q = receiver.consumable_counts(0)
    tokens_rows = receiver.consumable_rows(0)
    assert q is not None and tokens_rows is not None
    session.commit(first)
    session.round(2)
    if receiver_class is ReusedArray:
        assert not (q == sent).all()
        return
    assert (q == sent).all()
    assert all((row.counts == sent[k]).all() for k, row in enumerate(tokens_rows[1]))


@pytest.mark.parametrize("native", PATHS)
def test_a_sparse_round_has_no_counts_array_and_keeps_its_rows(native):
    session = Session(native)
    _, _, sent = session.round(1, policy=VOCAB)
    assert session.receiver.consumable_counts(0) is None
    tokens_rows = session.receiver.consumable_rows(0)
    assert tokens_rows is not None
    rows = tokens_rows[1]
    assert all(row.ids is not None for row in rows)
    assert (np.stack([row.dense() for row in rows]) == sent).all()
