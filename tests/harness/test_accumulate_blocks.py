"""The block path of ``qconform accumulate`` (docs/accumulated.md, "Blocks") against the per-case path.

A block carries the cases of a range as arrays; the per-case path sends each case as its
input object. On a sample of every accumulated family: the block holds exactly what the
input objects hold, the torch candidate answers both with the same records, and a run by
block gives the hash, the verdict and the judged divergences of a run case by case (for
``allocation_dense`` judged from the block records, with the same lines).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from click.testing import CliRunner
from harness_stubs import spec_run_batch

from qconform.cli.group import cli
from qconform.generators.accumulated import FAMILIES, KMAX, PAD, Batch
from qconform.generators.accumulated_engine import ENGINES, engine_hash
from qconform.generators.encoding import decode_blob, decode_u64
from qconform.harness.adapter import AdapterError, Unimplemented
from qconform.harness.run.accumulate import accumulate, case_vector, per_case_answers
from qconform.harness.transport.shim_protocol import to_json_blobs

pytestmark = pytest.mark.rules("R06", "R08", "R11", "R22", "R23")

#: case ranges sampled per family: the start, and far beyond 2^32 (the high counter word)
SAMPLES = ((0, 700), (10**10, 10**10 + 300))


def sample(family: str) -> list[Batch]:
    return [FAMILIES[family].arrays(lo, hi) for lo, hi in SAMPLES]


def f32(bits: list[int]) -> np.ndarray:
    return np.array(bits, dtype="<u4").view("<f4")


def decoded(family: str, inp: dict) -> dict[str, object]:
    """One case's input object (docs/formats) as the fields of its block row."""
    if family == "rng_abi":
        codes = {"PROPOSAL": 1, "ACCEPT": 2, "CORRECTION": 3}
        keys = ("generation", "round", "position", "draw_counter")
        return {"seed": np.uint64(decode_u64(inp["seed"])), "domain": codes[inp["domain"]]} | {k: inp[k] for k in keys}
    if family == "categorical_sampling":
        counts = decode_blob(inp["row"]["counts"], "u32")[0]
        return {"vocab": inp["vocab"], "counts": counts + [0] * (8 - len(counts)), "draws": inp["draws"]}
    if family == "allocation_dense":
        weights = f32(decode_blob(inp["weights"], "f32")[0])
        return {"vocab": len(weights), "weights": np.pad(weights, (0, 8 - len(weights)))}
    request, vocab = inp["requests"][0], inp["vocab"]
    depth = len(request["draft_tokens"])
    q = np.zeros((KMAX, 8), dtype=np.int64)
    for r, row in enumerate(request["q_rows"]):
        q[r, :vocab] = decode_blob(row["counts"], "u32")[0]
    p = np.zeros((KMAX + 1, 8), dtype="<f4")
    p[: depth + 1, :vocab] = f32(decode_blob(request["p_rows"]["weights"], "f32")[0]).reshape(depth + 1, vocab)
    return {
        "seed": np.uint64(decode_u64(request["seed"])),
        "generation": request["generation"],
        "round": request["round"],
        "anchor": request["anchor"],
        "depth": depth,
        "vocab": vocab,
        "drafts": request["draft_tokens"] + [0] * (KMAX - depth),
        "q": q,
        "p": p,
    }


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_block_holds_exactly_the_input_objects(family):
    """Row k of every block field equals case k's input object, decoded (bit for bit for FP32),
    and a block has no other field."""
    fam = FAMILIES[family]
    for batch in sample(family):
        block = fam.block(batch)
        for k in range(0, batch.stop - batch.start, 7):
            want = decoded(family, fam.case_input(batch, k))
            assert set(block) == set(want)
            for name, value in want.items():
                got = block[name][k]
                if got.dtype == np.float32:
                    assert np.array_equal(got.view("<u4"), np.asarray(value, dtype="<f4").view("<u4")), name
                else:
                    assert np.array_equal(got, np.asarray(value).astype(got.dtype)), (name, k)


def torch_adapter():
    pytest.importorskip("torch")
    from qconform.adapters.torch_adapter import TorchAdapter

    return TorchAdapter("cpu")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_torch_answers_a_block_as_it_answers_its_cases(family):
    """The torch candidate's block records equal the records of its answers to the input objects
    (and the engine's, but for its declared FP64 allocation ties)."""
    adapter = torch_adapter()
    fam = FAMILIES[family]
    for batch in sample(family):
        block_records = adapter.run_block(family, fam.block(batch))
        assert block_records.dtype == "<u4" and block_records.shape == (batch.stop - batch.start, fam.record_words)
        per_case = per_case_answers(lambda f, inputs: to_json_blobs(adapter.run_batch(f, inputs)), fam, batch)
        assert np.array_equal(block_records.astype(np.uint64), per_case.records)
        differs = (per_case.records != ENGINES[family](batch)).any(axis=1).mean()
        assert differs <= (0.02 if family == "allocation_dense" else 0.0)


