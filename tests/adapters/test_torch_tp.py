"""The TP emulator (adapters/torch_tp.py, adapters/tp_emulator/): real collectives, exact partials, killed mutants.

The emulator runs in this process as rank 0 of a gloo group whose other ranks are
worker processes. It must pass the sharding vectors of its shard count, answer
the allocation and verification vectors exactly as the unsharded torch candidate
does, survive a rank that dies or hangs as an adapter error, and every seeded
distributed-sampling bug must fail the sharding vectors.
"""

from __future__ import annotations

import os
import signal
import struct
import time
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from qconform.adapters.torch_adapter import TorchAdapter  # noqa: E402
from qconform.adapters.torch_tp import TorchTPAdapter  # noqa: E402
from qconform.adapters.tp_emulator.group import RankGroup, rank_device, shared_group  # noqa: E402
from qconform.adapters.tp_emulator.mutants import TP_MUTANTS  # noqa: E402
from qconform.adapters.tp_emulator.rank import (  # noqa: E402
    EmulatorRefusal,
    ShardCountMismatch,
    Span,
    bucket_value,
    checked_spans,
    even_spans,
    exact_buckets,
)
from qconform.generators.corpus import default_vectors_dir  # noqa: E402
from qconform.generators.validation import iter_cases  # noqa: E402
from qconform.harness.adapter import AdapterError  # noqa: E402
from qconform.harness.judging.judge import judge  # noqa: E402
from qconform.harness.verdicts import VerdictClass  # noqa: E402

pytestmark = pytest.mark.rules("R30", "R31", "R32", "R33", "R34")

VECTORS = default_vectors_dir()
EQUAL_TO_UNSHARDED = ("allocation_dense", "allocation_sparse", "verification_round")


def corpus(family: str) -> list[dict]:
    return [
        {
            "id": c.id,
            "family": c.family,
            "result": c.result,
            "flags": list(c.flags),
            "input": c.input,
            "expected": c.expected,
        }
        for c in iter_cases(VECTORS, [family])
    ]


def shards_of(case: dict) -> int:
    return len(case["input"]["shard_ranges"])


def verdicts(adapter, cases: list[dict]) -> list:
    outcomes = adapter.run_batch(cases[0]["family"], [case["input"] for case in cases])
    config = adapter.config()
    return [judge(case, outcome, config) for case, outcome in zip(cases, outcomes)]


@pytest.fixture(scope="module")
def tp2():
    adapter = TorchTPAdapter(shards=2)
    yield adapter
    adapter.close()


# --- pieces that need no rank group -------------------------------------------------------------


FP64_BITS = st.integers(0, 0x7FEFFFFFFFFFFFFF).map(lambda b: struct.unpack("<d", struct.pack("<Q", b))[0])


@given(st.lists(FP64_BITS, min_size=1, max_size=40))
@settings(max_examples=60, deadline=None)
def test_exact_buckets_hold_the_exact_sum(values):
    """The int64 bucket accumulator that ranks all-reduce is the exact rational sum, whatever the exponents."""
    buckets = exact_buckets(torch.tensor(values, dtype=torch.float64))
    assert bucket_value(buckets.tolist()) == sum((Fraction(v) for v in values), Fraction(0))
    halves = exact_buckets(torch.tensor([values, values[::-1]], dtype=torch.float64))
    assert bucket_value((halves[0] + halves[1]).tolist()) == 2 * sum(Fraction(v) for v in values)


def test_spans_and_shard_ranges():
    assert even_spans(129280, 2) == [Span(0, 64640), Span(64640, 129280)]
    assert [s.size for s in even_spans(3, 4)] == [1, 1, 1, 0]
    assert checked_spans([[0, 2], [2, 5]], 5, 2) == [Span(0, 2), Span(2, 5)]
    for bad in ([[0, 2], [3, 5]], [[0, 2], [2, 2], [2, 5]], [[0, 2], [2, 4]], []):
        with pytest.raises(EmulatorRefusal):
            checked_spans(bad, 5, 2)
    with pytest.raises(ShardCountMismatch):
        checked_spans([[0, 1], [1, 2], [2, 5]], 5, 2)


