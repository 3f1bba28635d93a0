"""Pipelined requests (docs/shim-protocol.md, "Pipelined requests"): a child that takes the offer is
sent the next request before it answers the one it computes; replies are read in order and each
reaches its own request; a failure with requests in flight fails each of them and loses none; a
child that does not take the offer is sent one request at a time; and ``qconform accumulate`` run
with two blocks in flight gives the records, hashes and verdicts of the same run one at a time,
on every accumulated family, also when the child is killed in the middle."""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest
from harness_stubs import spec_run_batch
from test_accumulate_blocks import in_process_blocks

from qconform.generators.accumulated import FAMILIES
from qconform.harness.adapter import AdapterError, AdapterStartError
from qconform.harness.run.accumulate import accumulate, case_vector
from qconform.harness.transport.client import open_adapter
from qconform.harness.transport.host import Host
from qconform.harness.transport.shim_protocol import PIPELINE_DEPTH, decode_line
from qconform.harness.transport.window import ALIGN, BlockWindow

pytestmark = pytest.mark.rules("R22")

#: a JSON-lines shim whose ``run_block`` answers every case's record words with the request's id, so
#: each reply says which request it answers. ``QCONFORM_PROBE_CONFIG`` is merged into its config;
#: its behaviour (argv[1]): ``hold`` reads the request behind the first block before answering it
#: (it cannot answer unless two are in flight), ``swap`` answers two blocks in the wrong order,
#: ``die`` exits once it holds two blocks, ``slow`` sleeps argv[2] seconds before each block's reply,
#: ``ahead`` answers a block with its id + 1000 when a request is already waiting in its pipe, and
#: ``behind`` waits until the next request has arrived (in its pipe or its read buffer) before it
#: answers a block with its id + 1000
PROBE_SHIM = textwrap.dedent(
    """
    import base64, json, os, select, sys, time
    behaviour = sys.argv[1]
    unread = b""  # bytes read from stdin and not yet taken as a line: a request may wait here too

    def read_more():
        global unread
        chunk = os.read(0, 65536)
        unread += chunk
        return chunk

    def readline():
        global unread
        while b"\\n" not in unread and read_more():
            pass
        line, _, unread = unread.partition(b"\\n")
        return line

    def waiting():  # whether a request is already waiting: read, or in the pipe
        return bool(unread) or bool(select.select([0], [], [], 0)[0])

    def arrives():  # whether a request arrives (waits for it)
        return bool(unread) or bool(read_more())

    def reply_to(request):
        reply = {"id": request["id"], "status": "ok"}
        if request["op"] == "get_config":
            reply["config"] = {"name": "probe", "protocol": 1, "precision": {},
                               "capabilities": {"families": ["rng_abi"]}}
            reply["config"] |= json.loads(os.environ.get("QCONFORM_PROBE_CONFIG", "{}"))
        elif request["op"] == "run_block":
            cases = request["block"]["seed"]["shape"][0]
            ahead = (behaviour == "ahead" and waiting()) or (behaviour == "behind" and arrives())
            mark = request["id"] + (1000 if ahead else 0)
            words = mark.to_bytes(4, "little") * (cases * 10)
            reply["records"] = {"dtype": "u32", "shape": [cases, 10], "b64": base64.b64encode(words).decode()}
        return reply

    def send(reply):
        sys.stdout.buffer.write((json.dumps(reply) + "\\n").encode())
        sys.stdout.buffer.flush()

    held = []
    while line := readline():
        request = json.loads(line)
        if request["op"] == "run_block" and behaviour in ("hold", "swap", "die"):
            held.append(request)
            if len(held) < 2:
                continue
            if behaviour == "die":
                sys.exit(5)
            for request in held[::-1] if behaviour == "swap" else held:
                send(reply_to(request))
            held = []
            continue
        if request["op"] == "run_block" and behaviour == "slow":
            time.sleep(float(sys.argv[2]))
        send(reply_to(request))
        if request["op"] == "shutdown":
            break
    """
)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    path = tmp_path_factory.mktemp("pipeline") / "probe_shim.py"
    path.write_text(PROBE_SHIM)

    def command(*behaviour: str) -> str:
        return f"shim:{sys.executable} {path} {' '.join(behaviour)}"

    return command


def block(lo: int = 0, hi: int = 50) -> dict[str, np.ndarray]:
    family = FAMILIES["rng_abi"]
    return family.block(family.arrays(lo, hi))


def marks(answer: object) -> set[int]:
    """The request ids a probe shim's records carry (or the answer itself, when it is not records)."""
    assert isinstance(answer, np.ndarray), answer
    return set(np.unique(answer).tolist())


# --- the offer and its answer --------------------------------------------------------------------


