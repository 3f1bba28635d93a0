"""The driving target (``qconform endpoint verifier --worker``, ``target.py``) pinned towards a worker.

A scripted fake worker on TCP, written with the spec's codec (a test may import
the spec; the target may not), checks what the target sends it:

* its HELLO_ANSWER is byte for byte the spec receiver's answer to the same HELLO
  under the same configuration, accepted or refused with its reason (R12, R13);
* after each reconnection every RESET goes above every generation the target
  used on any earlier connection (R24; docs/wire-v2.md, "Worker state machine",
  decision 7: the worker refuses anything else);
* a round the worker refuses (a FAILED COMPLETION: reply_bytes 0, checksum 0,
  row_count the depth) falls back target-only with the documented draw
  (docs/rng-abi.md, "Target-only fallback": the spec's ``target_only_draw``),
  commits it, and the next round RESETs to a new generation at the new committed
  position carrying that token (R25, R01).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Callable, TypeVar

import pytest

pytest.importorskip("torch")

from endpoint_servers import WAIT_S, f32_bits  # noqa: E402

from qconform.adapters.endpoint.answers import fields_json  # noqa: E402
from qconform.adapters.endpoint.deployment import hello_config  # noqa: E402
from qconform.adapters.endpoint.model import DraftModel, TargetModel  # noqa: E402
from qconform.adapters.endpoint.target import Target, TargetError  # noqa: E402
from qconform.generators.families.wire_frames import hello_from_json  # noqa: E402
from qconform.spec.rng_abi import RngIdentity  # noqa: E402
from qconform.spec.verification import target_rows_from_f32  # noqa: E402
from qconform.spec.wire import layout  # noqa: E402
from qconform.spec.wire.codec import completion_for, decode_frame, encode_frame  # noqa: E402
from qconform.spec.wire.fallback import target_only_draw  # noqa: E402
from qconform.spec.wire.header import parse_header  # noqa: E402
from qconform.spec.wire.messages import Hello, Reset, Step  # noqa: E402
from qconform.spec.wire.receiver import FrameIn, initial_state, step  # noqa: E402

pytestmark = pytest.mark.rules("R01", "R12", "R13", "R24", "R25")

VOCAB = 32
#: what the fake worker does with a STEP on connection n: the frames to send, or None to close the connection
Respond = Callable[[Step, int], "list[bytes] | None"]
#: a message class the fake worker's record is filtered by
MessageT = TypeVar("MessageT")


def failed(step_message: Step) -> list[bytes]:
    """A refused round, as the worker decides (a FAILED COMPLETION with no rows)."""
    return [encode_frame(replace(completion_for(step_message, [], layout.STATUS_FAILED), row_count=step_message.depth))]


class FakeWorker:
    """A scripted worker: HELLO first on every connection (session ``base + n``), then every frame the
    target sends recorded as ``(connection, message)``; STEPs answered by ``respond``."""

    def __init__(self, hello: Hello, respond: Respond = lambda step, n: failed(step)) -> None:
        self.hello = hello
        self.respond = respond
        self.connections = 0
        self.received: list[tuple[int, object]] = []
        #: connection -> the raw first frame the target sent (its HELLO_ANSWER)
        self.answers: dict[int, bytes] = {}
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        offer = replace(self.hello, session_id=self.hello.session_id + number)
        writer.write(encode_frame(offer))
        try:
            while True:
                head = await reader.readexactly(layout.HEADER_SIZE)
                data = head + await reader.readexactly(parse_header(head).payload_length)
                message = decode_frame(data, offer)
                self.answers.setdefault(number, data)
                self.received.append((number, message))
                if isinstance(message, Step):
                    frames = self.respond(message, number)
                    if frames is None:
                        return
                    for frame in frames:
                        writer.write(frame)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    def of_type(self, cls: type[MessageT]) -> list[tuple[int, MessageT]]:
        return [(n, m) for n, m in self.received if isinstance(m, cls)]


def spec_hello(config: dict) -> Hello:
    return hello_from_json(fields_json(layout.HELLO.code, config))


async def drive(fake: FakeWorker, config: dict, rounds: int, slots: int = 1, **kwargs) -> Target:
    port = await fake.start()
    target = Target(config, TargetModel.random(VOCAB), "127.0.0.1", port, slots=slots, watchdog_s=5.0, **kwargs)
    try:
        await asyncio.wait_for(target.run(rounds), WAIT_S)
    finally:
        await target.close()
        await fake.close()
    return target


@pytest.mark.parametrize("offer_changes", [{}, {"vocab": VOCAB + 1}, {"max_slots": 9}])
def test_the_hello_answer_is_the_specs(offer_changes):
    config = hello_config(vocab=VOCAB, max_support=8)
    offer = replace(spec_hello(config), **offer_changes)
    fake = FakeWorker(offer)

    async def scenario():
        try:
            await drive(fake, config, 1)
        except TargetError:
            assert offer_changes  # a refused HELLO ends the target's attempt
        return fake.answers[1]

    sent = asyncio.run(scenario())
    session_offer = replace(offer, session_id=offer.session_id + 1)
    _, verdict = step(initial_state(spec_hello(config)), FrameIn(encode_frame(session_offer)))
    assert verdict.answer is not None and sent == verdict.answer


def test_after_a_reconnection_every_reset_goes_above_every_earlier_generation():
    config = hello_config(vocab=VOCAB, max_support=8)

    def respond(step_message: Step, number: int) -> list[bytes] | None:
        return None if number <= 3 else failed(step_message)  # three links drop mid-round

    fake = FakeWorker(spec_hello(config), respond)
    asyncio.run(drive(fake, config, 3, slots=2))
    resets = fake.of_type(Reset)
    assert fake.connections >= 3 and len({n for n, _ in resets}) >= 3
    for number, reset in resets:
        earlier = [r.generation for n, r in resets if n < number and r.slot == reset.slot]
        assert all(reset.generation > g for g in earlier), (number, reset, earlier)


def test_a_round_the_worker_refuses_falls_back_with_the_documented_draw():
    config = hello_config(vocab=VOCAB, max_support=8)
    fake = FakeWorker(spec_hello(config))
    seed = (1 << 40) + 7
    target = asyncio.run(drive(fake, config, 2, seed=seed))
    p_rows = target_rows_from_f32(f32_bits(target.target.weights))
    first, second = target.records
    for record in (first, second):
        assert (record.outcome, record.reason) == ("target-only", "worker_failed")
        identity = RngIdentity(seed, record.generation, record.round, record.anchor)
        expected = target_only_draw(identity, p_rows[0])
        assert record.draw is not None and (record.draw.u32, record.draw.token) == (expected.u32, expected.token)
        assert (record.draw.position, record.draw.draw_counter) == (expected.position, expected.draw_counter)
        assert record.new_committed == record.anchor + 1
    resets = [m for _, m in fake.of_type(Reset)]
    assert len(resets) == 2 and resets[1].generation > resets[0].generation
    assert (resets[1].committed, resets[1].token) == (first.new_committed, first.token)
    assert second.anchor == first.new_committed


def test_a_target_restarted_against_a_running_worker_climbs_above_its_generations():
    """The bundled worker keeps its generations across connections: a second target starting again at
    generation 1 is refused (its STEP FAILED), falls back, RESETs above and is served from then on."""
    from qconform.adapters.endpoint.worker import WorkerEndpoint

    config = hello_config(vocab=VOCAB, max_support=8)
    model = DraftModel.random(VOCAB, seed=7)

    async def scenario():
        worker = WorkerEndpoint(config, model)
        port = await worker.start()
        records = []
        try:
            for _ in range(2):
                target = Target(config, TargetModel.near(model), "127.0.0.1", port, watchdog_s=5.0)
                try:
                    records.append(await asyncio.wait_for(target.run(2), WAIT_S))
                finally:
                    await target.close()
                while worker.active:  # the worker saw the first target's link end (its generation ended)
                    await asyncio.sleep(0.01)
        finally:
            await worker.close()
        return records

    first, second = asyncio.run(scenario())
    assert [r.outcome for r in first] == ["committed", "committed"] and first[0].generation == 1
    assert [(r.outcome, r.reason, r.generation) for r in second] == [
        ("target-only", "worker_failed", 1),
        ("committed", None, 2),
    ]
