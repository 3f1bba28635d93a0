"""The worker endpoint and the verifier's driving role, end to end on loopback, against the spec.

Rounds between a worker (the drafter leader, sampling with the torch candidate
under the RNG ABI) and a target (every frame through the endpoint's own
receiver, verification with the torch candidate) must equal the spec draw for
draw: the tokens, every q row, the accepted count and the correction or bonus
token. A retried STEP gets the identical frames (R24); a STEP the worker cannot
serve gets a COMPLETION with status FAILED, which discards the proposal (R25).
"""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest

pytest.importorskip("torch")

from endpoint_servers import check_committed_round  # noqa: E402

from qconform.adapters.endpoint import control, layout, stream  # noqa: E402
from qconform.adapters.endpoint import worker as worker_module  # noqa: E402
from qconform.adapters.endpoint.codec import Decoder, encode  # noqa: E402
from qconform.adapters.endpoint.deployment import hello_config  # noqa: E402
from qconform.adapters.endpoint.model import DraftModel, TargetModel  # noqa: E402
from qconform.adapters.endpoint.target import Target  # noqa: E402
from qconform.adapters.endpoint.worker import Worker, WorkerEndpoint  # noqa: E402
from qconform.spec.proposal import SupportPolicy  # noqa: E402

pytestmark = pytest.mark.rules("R01", "R08", "R11", "R15", "R16", "R22", "R24", "R25")

RUN_S = 30.0


async def rounds(vocab: int, policy: int, count: int, seed: int = 0x5EED, target_class: type[Target] = Target):
    config = hello_config(vocab=vocab, max_support=16)
    model = DraftModel.random(vocab, seed=7)
    target_model = TargetModel.near(model, noise=0.3)
    worker = WorkerEndpoint(config, model)
    target = target_class(config, target_model, "127.0.0.1", await worker.start(), seed=seed, support_policy=policy)
    try:
        await asyncio.wait_for(target.run(count), RUN_S)
    finally:
        await target.close()
        await worker.close()
    return target, model, target_model


@pytest.mark.parametrize("vocab, policy", [(48, 0), (64, 16)])
def test_rounds_equal_the_spec_draw_for_draw(vocab, policy):
    target, model, target_model = asyncio.run(rounds(vocab, policy, 4, seed=(1 << 40) + 3))
    support = SupportPolicy.top_k(policy) if policy else SupportPolicy.dense()
    assert [r.outcome for r in target.records] == ["committed"] * 4
    for before, after in itertools.pairwise(target.records):
        assert after.anchor == before.new_committed and after.previous == before.token
    accepted = 0
    for record in target.records:
        check_committed_round(model, target_model, record, support)
        assert record.rows is not None and record.accepted is not None  # a committed round holds both
        assert all((row.ids is None) == (policy == 0) for row in record.rows)
        accepted += record.accepted
    assert accepted > 0  # the near target accepts some drafts


class CountsSpy(Target):
    """A target that records the counts array each round is verified from (None: its rows stacked)."""

    async def commit(self, lane, record, tokens, rows, counts=None) -> None:
        self.__dict__.setdefault("given", []).append(counts)
        await super().commit(lane, record, tokens, rows, counts)


class StackingTarget(CountsSpy):
    """Seeded bug: the round's counts array is not handed on; the rows are stacked (a copy)."""

    async def commit(self, lane, record, tokens, rows, counts=None) -> None:
        await super().commit(lane, record, tokens, rows, None)


@pytest.mark.parametrize("target_class", [CountsSpy, StackingTarget])
@pytest.mark.parametrize("vocab, policy", [(48, 0), (64, 16)])
def test_a_dense_round_is_verified_from_the_counts_its_rows_were_validated_into(vocab, policy, target_class):
    target, _, _ = asyncio.run(rounds(vocab, policy, 3, target_class=target_class))
    given = target.__dict__["given"]
    assert [r.outcome for r in target.records] == ["committed"] * 3 and len(given) == 3
    if policy:
        assert given == [None] * 3  # sparse rows: their dense views, stacked
        return
    uncopied = []
    for q, r in zip(given, target.records):
        assert r.rows is not None  # 3 rounds: none released yet
        uncopied.append(
            q is not None and q.shape == (layout_depth(target), vocab) and all(row.counts.base is q for row in r.rows)
        )
    assert uncopied == [target_class is CountsSpy] * 3


def layout_depth(target: Target) -> int:
    assert target.receiver.negotiated is not None
    return target.receiver.negotiated["depth"]