@pytest.mark.parametrize(
    "offer, answered",
    [({"pipeline": 2}, 2), ({"pipeline": 5}, 5), ({}, None), ({"pipeline": "2"}, None), ({"pipeline": 1}, None)],
)
def test_the_python_host_takes_the_depth_it_is_offered(offer, answered):
    from qconform.adapters.noop import NoopAdapter

    reply, _ = Host(NoopAdapter()).answer({"id": 1, "op": "get_config", **offer})
    assert decode_line(reply)["config"].get("pipeline") == answered


@pytest.mark.parametrize(
    "answer, pipeline, fragment",
    [
        ({"pipeline": 3}, True, f"config.pipeline 3, but {PIPELINE_DEPTH} were offered"),
        ({"pipeline": 2}, False, "config.pipeline 2, but none was offered"),
        ({"pipeline": "2"}, True, "config.pipeline must be a positive integer, got '2'"),
        ({"pipeline": 0}, True, "config.pipeline must be a positive integer, got 0"),
    ],
)
def test_a_depth_that_was_not_offered_or_not_a_count_is_a_start_error(probe, monkeypatch, answer, pipeline, fragment):
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps(answer))
    with pytest.raises(AdapterStartError) as caught:
        open_adapter(probe("plain"), pipeline=pipeline)
    assert fragment in str(caught.value)


# --- two in flight, in order ---------------------------------------------------------------------


def test_a_child_that_takes_the_offer_has_the_next_block_before_it_answers(probe, monkeypatch):
    """The ``hold`` shim answers its first block only once the block behind it has arrived: it can
    only be answered with two in flight. Each reply reaches the block it answers."""
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps({"pipeline": 2}))
    with open_adapter(probe("hold"), timeout_s=20) as client:
        assert client.depth == 2
        first, second = client.send_block("rng_abi", block()), client.send_block("rng_abi", block(50, 90))
        assert marks(second.result()) == {3} and marks(first.result()) == {2}  # waited out of order: still its own
        assert client.most_in_flight == 2 and client.restarts == 0


def test_a_run_request_behind_a_block_in_flight_is_answered_after_it(probe, monkeypatch):
    """A request of another op (run, from another caller) sent while a block is in flight reads the
    block's reply first, into the block's own result."""
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps({"pipeline": 2}))
    with open_adapter(probe("plain"), timeout_s=20) as client:
        pending = client.send_block("rng_abi", block())
        outcomes = client.run_batch("rng_abi", [{"x": 1}])  # the probe answers run with no outputs
        assert isinstance(outcomes[0], AdapterError) and "malformed reply" in outcomes[0].message
        assert marks(pending.result()) == {2} and client.most_in_flight == 2


def test_a_child_that_ignores_the_offer_is_sent_one_request_at_a_time(probe, monkeypatch):
    """The ``ahead`` shim marks a reply when a request was already waiting in its pipe: with a child that
    did not take the offer, ``send_block`` first reads the reply in flight, so no block ever waits."""
    monkeypatch.delenv("QCONFORM_PROBE_CONFIG", raising=False)
    with open_adapter(probe("ahead"), timeout_s=20) as client:
        assert client.depth == 1
        pending = [client.send_block("rng_abi", block(50 * k, 50 * k + 50)) for k in range(4)]
        assert [marks(p.result()) for p in pending] == [{2}, {3}, {4}, {5}]
        assert client.most_in_flight == 1


def test_the_ahead_probe_sees_a_request_waiting_when_two_are_in_flight(probe, monkeypatch):
    """The probe above can fail: a child that took the offer has a request in its pipe while it
    answers a block. Here one that waits for it: each block's reply comes only once the request
    behind it arrived, which with one request at a time never happens."""
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps({"pipeline": 2}))
    with open_adapter(probe("behind"), timeout_s=20) as client:
        pending = [client.send_block("rng_abi", block(50 * k, 50 * k + 50)) for k in range(3)]
        client.run_batch("rng_abi", [{}])  # a request behind the last block
        assert [marks(p.result()) for p in pending] == [{1002}, {1003}, {1004}]


# --- failures with two in flight -----------------------------------------------------------------


def test_replies_out_of_order_fail_every_request_in_flight(probe, monkeypatch):
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps({"pipeline": 2}))
    with open_adapter(probe("swap"), timeout_s=20) as client:
        first, second = client.send_block("rng_abi", block()), client.send_block("rng_abi", block(50, 90))
        one, two = first.result(), second.result()
        assert isinstance(one, AdapterError) and isinstance(two, AdapterError)
        assert "protocol violation: reply id 3 does not match request id 2" in one.message
        assert "(request 3 was in flight behind it)" in two.message
        assert client.restarts == 0  # restarted by the next request
        client.send_block("rng_abi", block())
        assert client.restarts == 1