def test_a_cuda_group_needs_one_gpu_per_rank(monkeypatch):
    """NCCL refuses two ranks on one GPU, so the group says so before spawning a rank."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert rank_device("cpu", 1, 2) == torch.device("cpu")
    assert rank_device("cuda", 0, 1) == torch.device("cuda", 0)
    with pytest.raises(RuntimeError, match="needs 2 GPUs .* but 1 is visible"):
        rank_device("cuda", 1, 2)
    group = RankGroup(2, "cuda")
    with pytest.raises(RuntimeError, match="needs 2 GPUs"):
        group.start()
    assert group.workers == []


def test_unknown_mutant_is_refused():
    with pytest.raises(ValueError):
        TorchTPAdapter(shards=2, mutant="no-such-bug")


# --- TP2 ------------------------------------------------------------------------------------------


def test_tp2_passes_every_two_shard_sharding_vector(tp2):
    cases = corpus("sharding")
    for case, verdict in zip(cases, verdicts(tp2, cases)):
        if case["result"] == "valid" and shards_of(case) != 2:
            assert verdict.cls is VerdictClass.UNSUPPORTED, case["id"]
        else:
            assert verdict.cls is VerdictClass.PASS, (case["id"], verdict.message)
    assert sum(shards_of(case) == 2 for case in cases) >= 10


@pytest.mark.parametrize("family", EQUAL_TO_UNSHARDED)
def test_tp2_answers_exactly_as_the_unsharded_candidate(tp2, family):
    """Sharded over two ranks, every answer (refusals included) equals the unsharded torch candidate's."""
    inputs = [case["input"] for case in corpus(family)]
    assert tp2.run_batch(family, inputs) == TorchAdapter().run_batch(family, inputs)


@pytest.mark.parametrize("mutant", list(TP_MUTANTS))
def test_each_emulator_mutant_is_killed_by_the_sharding_vectors(tp2, mutant):
    """Each seeded bug gives a wrong answer (fail), never a crash, on some two-shard sharding vector."""
    cases = [case for case in corpus("sharding") if case["result"] == "valid" and shards_of(case) == 2]
    classes = [v.cls for v in verdicts(TorchTPAdapter(shards=2, mutant=mutant), cases)]
    assert VerdictClass.FAIL in classes, f"mutant {mutant} survived"
    assert VerdictClass.ERROR not in classes


def test_a_dead_or_hung_rank_is_an_adapter_error_not_a_hang(tp2):
    """A rank killed in the middle of a case fails that case at once (the closed connection); a hung
    rank fails it at the work-group timeout. Either way the group is torn down and the next run
    starts a fresh one."""
    shared_group(2).close()  # one default process group per process: make room for a short-timeout group
    group = RankGroup(2, work_timeout_s=3)
    case = next(case for case in corpus("sharding") if case["result"] == "valid" and shards_of(case) == 2)
    try:
        for how, within in ((signal.SIGKILL, 2.5), (signal.SIGSTOP, 20.0)):
            outcome = group.run("sharding", [case["input"]])[0]
            assert isinstance(outcome, dict) and "shards" in outcome, outcome  # (re)started, healthy
            dist.broadcast_object_list([("run", "sharding", [case["input"]], None)], src=0)
            os.kill(group.workers[0].pid, how)
            began = time.monotonic()
            outcomes: list = []
            group.run_pending("sharding", [case["input"]], outcomes)
            assert isinstance(outcomes[0], AdapterError), how
            assert time.monotonic() - began < within
            assert group.rank is None and not group.workers  # torn down; the next run starts afresh
    finally:
        group.close()


# --- TP4 (last: it replaces this process's two-rank group) --------------------------------------


def test_tp4_passes_every_four_shard_sharding_vector():
    # shard ranges that are refused before any rank runs (any S), and every case over four shards
    cases = [case for case in corpus("sharding") if "/invalid_ranges/" in case["id"] or shards_of(case) == 4]
    adapter = TorchTPAdapter(shards=4)
    try:
        found = verdicts(adapter, cases)
    finally:
        adapter.close()
    failed = [(v.case_id, v.message) for v in found if v.cls is not VerdictClass.PASS]
    assert not failed
    assert sum(shards_of(case) == 4 for case in cases) >= 8