async def raw_link(worker: WorkerEndpoint, answer: bool = True):
    """A bare connection to the worker, its HELLO read and (``answer``) accepted: (reader, writer, session)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", await worker.start())
    item = await stream.read_item(reader, Decoder(), worker.hello)
    assert item is not None
    hello = Decoder().decode(item.data, None)
    if answer:
        accepted = {"session_id": hello["session_id"], "status": layout.HELLO_ACCEPTED, "reason": bytes(32)}
        await stream.send(writer, encode(layout.HELLO_ANSWER, accepted))
    return reader, writer, hello["session_id"]


async def read_frames(reader, params, count: int) -> list[layout.FrameBytes]:
    frames = []
    for _ in range(count):
        item = await asyncio.wait_for(stream.read_item(reader, Decoder(), params), RUN_S)
        assert item is not None
        frames.append(item.data)
    return frames


def test_retried_step_gets_identical_frames_and_a_bad_step_fails():
    async def scenario():
        config = hello_config(vocab=32, max_support=8)
        worker = WorkerEndpoint(config, DraftModel.random(32, seed=1))
        reader, writer, session = await raw_link(worker)
        params = {**config, "session_id": session}
        common = {"session_id": session, "slot": 2}
        step = {
            **common,
            "generation": 1,
            "round": 1,
            "anchor": 50,
            "support_policy": 8,
            "context_version": 1,
            "temperature": 0x3F800000,
            "depth": 5,
            "prefix_digest": bytes(32),
        }
        await stream.send(
            writer,
            encode(layout.RESET, {**common, "seed": 9, "generation": 1, "committed": 50, "token": -1}),
            encode(layout.STEP, step),
        )
        first = await read_frames(reader, params, 6)
        await stream.send(writer, encode(layout.STEP, step))
        again = await read_frames(reader, params, 6)
        await stream.send(writer, encode(layout.STEP, {**step, "round": 2, "anchor": 51}))
        failed = await read_frames(reader, params, 1)
        writer.close()
        await worker.close()
        return first, again, failed[0]

    first, again, failed = asyncio.run(scenario())
    assert first == again
    params = {**hello_config(vocab=32, max_support=8), "session_id": 0}
    messages = [Decoder().decode(frame, params) for frame in first]
    assert [m.type for m in messages] == [layout.REPLY] * 5 + [layout.COMPLETION]
    assert [m["position"] for m in messages[:5]] == [50, 51, 52, 53, 54]
    assert all(m["representation"] == layout.REPR_SPARSE and m["entry_count"] <= 8 for m in messages[:5])
    completion = Decoder().decode(failed, params)
    assert completion.type == layout.COMPLETION
    # the busy slot's STEP is refused: FAILED, no rows, the checksum of no bytes, row_count = the depth
    assert (completion["status"], completion["round"], completion["anchor"]) == (layout.STATUS_FAILED, 2, 51)
    assert (completion["reply_bytes"], completion["reply_checksum"], completion["row_count"]) == (0, 0, 5)


def test_worker_control_configure_model_and_trace():
    async def scenario():
        worker = WorkerEndpoint(hello_config(vocab=16, max_support=4), DraftModel.random(16))
        reader, writer, _ = await raw_link(worker)

        async def ask(obj):
            await stream.send(writer, control.json_envelope(control.COMMAND, obj))
            item = await stream.read_item(reader, Decoder(), None)
            assert item is not None
            return control.json_body(item.data)

        model = DraftModel.random(24, seed=5)
        answers = [
            await ask({"op": "about"}),
            await ask({"op": "configure", "model": model.to_json(), "hello": {"vocab": 24}}),
            await ask({"op": "configure", "model": model.to_json()}),
            await ask({"op": "model"}),
            await ask({"op": "trace", "slot": 3}),
            await ask({"op": "launch"}),
        ]
        writer.close()
        await worker.close()
        return model, answers

    model, (about, bad, ok, got, trace, unknown) = asyncio.run(scenario())
    assert about["role"] == "worker" and about["families"] == ["proposal_chain", "worker_sessions"]
    assert "error" in bad and ok == {"ok": True}
    assert DraftModel.from_json(got["model"]).base_logits.equal(model.base_logits)
    assert trace == {"draws": []}
    assert "unknown op" in unknown["error"]


def test_every_frame_is_fed_in_one_thread(monkeypatch):
    """The worker samples in its one sampler thread, not asyncio's default pool, which adds a thread (and
    with it a glibc malloc arena that keeps freed rounds) whenever a call beats the last thread to idle:
    the worker's RSS band of issue #25 (docs/endpoint.md, "The bound")."""
    threads: set[int] = set()
    feed = Worker.feed

    def recorded(self, connection, data):
        threads.add(threading.get_ident())
        return feed(self, connection, data)

    monkeypatch.setattr(Worker, "feed", recorded)
    target, _, _ = asyncio.run(rounds(32, 8, 60))
    assert len(target.records) == 60
    assert len(threads) == 1 and threading.get_ident() not in threads, threads


def test_ended_connections_leave_a_bounded_record(monkeypatch):
    """A served worker keeps the outcomes of the newest ``ENDED_KEPT`` ended connections only, however
    many it served (each ends here by its answer watchdog): the newest is still answered, the oldest not
    (docs/endpoint.md, "The control protocol")."""
    monkeypatch.setattr(control, "ENDED_KEPT", 4)
    monkeypatch.setattr(worker_module, "STATUS_WAIT_S", 0.05)
    connections = 13

    async def scenario():
        worker = WorkerEndpoint(hello_config(vocab=16, max_support=4), DraftModel.random(16), answer_timeout_s=0.01)
        port = await worker.start()
        for _ in range(connections):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            while await asyncio.wait_for(reader.read(1 << 16), RUN_S):  # HELLO, then the worker ends it
                pass
            writer.close()
        while len(worker.bound):  # the last connection's Disconnect
            await asyncio.sleep(0.005)
        kept = sorted(worker.ended), sorted(worker.disconnects)
        newest = await worker.awaited(worker.disconnects, connections)
        try:
            await worker.awaited(worker.ended, 1)
            oldest = "answered"
        except control.ControlError as error:
            oldest = str(error)
        await worker.close()
        return kept, newest, oldest

    kept, newest, oldest = asyncio.run(scenario())
    assert kept == ([10, 11, 12, 13], [10, 11, 12, 13])
    assert newest.verdict == "ignore"  # a Disconnect after the watchdog ended the connection: nothing to end
    assert oldest == "connection 1 did not end, or ended before the newest 4, whose outcomes are kept"