def test_a_child_that_dies_with_two_in_flight_fails_both_and_loses_neither(probe, monkeypatch):
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps({"pipeline": 2}))
    with open_adapter(probe("die"), timeout_s=20) as client:
        first, second = client.send_block("rng_abi", block()), client.send_block("rng_abi", block(50, 90))
        one, two = first.result(), second.result()
        assert isinstance(one, AdapterError) and one.message.startswith(
            "adapter exited with status 5 before answering request 2"
        )
        assert isinstance(two, AdapterError) and "(request 3 was in flight behind it)" in two.message
        assert client.restarts == 0
        held = client.send_block("rng_abi", block())  # the next request starts a fresh child
        assert client.restarts == 1
    assert isinstance(held.result(), AdapterError)  # the probe holds a lone block: closed in flight


def test_a_request_behind_a_slow_one_is_timed_from_the_reply_before_it(probe, monkeypatch):
    """Each block takes 1.2 s and the timeout is 2 s: the second reply comes 2.4 s after its request was
    written, but 1.2 s after the reply before it, so neither times out."""
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps({"pipeline": 2}))
    with open_adapter(probe("slow", "1.2"), timeout_s=2.0) as client:
        first, second = client.send_block("rng_abi", block()), client.send_block("rng_abi", block(50, 90))
        assert marks(first.result()) == {2} and marks(second.result()) == {3}


def test_a_request_in_flight_at_close_is_an_adapter_error_not_a_hang(probe, monkeypatch):
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps({"pipeline": 2}))
    client = open_adapter(probe("slow", "30"), timeout_s=60)
    pending = client.send_block("rng_abi", block())
    client.close()
    answer = pending.result()
    assert isinstance(answer, AdapterError) and "closed with the request in flight" in answer.message


# --- the window with two blocks in it ------------------------------------------------------------


def test_blocks_in_flight_get_disjoint_window_ranges_that_alternate():
    window = BlockWindow.create()
    assert window is not None
    try:
        family = FAMILIES["verification_round"]

        def span(busy: list[tuple[int, int]]) -> tuple[int, int]:
            blobs, answer = window.place(family.block(family.arrays(0, 300)), 4 * family.record_words * 300, busy)
            starts = [blob["window"][0] for blob in blobs.values()]
            assert all(start % ALIGN == 0 for start in [*starts, answer[0]])
            return min(starts), answer[0] + answer[1]

        first = span([])
        second = span([first])
        third = span([second])
        assert first[0] == 0 and second[0] >= first[1]  # beside the block in flight
        assert third == first  # the first block's ranges again, once it is answered
        assert span([first, second])[0] >= second[1]
    finally:
        window.close()


# --- the accumulate run: two in flight gives what one at a time gives ------------------------------


def comparator(client, family: str):
    from qconform.harness.judging.judge import judge

    def judge_case(case: int, case_input: dict, outcome: object) -> tuple[str, str]:
        verdict = judge(case_vector(family, case, "test", case_input), outcome, client.config)
        return str(verdict.cls), verdict.line()

    return judge_case


def run_of(client, family: str, count: int, batch: int, pipelined: bool, asked: list | None = None) -> tuple:
    """``accumulate`` through ``client`` by block, with two blocks in flight or one at a time, as the
    CLI runs it: its hash, engine hash, verdict, judged divergences and unjudged count."""

    def run_batch(name: str, inputs: list[dict]) -> list:
        if asked is not None:
            asked.append(len(inputs))
        return client.run_batch(name, inputs, schema_check=False)

    result = accumulate(
        run_batch,
        family,
        count,
        {"families": {}},
        batch,
        judge=comparator(client, family),
        shard_cases=2048,
        run_block=None if pipelined else client.run_block,
        send_block=(lambda name, arrays: client.send_block(name, arrays).result) if pipelined else None,
    )
    return (
        result.hash,
        result.engine_hash,
        result.verdict,
        result.unjudged,
        [(d.case, d.verdict, d.reason, d.line) for d in result.divergences],
    )


@pytest.fixture(scope="module")
def torch_clients():
    pytest.importorskip("torch")
    with open_adapter("torch", timeout_s=120) as pipelined, open_adapter("torch", timeout_s=120, pipeline=False) as one:
        assert pipelined.depth == 2 and one.depth == 1
        yield pipelined, one


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_two_blocks_in_flight_give_the_records_of_one_at_a_time(torch_clients, family):
    """6000 cases in requests of 700 across shards of 2048: the torch candidate through the host with
    two blocks in flight and one at a time; the same hashes, verdict and divergences, every block
    answered by block (no case asked again, no restart), and two really were in flight."""
    pipelined, one = torch_clients
    asked: list[int] = []
    together = run_of(pipelined, family, 6000, 700, True, asked)
    alone = run_of(one, family, 6000, 700, False)
    assert together == alone
    assert together[0] == together[1] or together[2] == "precision"
    assert pipelined.most_in_flight == 2 and one.most_in_flight == 1
    assert pipelined.restarts == 0 and asked == []


