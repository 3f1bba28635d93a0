"""Accumulated vectors (docs/accumulated.md): the stream, the exact engine against the spec,
the committed hashes, ``qconform accumulate`` and its localisation of a divergence."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import cast

import numpy as np
import pytest
from click.testing import CliRunner
from harness_stubs import on_ranks, spec_run_batch

from qconform.cli.group import cli
from qconform.generators import accumulated, accumulated_engine
from qconform.generators.accumulated import FAMILIES, AccumulatedError, record_of
from qconform.generators.accumulated_engine import engine_hash, engine_records
from qconform.generators.corpus import default_vectors_dir
from qconform.generators.registry import load_family
from qconform.harness.adapter import AdapterError
from qconform.harness.run.accumulate import accumulate, case_vector, load_expected
from qconform.spec import sampling
from qconform.spec.philox import KNOWN_ANSWERS, Words2, Words4, philox4x32

pytestmark = pytest.mark.rules("R06", "R08", "R11", "R22", "R23")

# The Triton tests below run the candidate on the CPU, in this process: Triton reads
# TRITON_INTERPRET when it is first imported, so it is set before any test imports it.
os.environ.setdefault("TRITON_INTERPRET", "1")

#: stream cases per family of the differential test: 10^5 in all, weighted by the spec's speed
DIFFERENTIAL = {
    "rng_abi": 40_000,
    "categorical_sampling": 36_000,
    "allocation_dense": 14_000,
    "verification_round": 10_000,
}


def spec_records(family: str, start: int, stop: int) -> np.ndarray:
    """The records of the spec's ``solve`` answers to stream cases ``[start, stop)``."""
    fam, solve = FAMILIES[family], load_family(family).solve
    assert solve is not None, family
    batch = fam.arrays(start, stop)
    rows = []
    for k in range(stop - start):
        inp = fam.case_input(batch, k)
        rows.append(record_of(fam, inp, solve(inp)))
    return np.array(rows, dtype=np.uint64)


def first_difference(a: np.ndarray, b: np.ndarray) -> int | None:
    differs = np.flatnonzero((a != b).any(axis=1))
    return int(differs[0]) if len(differs) else None


def test_the_cut_sorting_network_sorts_every_row():
    """By the 0-1 principle a comparator network sorts every input iff it sorts every 0/1 input."""
    rows = (np.arange(1 << 7)[:, None] >> np.arange(7)[None, :]) & 1
    counts = accumulated.counts_from_cuts(rows.astype(np.uint64), np.full(len(rows), accumulated.VMAX))
    cuts = np.cumsum(counts, axis=1)[:, :-1]  # the sorted cuts, rebuilt from the gaps
    assert np.array_equal(cuts, np.sort(rows, axis=1)) and (counts.sum(axis=1) == accumulated.M).all()


def test_philox_lanes_are_the_spec_philox():
    for counter, key, output in KNOWN_ANSWERS:
        lanes = accumulated.philox_lanes(*(np.array([w], dtype=np.uint64) for w in (*counter, *key)))
        assert tuple(int(w[0]) for w in lanes) == output
    rng = np.random.default_rng(5)
    words = rng.integers(0, 1 << 32, size=(6, 200), dtype=np.uint64)
    lanes = accumulated.philox_lanes(*words)
    for n in range(200):
        counter = cast(Words4, tuple(int(w) for w in words[:4, n]))
        key = cast(Words2, tuple(int(w) for w in words[4:, n]))
        assert tuple(int(w[n]) for w in lanes) == philox4x32(counter, key)


@pytest.mark.parametrize("family", sorted(DIFFERENTIAL))
def test_engine_equals_spec(family):
    """The differential proof: 10^5 stream cases over the four families, the engine's records
    equal the records of the spec's answers (docs/accumulated.md, "The engine")."""
    count = DIFFERENTIAL[family]
    assert first_difference(engine_records(family, 0, count), spec_records(family, 0, count)) is None


def boundary_ge(scaled, u32):
    """The mass rule with ``>=``: a seeded bug (issue #11)."""
    threshold = u32 * sum(scaled)
    cumulative = 0
    for index, mass in enumerate(scaled):
        cumulative += mass
        if cumulative * sampling.U32_LIMIT >= threshold:
            return index
    raise AssertionError("unreachable")


def test_boundary_mutant_is_killed_by_the_stream_alone(monkeypatch):
    """``C_v 2^32 > u32 R`` turned into ``>=`` changes the records of the accumulated stream
    within its first 1000 cases, with no case written for it (the file corpus's
    ``draw_boundaries`` group, written for it, kills it too)."""
    from qconform.generators import drift

    monkeypatch.setattr(sampling, "first_above", boundary_ge)
    assert (
        first_difference(engine_records("verification_round", 0, 1000), spec_records("verification_round", 0, 1000))
        == 520
    )
    drifted = drift.check(default_vectors_dir(), [load_family("verification_round")]).drifts
    assert drifted and all("draw_boundaries" in d.what or d.what == "index.json" for d in drifted)


def engine_bug_first_above(masses, u32):
    cumulative = np.cumsum(masses, axis=1)
    return np.argmax(cumulative * accumulated_engine.TWO32 >= (u32 * cumulative[:, -1])[:, None], axis=1)