def in_process_blocks(run_batch):
    """A block path built from an answer function of input objects: each block's cases as objects."""

    def run_block(family: str, block: dict) -> object:
        fam = FAMILIES[family]
        cases = len(next(iter(block.values())))
        start = run_block.next_start  # type: ignore[attr-defined]
        run_block.next_start += cases  # type: ignore[attr-defined]
        batch = fam.arrays(start, start + cases)
        return per_case_answers(run_batch, fam, batch).records.astype("<u4")

    run_block.next_start = 0  # type: ignore[attr-defined]
    return run_block


def summary(result) -> tuple:
    return (
        result.hash,
        result.verdict,
        result.unjudged,
        [(d.case, d.verdict, d.reason) for d in result.divergences],
    )


def test_a_run_by_block_gives_the_verdicts_of_a_run_by_case():
    """Same hash, verdict, judged divergences and unjudged count, for a failing adapter (the
    per-case outcome of each divergent case is judged, as on the per-case path)."""

    def broken(family, inputs):
        outcomes = spec_run_batch(family, inputs)
        return [AdapterError("boom") if inp["position"] % 97 == 0 else out for inp, out in zip(inputs, outcomes)]

    expected = {"families": {}}
    by_case = accumulate(broken, "rng_abi", 2500, expected, batch=300, shard_cases=400)
    by_block = accumulate(
        broken, "rng_abi", 2500, expected, batch=300, shard_cases=400, run_block=in_process_blocks(broken)
    )
    assert by_case.verdict == "fail" and by_case.failures
    assert summary(by_block) == summary(by_case)


def test_torch_precision_by_block_is_the_precision_by_case():
    adapter = torch_adapter()

    def run_batch(family, inputs):
        return to_json_blobs(adapter.run_batch(family, inputs))

    def judge(case, _input, outcome):  # what the CLI's comparator says of the torch candidate's FP64 ties
        return ("precision", f"case {case}") if isinstance(outcome, dict) and "counts" in outcome else ("fail", "")

    args = ("allocation_dense", 3000, {"families": {}})
    by_case = accumulate(run_batch, *args, batch=1000, judge=judge)
    by_block = accumulate(run_batch, *args, batch=1000, judge=judge, run_block=adapter.run_block)
    assert by_case.verdict == "precision" and by_case.divergences
    assert summary(by_block) == summary(by_case)


def comparator_judge(adapter, family: str):
    """The CLI's judge: the ordinary comparator on the case as a vector, under ``adapter``'s config."""
    from qconform.harness.judging.judge import judge

    config = adapter.config()

    def judge_case(case, case_input, outcome):
        verdict = judge(case_vector(family, case, "test", case_input), outcome, config)
        return str(verdict.cls), verdict.line()

    return judge_case


def test_allocation_divergences_are_judged_from_the_block_records():
    """The torch candidate's FP64 ties of ``allocation_dense``, judged by the ordinary comparator:
    by block, each answer is rebuilt from its block record and no case is asked again, and every
    verdict and line is the one the per-case path gives (the case asked as an input object)."""
    adapter = torch_adapter()
    asked = []

    def run_batch(family, inputs):
        asked.append(len(inputs))
        return to_json_blobs(adapter.run_batch(family, inputs))

    judge = comparator_judge(adapter, "allocation_dense")
    args = ("allocation_dense", 3000, {"families": {}})
    by_case = accumulate(run_batch, *args, batch=1000, judge=judge)
    asked.clear()
    by_block = accumulate(run_batch, *args, batch=1000, judge=judge, run_block=adapter.run_block)
    assert by_case.verdict == "precision" and len(by_case.divergences) >= 3
    assert summary(by_block) == summary(by_case)
    assert [d.line for d in by_block.divergences] == [d.line for d in by_case.divergences]
    assert asked == []


def test_a_record_no_answer_reduces_to_is_asked_again():
    """A block record with a word in its padding (beyond V) is the record of no answer: the case
    is asked again as an input object (whose answer is right), so the run fails as one whose block
    and case answers differ, not as a rebuilt answer that would hide the padding."""
    adapter = torch_adapter()
    fam = FAMILIES["allocation_dense"]
    batch = fam.arrays(0, 600)
    short = int(np.flatnonzero(batch.fields["vocab"] < 8)[0])

    def run_block(family, block):
        records = adapter.run_block(family, block).copy()
        records[short, 7] = 1  # seeded bug: a padding word of one case, in the block path only
        return records

    def run_batch(family, inputs):
        return to_json_blobs(adapter.run_batch(family, inputs))

    judge = comparator_judge(adapter, "allocation_dense")
    result = accumulate(
        run_batch, "allocation_dense", 600, {"families": {}}, batch=600, judge=judge, run_block=run_block
    )
    assert result.verdict == "fail" and result.failures[0].case == short
    assert "differs from its answer as one input object" in result.failures[0].line


