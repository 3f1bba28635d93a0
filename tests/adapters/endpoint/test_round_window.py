"""The driving target's memory is bounded (issue #25): a window of round records, rows for fewer, ``rounds`` by range.

A target with a record window of 5 and a row window of 2 drives 4 rounds on
2 slots (8 rounds). It keeps the 5 newest records, only the 2 newest resolved
rounds hold their q rows, ``on_round`` saw all 8 whole, and the ``rounds``
control op answers by ``seq`` range, naming the oldest record it still has.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("torch")

from qconform.adapters.endpoint import control, stream  # noqa: E402
from qconform.adapters.endpoint.codec import Decoder  # noqa: E402
from qconform.adapters.endpoint.deployment import hello_config  # noqa: E402
from qconform.adapters.endpoint.model import DraftModel, TargetModel  # noqa: E402
from qconform.adapters.endpoint.receiver import JOURNAL_WINDOW, Receiver  # noqa: E402
from qconform.adapters.endpoint.target import RoundRecord, Target  # noqa: E402
from qconform.adapters.endpoint.verifier import VerifierEndpoint  # noqa: E402
from qconform.adapters.endpoint.worker import WorkerEndpoint  # noqa: E402

VOCAB, SLOTS, ROUNDS, RECORDS, ROWS = 32, 2, 4, 5, 2
RUN_S = 30.0


async def ask(port: int, request: dict) -> dict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await stream.send(writer, control.json_envelope(control.COMMAND, request))
    item = await asyncio.wait_for(stream.read_item(reader, Decoder(), None), RUN_S)
    writer.close()
    assert item is not None
    return control.json_body(item.data)


async def windowed_run() -> tuple[Target, list[tuple[int, int]], list[dict]]:
    config = hello_config(vocab=VOCAB, max_support=8)
    model = DraftModel.random(VOCAB, seed=3)
    worker = WorkerEndpoint(config, model)
    seen: list[tuple[int, int]] = []

    def on_round(record: RoundRecord) -> None:  # every round, whole, as it resolves
        seen.append((record.seq, len(record.rows or [])))

    target = Target(
        config,
        TargetModel.near(model),
        "127.0.0.1",
        await worker.start(),
        slots=SLOTS,
        record_window=RECORDS,
        row_window=ROWS,
        on_round=on_round,
    )
    verifier = VerifierEndpoint(config)
    verifier.target = target
    port = await verifier.start()
    try:
        await asyncio.wait_for(target.run(ROUNDS), RUN_S)
        answers = [
            await ask(port, request)
            for request in (
                {"op": "rounds"},
                {"op": "rounds", "from": 0},
                {"op": "rounds", "from": 6, "limit": 1},
                {"op": "rounds", "from": 99},
                {"op": "rounds", "from": -1},
            )
        ]
    finally:
        for closing in (verifier, target, worker):
            await closing.close()
    return target, seen, answers


@pytest.fixture(scope="module")
def windowed():
    return asyncio.run(windowed_run())


def test_records_and_rows_are_windowed(windowed):
    target, seen, _ = windowed
    total = SLOTS * ROUNDS
    assert target.opened == total
    assert [r.seq for r in target.records] == list(range(total - RECORDS, total))
    assert all(len(lane.records) <= RECORDS for lane in target.lanes)
    holding = [r for r in target.records if r.rows]
    assert len(holding) == ROWS and all(r.rows is None for r in target.records if r not in holding)
    assert len(target.holding_rows) == ROWS
    # every round went to on_round once, whole (a dense committed round: DEPTH rows)
    assert sorted(seq for seq, _ in seen) == list(range(total))
    assert all(rows == 5 for _, rows in seen)


def test_rounds_answer_by_range(windowed):
    _, _, (whole, from_zero, one, past, bad) = windowed
    total = SLOTS * ROUNDS
    oldest = total - RECORDS
    assert [r["seq"] for r in whole["rounds"]] == list(range(oldest, total))
    assert (whole["first"], whole["next"], whole["opened"]) == (oldest, total, total)
    # a range older than the window starts at the oldest kept: the gap is visible in "first"
    assert [r["seq"] for r in from_zero["rounds"]] == list(range(oldest, total)) and from_zero["first"] == oldest
    assert [r["seq"] for r in one["rounds"]] == [6] and one["next"] == 7
    assert (past["rounds"], past["next"]) == ([], total)
    assert "error" in bad
    released = [r for r in whole["rounds"] if r["rows"] is None]
    assert len(released) == RECORDS - ROWS and all(r["outcome"] == "committed" for r in released)


def test_the_receiver_journal_is_windowed():
    receiver = Receiver(hello_config(vocab=VOCAB, max_support=8))
    for index in range(JOURNAL_WINDOW + 3):
        receiver.journal.append({"event": "consumed", "round": index})
    assert len(receiver.journal) == JOURNAL_WINDOW and receiver.journal[0]["round"] == 3