EXACT_ALLOCATION = accumulated_engine.allocation_records


def engine_bug_tie_highest(batch):
    """Ties to the highest ID: allocate the reversed row, reverse back."""
    weights = np.ascontiguousarray(batch.fields["weights"][:, ::-1])
    flipped = accumulated.Batch(batch.start, batch.stop, {**batch.fields, "weights": weights})
    return np.ascontiguousarray(EXACT_ALLOCATION(flipped)[:, ::-1])


@pytest.mark.parametrize(
    "family, target, bug",
    [
        ("verification_round", "first_above", engine_bug_first_above),
        ("allocation_dense", "allocation_records", engine_bug_tie_highest),
    ],
)
def test_differential_kills_engine_bugs(monkeypatch, family, target, bug):
    """The differential test fails when the engine has a seeded bug (the NumPy engine's: the C
    engine's seeded bugs are in tests/generators/test_verification_engine_native.py)."""
    monkeypatch.setattr(accumulated_engine, "NATIVE", None)
    monkeypatch.setattr(accumulated_engine, target, bug)
    if target == "allocation_records":
        monkeypatch.setitem(accumulated_engine.ENGINES, family, bug)
    assert first_difference(engine_records(family, 0, 2000), spec_records(family, 0, 2000)) is not None


def test_committed_hashes_match_the_engine():
    expected = load_expected(default_vectors_dir())
    assert set(expected["families"]) == set(FAMILIES)
    for name, entry in expected["families"].items():
        assert entry["tag"] == FAMILIES[name].tag and entry["recordWords"] == FAMILIES[name].record_words
        assert {"100000", "1000000"} <= set(entry["hashes"])
        assert entry["hashes"]["100000"] == engine_hash(name, 100_000), name


def test_inputs_are_valid_family_inputs():
    """Every stream case is a valid input of its family (the spec answers, never refuses)."""
    for name, fam in FAMILIES.items():
        batch = fam.arrays(10**9, 10**9 + 50)  # any case index, beyond 2^32 too
        solve = load_family(name).solve
        assert solve is not None, name
        for k in range(50):
            assert "error" not in solve(fam.case_input(batch, k)), name
    wide = FAMILIES["rng_abi"].arrays((1 << 32) - 1, (1 << 32) + 1)
    assert wide.fields["seed"][0] != wide.fields["seed"][1]


@pytest.mark.parametrize(
    "answer, why",
    [
        ({"error": "WRONG_TOTAL_MASS"}, "refused"),
        ({"tokens": [0, 1, 2]}, "needs 4 tokens"),
        ({"tokens": [0, 1, 2, -1]}, "u32 words"),
        ({"tokens": "0123"}, "not a list"),
        ({"tokens": [0, 1, 2, True]}, "not an integer"),
    ],
)
def test_malformed_answers_have_no_record(answer, why):
    fam = FAMILIES["categorical_sampling"]
    inp = fam.case_input(fam.arrays(0, 1), 0)
    with pytest.raises(AccumulatedError, match=why):
        record_of(fam, inp, answer)


def test_accumulate_locates_the_first_divergent_case(monkeypatch):
    expected = {"families": {}}
    result = accumulate(spec_run_batch, "categorical_sampling", 3000, expected, batch=700)
    assert result.verdict == "pass" and result.hash == engine_hash("categorical_sampling", 3000)

    answered = [0]  # cases answered so far: the requests come in case order, of any size

    def broken(family, inputs):
        outcomes = spec_run_batch(family, inputs)
        first, answered[0] = answered[0], answered[0] + len(inputs)
        if first <= 650 < answered[0]:
            outcomes[650 - first] = AdapterError("boom")
        return outcomes

    result = accumulate(broken, "categorical_sampling", 3000, expected, batch=700)
    assert result.verdict == "fail" and result.failures[0].case == 650 and "boom" in result.failures[0].reason


def test_shards_combine_independently_of_the_world_size():
    """Every rank of any world size reports the same hash and the same first divergence."""

    def broken(family, inputs):
        outcomes = spec_run_batch(family, inputs)
        return [AdapterError("boom") if inp["position"] % 97 == 0 else out for inp, out in zip(inputs, outcomes)]

    seen = set()
    for world in (1, 2, 3, 4):
        results = on_ranks(
            world,
            lambda ranks: accumulate(
                broken, "rng_abi", 2500, {"families": {}}, batch=300, ranks=ranks, shard_cases=400
            ),
        )
        seen |= {(r.hash, r.expected, r.failures[0].case, len(r.failures)) for r in results}
    assert len(seen) == 1 and next(iter(seen))[1] == engine_hash("rng_abi", 2500, 400)


