"""Committed fuzz findings (generators.findings, harness.fuzz.record_vector, ``fuzz --record``):
strict loading with precise errors, the ``fuzz`` group re-solved by the family's ``solve``,
idempotent recording, and the command recording a real finding of a bundled mutant."""

from __future__ import annotations

import dataclasses
import json
from itertools import accumulate
from pathlib import Path

import pytest
from click.testing import CliRunner

from qconform.cli.fuzz import fuzz as fuzz_command
from qconform.generators import corpus, findings, registry
from qconform.generators.encoding import encode_blob
from qconform.generators.families.categorical_sampling import decode_qrow
from qconform.generators.findings import FoundFileError
from qconform.generators.registry import Group, load_family
from qconform.generators.validation import load_vector_file
from qconform.harness.fuzz import driver as fuzzing
from qconform.spec.constants import M

pytestmark = pytest.mark.rules("R03", "R04", "R07", "R08", "R22", "R23")

FAMILY = "categorical_sampling"
COMMITTED = Path(findings.__file__).parent / "found"


def dense_input(counts: list[int], draws: list[int]) -> dict:
    row = {"representation": "dense", "counts": encode_blob("u32", counts)}
    return {"vocab": len(counts), "row": row, "draws": draws}


def entry(name: str, counts: list[int], draws: list[int], **extra) -> dict:
    return {
        "id": f"{FAMILY}/fuzz/{name}",
        "comment": f"found {name}",
        "flags": ["RANDOM_ROW"],
        **extra,
        "input": dense_input(counts, draws),
    }


def first_above(case_input: dict) -> list[int]:
    """The proposal rule computed here, independently of the spec: first cumulative count > u."""
    cumulative = list(accumulate(decode_qrow(case_input["row"], case_input["vocab"]).dense_counts()))
    return [next(v for v, c in enumerate(cumulative) if c > u) for u in case_input["draws"]]


def write_found(directory: Path, entries: object, family: str = FAMILY) -> Path:
    path = directory / f"{family}.json"
    path.write_text(json.dumps(entries))
    return path


@pytest.fixture
def found_dir(tmp_path, monkeypatch) -> Path:
    """An empty found-inputs directory that the default lookups use."""
    directory = tmp_path / "found"
    directory.mkdir()
    monkeypatch.setenv(findings.FOUND_ENV, str(directory))
    return directory


# --- loading ----------------------------------------------------------------------------------