def test_a_block_answer_that_differs_from_the_case_answer_fails():
    """A candidate whose block answer differs from its answer to the same case alone fails, even
    where its case answer is right: the comparator never sees the block answer."""
    adapter = torch_adapter()

    def run_block(family, block):
        records = adapter.run_block(family, block).copy()
        records[5, 0] ^= 1  # seeded bug: one word of one case, in the block path only
        return records

    def run_batch(family, inputs):
        return to_json_blobs(adapter.run_batch(family, inputs))

    result = accumulate(run_batch, "categorical_sampling", 900, {"families": {}}, batch=900, run_block=run_block)
    assert result.verdict == "fail" and result.failures[0].case == 5
    assert "differs from its answer as one input object" in result.failures[0].line


@pytest.mark.parametrize("answer", [Unimplemented("no blocks"), AdapterError("gone"), np.zeros((3, 3), "<u4")])
def test_an_adapter_without_blocks_is_asked_case_by_case(answer):
    calls = []

    def run_block(family, block):
        calls.append(family)
        return answer

    result = accumulate(
        spec_run_batch, "rng_abi", 1200, {"families": {}}, batch=400, run_block=run_block, shard_cases=400
    )
    assert result.verdict == "pass" and result.hash == engine_hash("rng_abi", 1200, 400)
    assert calls == ["rng_abi"]  # asked once, then never again in the run


def test_cli_by_block_and_by_case_agree_through_the_child():
    """Through the adapter's child process: the same hash both ways (the committed one at 10^5 is
    covered by the engine; here the engine's at 2000), and noop's block refusals fail as its
    per-case refusals do."""
    pytest.importorskip("torch")
    runner = CliRunner()
    args = ["accumulate", "--adapter", "torch", "--family", "verification_round", "--count", "2000", "--batch", "700"]
    by_block = runner.invoke(cli, args)
    by_case = runner.invoke(cli, [*args, "--by-case"])
    assert by_block.exit_code == 0 and by_case.exit_code == 0, by_block.output + by_case.output
    hash_line = engine_hash("verification_round", 2000)
    assert f"hash     {hash_line}" in by_block.output and f"hash     {hash_line}" in by_case.output
    noop = ["accumulate", "--adapter", "noop", "--family", "allocation_dense", "--count", "1500"]
    for extra in ([], ["--by-case"]):
        out = runner.invoke(cli, [*noop, *extra])
        assert out.exit_code == 1 and "first divergent case: 0 (refused a valid case: NOOP)" in out.output


def test_noop_refuses_every_case_of_a_block():
    from qconform.adapters.noop import NoopAdapter

    fam = FAMILIES["verification_round"]
    records = NoopAdapter().run_block(fam.name, fam.block(fam.arrays(0, 10)))
    assert records.shape == (10, fam.record_words) and (records == PAD).all()


def test_a_variant_of_the_torch_adapter_is_asked_case_by_case():
    """A mutant, tensor-parallel or partial variant answers its own way in run_batch: a block
    answered by the plain candidate would hide it, so variants never answer blocks."""
    pytest.importorskip("torch")
    from qconform.adapters.torch_adapter import TorchAdapter
    from qconform.adapters.torch_mutants import MutantTorchAdapter

    class Variant(TorchAdapter):
        pass

    fam = FAMILIES["rng_abi"]
    block = fam.block(fam.arrays(0, 4))
    assert isinstance(Variant().run_block(fam.name, block), Unimplemented)
    assert issubclass(MutantTorchAdapter, TorchAdapter)  # so every mutant is such a variant
    assert TorchAdapter().run_block(fam.name, block).shape == (4, fam.record_words)


def test_a_shim_that_does_not_know_run_block_passes_case_by_case():
    """The example shim answers the unknown op with an error (docs/shim-protocol.md): the run
    goes on with input objects and passes, with the engine's hash."""
    import sys
    from pathlib import Path

    shim = Path(__file__).resolve().parents[2] / "examples" / "shim" / "python_shim.py"
    args = ["accumulate", "--adapter", f"shim:{sys.executable} {shim}", "--family", "rng_abi", "--count", "300"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert f"hash     {engine_hash('rng_abi', 300)}" in result.output and "PASS" in result.output


def test_a_case_asked_again_never_overlaps_a_block_request():
    """The judging thread asks a divergent case again while the main thread asks the next block
    (docs/accumulated.md, "Feeding"); the adapter still gets one request at a time, as a child's
    channel and an in-process adapter need. Without the candidate's lock the two overlap here."""
    adapter = torch_adapter()
    in_flight, most = [0], [0]

    def alone(call):
        def timed(*args):
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            time.sleep(0.2)
            try:
                return call(*args)
            finally:
                in_flight[0] -= 1

        return timed

    def run_block(family, block):
        records = adapter.run_block(family, block).copy()
        records[5, 0] ^= 1  # a block answer unlike the case answer: case 5 is asked again
        return records

    def run_batch(family, inputs):
        return to_json_blobs(adapter.run_batch(family, inputs))

    result = accumulate(
        alone(run_batch), "categorical_sampling", 1200, {"families": {}}, batch=300, run_block=alone(run_block)
    )
    assert result.verdict == "fail" and result.failures[0].case == 5
    assert most[0] == 1