def test_cli_passes_torch_and_prints_a_bisected_vector_for_a_mutant(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(cli, ["accumulate", "--adapter", "torch", "--family", "verification_round", "--count", "3000"])
    assert ok.exit_code == 0, ok.output
    assert "PASS" in ok.output
    out = tmp_path / "vector.json"
    bad = runner.invoke(
        cli,
        [
            "accumulate",
            "--adapter",
            "torch-mutant:cumulative-ge",
            "--family",
            "categorical_sampling",
            "--count",
            "2000",
            "--vector-out",
            str(out),
        ],
    )
    assert bad.exit_code == 1, bad.output
    assert "first divergent case: 0" in bad.output and "--record" in bad.output
    vector = json.loads(out.read_text())
    assert vector["id"].startswith("categorical_sampling/fuzz/found-") and vector["expected"]["tokens"]


def test_cli_excuses_declared_precision():
    """The torch candidate's FP64 allocation breaks exact ties of different weights its own way:
    each such case is `precision` under its declared profile, so the run is not a failure."""
    result = CliRunner().invoke(
        cli, ["accumulate", "--adapter", "torch", "--family", "allocation_dense", "--count", "2000"]
    )
    assert result.exit_code == 0, result.output
    assert "PRECISION" in result.output and "excused" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--family", "wire_frames"], "Invalid value for '--family'"),
        (["--family", "rng_abi", "--adapter", "no-such-adapter"], "no-such-adapter"),
        (["--family", "rng_abi", "--count", "0"], "--count"),
    ],
)
def test_cli_usage_errors(args, message):
    result = CliRunner().invoke(cli, ["accumulate", *args])
    assert result.exit_code == 2 and message in result.output


def test_cli_refuses_a_malformed_expected_file(tmp_path):
    (tmp_path / "accumulated.json").write_text(json.dumps({"format": "qconform-accumulated-v1"}))
    result = CliRunner().invoke(cli, ["accumulate", "--family", "rng_abi", "--vectors", str(tmp_path)])
    assert result.exit_code == 2 and "accumulated.json" in result.output and "Traceback" not in result.output


def test_expected_file_schema_is_committed():
    schema = json.loads((default_vectors_dir() / "schemas" / accumulated.EXPECTED_SCHEMA_FILE).read_text())
    assert schema == accumulated.EXPECTED_SCHEMA


def test_every_committed_hash_is_well_formed():
    data = json.loads(Path(default_vectors_dir() / accumulated.EXPECTED_FILE).read_text())
    assert data["shardCases"] == accumulated.SHARD_CASES
    assert data["streamKey"] == [f"0x{w:08x}" for w in accumulated.STREAM_KEY]


@pytest.mark.parametrize(
    "family, count",
    [("rng_abi", 3000), ("categorical_sampling", 3000), ("allocation_dense", 3000), ("verification_round", 3000)],
)
def test_triton_candidate_passes_a_short_stream(family, count):
    """The Triton candidate in its interpreter on CPU, through its batched path (tiles of
    short rows: thousands of cases per program); the 10^6 runs are in bench/RESULTS.md, the
    10^8 runs of native Triton belong to a GPU (bench/gpu_check.py --accumulated). Its FP64
    allocation breaks exact remainder ties between different weights its own way, as
    its profile declares (PRECISION, exit 0)."""
    pytest.importorskip("triton")
    result = CliRunner().invoke(
        cli, ["accumulate", "--adapter", "triton", "--family", family, "--count", str(count), "--batch", "1024"]
    )
    verdict = "PRECISION" if family == "allocation_dense" else "PASS"
    assert result.exit_code == 0 and verdict in result.output, result.output


def test_a_seeded_triton_kernel_bug_is_killed_by_the_stream(monkeypatch, tmp_path):
    """The Triton candidate's residual scan with ``<`` for ``<=`` (the token is then the first
    ``v`` with ``C_v 2^32 >= u32 R``: the boundary bug of issue #11), run through the batched
    tile kernels: the stream's first exact bonus boundary (case 520) fails, and the case is
    printed as an ordinary vector."""
    import inspect
    import sys

    pytest.importorskip("triton")
    from qconform.adapters.triton_adapter import TritonAdapter
    from qconform.adapters.triton_candidate import verification

    source = inspect.getsource(verification.residual_scan.fn)
    assert source.count("<= target[:, None]") == 1
    (tmp_path / "mutant_scan.py").write_text(
        "import triton\nimport triton.language as tl\n"
        "from qconform.adapters.triton_candidate.verification import ADD, MAX, TWO32, residual_mass\n\n"
        + source.replace("<= target[:, None]", "< target[:, None]")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(verification, "residual_scan", __import__("mutant_scan").residual_scan)
    try:
        adapter = TritonAdapter("cpu")
        result = accumulate(adapter.run_batch, "verification_round", 1000, {"families": {}}, batch=1000)
    finally:
        sys.modules.pop("mutant_scan", None)
    assert result.hash != result.expected and result.failures[0].case == 520
    vector = case_vector("verification_round", 520, "test")
    assert vector["id"].startswith("verification_round/fuzz/found-")


def test_the_expected_file_is_not_an_orphan_of_the_corpus():
    """``qconform generate --check`` keeps accumulated.json and its schema (no family writes them)."""
    from qconform.generators import drift, registry

    names = [family.name for family in registry.all_families()]
    assert drift._orphan_files(default_vectors_dir(), names) == []
    assert drift._orphan_files(default_vectors_dir(), names[1:]) != []  # the check does look