def failing_third_block():
    """A block path that answers its first two blocks right, fails its third, and answers every later
    block with wrong records: a block sent behind the failed one must not be used."""
    honest, calls = in_process_blocks(spec_run_batch), []

    def run_block(family: str, arrays: dict) -> object:
        calls.append(family)
        records = honest(family, arrays)  # keeps its case counter in step with the blocks sent
        if len(calls) == 3:
            return AdapterError("boom")
        return records if len(calls) < 3 else np.full_like(records, 7)

    return run_block


def test_a_block_sent_behind_one_that_left_the_block_path_is_asked_case_by_case():
    """One at a time, the failed third block ends the block path and every later case is asked as an
    input object; with blocks sent ahead the fourth block was already answered (wrongly), and is asked
    case by case all the same: the same records, hash and verdict."""
    alone = accumulate(spec_run_batch, "rng_abi", 2000, {"families": {}}, 300, run_block=failing_third_block())
    ahead = failing_third_block()

    def send_block(family: str, arrays: dict):
        answer = ahead(family, arrays)
        return lambda: answer

    together = accumulate(spec_run_batch, "rng_abi", 2000, {"families": {}}, 300, send_block=send_block)
    assert alone.verdict == "pass" and (together.hash, together.verdict) == (alone.hash, alone.verdict)


#: the torch candidate in the host, killed by SIGKILL at its ``QCONFORM_DIE_AT``-th block, once (a
#: flag file marks the death, so its successor lives)
DYING_TORCH = textwrap.dedent(
    """
    import os, signal, sys
    from qconform.adapters.torch_adapter import TorchAdapter
    from qconform.harness.transport.host import Host, claim_stdio
    from qconform.adapters import torch_batched
    class Dying(TorchAdapter):
        blocks = 0
        def run_block(self, family, block):  # TorchAdapter's answers its own class only
            Dying.blocks += 1
            flag = os.environ["QCONFORM_PROBE_FLAG"]
            if Dying.blocks == int(os.environ["QCONFORM_DIE_AT"]) and not os.path.exists(flag):
                open(flag, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return torch_batched.run_block(family, block, "cpu")
    proto_in, proto_out = claim_stdio()
    sys.exit(Host(Dying("cpu")).serve(proto_in, proto_out))
    """
)


def test_a_child_killed_with_two_blocks_in_flight_loses_no_block(tmp_path, monkeypatch):
    """Killed at its third block, with the fourth in flight behind it: both fail, both are asked case by
    case (as every later block), and the run's hash and verdict are the one-at-a-time run's with the
    same death, and the engine's."""
    pytest.importorskip("torch")
    script = tmp_path / "dying_torch.py"
    script.write_text(DYING_TORCH)
    monkeypatch.setenv("QCONFORM_DIE_AT", "3")
    runs, answers = [], []
    for pipelined in (True, False):
        monkeypatch.setenv("QCONFORM_PROBE_FLAG", str(tmp_path / f"died-{pipelined}"))
        with open_adapter(f"shim:{sys.executable} {script}", timeout_s=120, pipeline=pipelined) as client:

            def send_block(name, arrays, client=client):
                pending = client.send_block(name, arrays)
                return lambda: answers.append(pending.result()) or answers[-1]

            result = accumulate(
                lambda name, inputs, client=client: client.run_batch(name, inputs, schema_check=False),
                "rng_abi",
                3000,
                {"families": {}},
                400,
                run_block=None if pipelined else client.run_block,
                send_block=send_block if pipelined else None,
            )
            assert client.restarts == 1 and client.most_in_flight == (2 if pipelined else 1)
            runs.append((result.hash, result.verdict, result.unjudged, result.divergences))
    assert runs[0] == runs[1] and runs[0][1] == "pass"
    failed = [a for a in answers if isinstance(a, AdapterError)]
    assert len(answers) == 4 and len(failed) == 2  # blocks 1-2 answered, 3 and 4 failed, the rest by case
    assert "killed by signal 9" in failed[0].message and "in flight behind it" in failed[1].message


def test_blocks_larger_than_the_pipe_sent_back_to_back_arrive_whole_and_in_order():
    """Without the window a block travels as sections: several megabytes, more than the pipe holds,
    so the rest of each is written by a thread; the block sent behind it must wait for that thread,
    never write between its bytes."""
    family = FAMILIES["verification_round"]
    with open_adapter("noop", block_window=False, timeout_s=60) as client:
        assert client.depth == 2 and not client.window_attached
        pending = [client.send_block(family.name, family.block(family.arrays(k, k + 20000))) for k in range(3)]
        answers = [p.result() for p in pending]
        assert all(isinstance(a, np.ndarray) and a.shape == (20000, family.record_words) for a in answers), answers
        assert client.restarts == 0 and client.most_in_flight == 2