def test_a_valid_file_loads_and_an_absent_one_is_empty(found_dir):
    family = load_family(FAMILY)
    assert findings.load_found(family) == [] and findings.found_groups(family) == []
    entries = [entry("a", [1, M - 1], [1]), entry("b", [M // 2, M // 2], [0, M // 2], rules=["R08"])]
    write_found(found_dir, entries)
    assert findings.load_found(family) == entries
    assert findings.found_path(FAMILY) == found_dir / f"{FAMILY}.json"


def test_the_default_directory_is_beside_the_generators_package(monkeypatch):
    monkeypatch.delenv(findings.FOUND_ENV, raising=False)
    assert findings.default_found_dir() == Path(registry.__file__).parent / "found"


def mutated(change) -> list[dict]:
    entries = [entry("a", [1, M - 1], [1]), entry("b", [M // 2, M // 2], [0])]
    change(entries)
    return entries


MALFORMED = [
    ("unknown flag", lambda e: e[1]["flags"].append("NOPE"), "$[1].flags[1]", "'NOPE' is not one of"),
    (
        "extra field",
        lambda e: e[0].update(expected={"tokens": [1]}),
        "$[0]",
        "Additional properties are not allowed ('expected' was unexpected)",
    ),
    ("missing input", lambda e: e[1].pop("input"), "$[1]", "'input' is a required property"),
    ("other family's id", lambda e: e[0].update(id="rng_abi/fuzz/x"), "$[0].id", "does not match"),
    ("other group's id", lambda e: e[0].update(id=f"{FAMILY}/random_rows/x"), "$[0].id", "does not match"),
    ("rule of no family rule", lambda e: e[1].update(rules=["R11"]), "$[1].rules[0]", "'R11' is not one of"),
    ("empty comment", lambda e: e[0].update(comment=""), "$[0].comment", "should be non-empty"),
    ("bad input", lambda e: e[1]["input"].pop("draws"), "$[1].input", "'draws' is a required property"),
    ("short blob", lambda e: e[0]["input"]["row"]["counts"].update(shape=[3]), "$[0].input.row.counts", "shape"),
    ("duplicate id", lambda e: e[1].update(id=e[0]["id"]), "$[1].id", "duplicate id"),
]


@pytest.mark.parametrize("what, change, json_path, message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_entries_are_refused_naming_file_path_and_entry(found_dir, what, change, json_path, message):
    entries = mutated(change)
    path = write_found(found_dir, entries)
    with pytest.raises(FoundFileError) as raised:
        findings.load_found(load_family(FAMILY))
    error = raised.value
    assert (error.path, error.json_path) == (str(path), json_path), str(error)
    assert message in error.detail
    index = int(json_path[2 : json_path.index("]")])
    if isinstance(entries[index].get("id"), str) and what != "duplicate id":
        assert f"(entry {entries[index]['id']!r})" in error.detail
    assert str(error).startswith(f"{path}: {json_path}: ")
    assert "\n" not in str(error)


@pytest.mark.parametrize(
    "text, json_path, message",
    [
        ('[{"id": 1}', "$", "invalid JSON at line 1 column 11"),
        ("{}", "$", "is not of type 'array'"),
        ("[3]", "$[0]", "is not of type 'object'"),
    ],
)
def test_a_file_that_is_not_a_list_of_entries_is_refused(found_dir, text, json_path, message):
    (found_dir / f"{FAMILY}.json").write_text(text)
    with pytest.raises(FoundFileError) as raised:
        findings.load_found(load_family(FAMILY))
    assert raised.value.json_path == json_path and message in raised.value.detail


def test_a_family_without_solve_cannot_have_found_inputs(found_dir):
    family = dataclasses.replace(load_family(FAMILY), solve=None)
    write_found(found_dir, [entry("a", [M], [0])])
    with pytest.raises(FoundFileError, match="has no solve"):
        findings.load_found(family)


def test_a_malformed_file_stops_generation_with_one_line(found_dir, tmp_path):
    from qconform.cli.group import cli

    write_found(found_dir, mutated(lambda e: e[0]["flags"].append("NOPE")))
    result = CliRunner().invoke(
        cli, ["generate", "--family", "rng_abi", "--family", FAMILY, "--out", str(tmp_path / "vectors")]
    )
    assert result.exit_code == 1 and result.exception is not None
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: {found_dir / FAMILY}.json: $[0].flags[1]: 'NOPE' is not one of")
    assert not (tmp_path / "vectors").exists()


# --- the fuzz group ---------------------------------------------------------------------------


def small_family():
    """categorical_sampling with one small generated group (its real build is slow)."""
    family = load_family(FAMILY)
    case = findings.found_case(family, entry("seed", [M // 4, 3 * M // 4], [0]))
    return dataclasses.replace(
        family,
        notes={"RANDOM_ROW": family.notes["RANDOM_ROW"]},
        build=lambda: [Group("random_rows", "one row", ("R08",), [case])],
    )


def test_the_fuzz_group_re_solves_expected_with_the_familys_solve(found_dir):
    family = small_family()
    entries = [entry("a", [1, M - 1], [1], rules=["R08"]), entry("b", [3, 0, M - 3], [2, 3, M - 1])]
    write_found(found_dir, entries)
    output, obj = corpus.build_family(family)  # validated against the family schema and linted
    assert [g["group"] for g in obj["testGroups"]] == ["random_rows", "fuzz"]
    fuzz_group = obj["testGroups"][1]
    assert fuzz_group["rules"] == list(family.rules)  # R08, and all the family cites for "b" (no rules)
    assert family.solve is not None
    for case, found in zip(fuzz_group["tests"], entries, strict=True):
        assert case["id"] == found["id"] and case["comment"] == found["comment"]
        assert case["flags"] == found["flags"] and case["input"] == found["input"]
        assert case["rules"] == found.get("rules", list(family.rules))
        assert case["expected"] == family.solve(found["input"])
        assert case["expected"] == {"tokens": first_above(found["input"])}
        assert case["result"] == "valid"
    assert fuzz_group["tests"][0]["expected"] == {"tokens": [1]}
    assert set(output.case_hashes) == {f"{FAMILY}/random_rows/seed", *(e["id"] for e in entries)}


def test_a_refused_input_becomes_an_invalid_case(found_dir):
    family = small_family()
    write_found(found_dir, [entry("short", [1, M - 2], [0])])  # counts sum to M - 1
    _, obj = corpus.build_family(family)
    (case,) = obj["testGroups"][1]["tests"]
    assert case["result"] == "invalid" and case["expected"] == {"error": "WRONG_TOTAL_MASS"}


def test_a_build_that_yields_its_own_fuzz_group_is_a_generator_bug(found_dir):
    family = small_family()
    family = dataclasses.replace(
        family, build=lambda: [dataclasses.replace(g, name="fuzz") for g in small_family().build()]
    )
    with pytest.raises(corpus.CorpusError, match="yields the group 'fuzz'"):
        corpus.build_family(family)


# --- recording --------------------------------------------------------------------------------


def vector(name: str, counts: list[int], draws: list[int]) -> dict:
    case_input = dense_input(counts, draws)
    solve = load_family(FAMILY).solve
    assert solve is not None
    return {
        "id": f"{FAMILY}/fuzz/{name}",
        "comment": "found",
        "flags": ["RANDOM_ROW"],
        "rules": ["R08"],
        "result": "valid",
        "input": case_input,
        "expected": solve(case_input),
    }


def test_recording_appends_once_per_id(found_dir):
    first, second = vector("a", [1, M - 1], [1]), vector("b", [M], [0])
    path = found_dir / f"{FAMILY}.json"
    assert fuzzing.record_vector(first) == (path, True)
    data = path.read_bytes()
    assert fuzzing.record_vector(first) == (path, False) and path.read_bytes() == data
    assert fuzzing.record_vector(second) == (path, True)
    assert fuzzing.record_vector(first) == (path, False)
    recorded = json.loads(path.read_text())
    assert recorded == [findings.entry_of(first), findings.entry_of(second)]
    assert all(list(e) == ["id", "comment", "flags", "rules", "input"] for e in recorded)
    assert findings.load_found(load_family(FAMILY)) == recorded


def test_recording_never_overwrites_a_malformed_file_or_writes_a_bad_entry(found_dir):
    path = write_found(found_dir, [{"id": "x"}])
    with pytest.raises(FoundFileError):
        fuzzing.record_vector(vector("a", [M], [0]))
    assert json.loads(path.read_text()) == [{"id": "x"}]
    path.unlink()
    bad = vector("a", [M], [0]) | {"flags": ["NOT_A_NOTE"]}
    with pytest.raises(FoundFileError, match=r"\$\[0\]\.flags\[0\]"):
        fuzzing.record_vector(bad)
    assert not path.exists()


def invoke_fuzz(*args: str):
    return CliRunner().invoke(fuzz_command, list(args), catch_exceptions=False)


def test_the_command_records_a_real_finding_of_a_bundled_mutant(found_dir, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "vector.json"
    result = invoke_fuzz(
        "--adapter",
        "torch-mutant:cumulative-ge",
        "--family",
        FAMILY,
        "--examples",
        "10",
        "--seed",
        "0",
        "--vector-out",
        str(out),
        "--record",
    )
    assert result.exit_code == 1, result.output
    printed = json.loads(out.read_text())
    path = found_dir / f"{FAMILY}.json"
    assert f"recorded {printed['id']} in {path}; run `qconform generate`" in result.output
    (recorded,) = json.loads(path.read_text())
    assert recorded == findings.entry_of(printed)
    assert "torch-mutant:cumulative-ge" in recorded["comment"] and "RANDOM_ROW" in recorded["flags"]
    # the mutant's '>=' answer differs from the spec's on the recorded input
    case = findings.found_case(load_family(FAMILY), recorded)
    cumulative = list(accumulate(decode_qrow(case.input["row"], case.input["vocab"]).dense_counts()))
    buggy = [next(v for v, c in enumerate(cumulative) if c >= u) for u in case.input["draws"]]
    assert case.expected == {"tokens": first_above(case.input)} != {"tokens": buggy}


def test_the_command_records_nothing_without_a_finding(found_dir):
    result = invoke_fuzz("--adapter", "reference", "--family", "rng_abi", "--examples", "3", "--record")
    assert result.exit_code == 0, result.output
    assert "recorded" not in result.output and list(found_dir.iterdir()) == []


def test_the_command_refuses_to_start_on_a_malformed_found_file(found_dir):
    write_found(found_dir, {"not": "a list"}, family="rng_abi")
    result = CliRunner().invoke(fuzz_command, ["--adapter", "reference", "--family", "rng_abi", "--record"])
    assert result.exit_code == 1
    assert f"Error: {found_dir / 'rng_abi.json'}: $: " in result.output and "fuzz:" not in result.output


# --- the committed findings -------------------------------------------------------------------


def committed_files() -> list[Path]:
    return sorted(COMMITTED.glob("*.json"))


def test_every_committed_found_file_is_a_registered_familys_and_loads(monkeypatch):
    monkeypatch.delenv(findings.FOUND_ENV, raising=False)
    assert {p.stem for p in committed_files()} >= {FAMILY, "rng_abi"}
    assert {p.name for p in COMMITTED.iterdir()} == {p.name for p in committed_files()}  # data only
    for path in committed_files():
        assert path.stem in registry.family_names(), f"{path} names no registered family"
        assert findings.load_found(load_family(path.stem)), f"{path} holds no entry"


def test_the_committed_corpus_holds_each_found_input_as_solved(monkeypatch):
    """The ``fuzz`` group of vectors/<family>.json is the found file, answered by ``solve``."""
    from qconform.generators.corpus import default_vectors_dir

    monkeypatch.delenv(findings.FOUND_ENV, raising=False)
    for path in committed_files():
        family = load_family(path.stem)
        committed = load_vector_file(default_vectors_dir() / f"{family.name}.json")
        (group,) = [g for g in committed["testGroups"] if g["group"] == "fuzz"]
        (fresh,) = findings.found_groups(family)
        assert [t["id"] for t in group["tests"]] == [f"{family.name}/fuzz/{c.name}" for c in fresh.tests]
        assert family.solve is not None, family.name
        for test, case in zip(group["tests"], fresh.tests, strict=True):
            assert test["input"] == case.input and test["expected"] == family.solve(case.input)


def test_the_committed_rng_abi_finding_catches_swapped_key_words(monkeypatch):
    """Seed 1 puts 1 in key word 0 (the low word) and 0 in word 1: swapping them changes the key."""
    monkeypatch.delenv(findings.FOUND_ENV, raising=False)
    (found,) = findings.load_found(load_family("rng_abi"))
    case = findings.found_case(load_family("rng_abi"), found)
    seed = int(case.input["seed"])
    assert case.expected["key"] == [f"0x{seed & 0xFFFFFFFF:08x}", f"0x{seed >> 32:08x}"]
    assert case.expected["key"] != case.expected["key"][::-1]
