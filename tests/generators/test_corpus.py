"""The corpus pipeline on the fake families: determinism, index, pruning, lint, atomic writes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import vector_fakes

from qconform.generators import corpus, registry
from qconform.generators.corpus import CorpusError, OutputError, generate, serialize
from qconform.generators.registry import Case, Group
from qconform.generators.validation import VectorFileError, iter_cases, load_vector_file

# The pipeline carries every rule's vectors; it covers no single rule itself.
pytestmark = pytest.mark.rules()

FAKES = Path(vector_fakes.__file__)
ALPHA = vector_fakes.FAKE_FAMILIES["fake_alpha"]


@pytest.fixture(autouse=True)
def fakes(monkeypatch):
    monkeypatch.delenv("QCONFORM_FAKE_PRUNE", raising=False)
    vector_fakes.install(monkeypatch)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_generation_is_byte_identical_across_hash_seeds(tmp_path):
    runs = {}
    for seed in ("0", "12345"):
        out = tmp_path / f"seed{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        env.pop("QCONFORM_FAKE_PRUNE", None)
        done = subprocess.run(
            [sys.executable, str(FAKES), "generate", "--out", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        runs[seed] = _snapshot(out)
    generate(tmp_path / "inproc")
    assert runs["0"] == runs["12345"] == _snapshot(tmp_path / "inproc")
    assert set(runs["0"]) == {
        "fake_alpha.json",
        "fake_beta.json",
        "index.json",
        "schemas/fake_alpha.schema.json",
        "schemas/fake_beta.schema.json",
        "schemas/index.schema.json",
    }


def test_file_layout_and_ids(tmp_path):
    generate(tmp_path)
    obj = json.loads((tmp_path / "fake_alpha.json").read_text())
    assert obj["family"] == "fake_alpha"
    assert obj["schema"] == "fake_alpha.schema.json"
    assert obj["generator"] == "qconform.generators.families.fake_alpha"
    ids = [c["id"] for g in obj["testGroups"] for c in g["tests"]]
    assert ids == [
        "fake_alpha/rows/dense_a",
        "fake_alpha/rows/dense_b",
        "fake_alpha/rows/dense_c",
        "fake_alpha/mixed/sparse_k2",
        "fake_alpha/mixed/zero_mass",
    ]
    assert obj["numberOfTests"] == 5
    assert obj["notes"]["TIE"] == {"bugType": "EDGE_CASE", "description": "an exact tie"}
    assert (tmp_path / "fake_alpha.json").read_bytes() == serialize(obj)


def test_index_pins_files_cases_and_root(tmp_path):
    generate(tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    recomputed = {}
    for name in ("fake_alpha", "fake_beta"):
        data = (tmp_path / f"{name}.json").read_bytes()
        entry = index["families"][name]
        assert entry["sha256"] == _sha(data)
        assert entry["schemaSha256"] == _sha((tmp_path / entry["schema"]).read_bytes())
        obj = json.loads(data)
        assert entry["count"] == obj["numberOfTests"]
        for group in obj["testGroups"]:
            for case in group["tests"]:
                text = json.dumps(case, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
                recomputed[case["id"]] = _sha(text.encode())
    assert index["cases"] == recomputed
    lines = "".join(f"{cid} {recomputed[cid]}\n" for cid in sorted(recomputed))
    assert index["root"] == _sha(lines.encode())
    assert index["specVersion"] == "1"


def test_family_subset_prunes_vanished_cases_and_leaves_others_untouched(tmp_path, monkeypatch):
    full, tmp_path = tmp_path / "full", tmp_path / "main"
    generate(tmp_path)
    beta = tmp_path / "fake_beta.json"
    before_beta, before_mtime = beta.read_bytes(), beta.stat().st_mtime_ns
    old_root = json.loads((tmp_path / "index.json").read_text())["root"]
    monkeypatch.setenv("QCONFORM_FAKE_PRUNE", "1")
    _, changed = generate(tmp_path, [ALPHA])
    assert beta.read_bytes() == before_beta and beta.stat().st_mtime_ns == before_mtime
    assert beta not in changed and tmp_path / "fake_alpha.json" in changed
    index = json.loads((tmp_path / "index.json").read_text())
    assert vector_fakes.PRUNED_CASE not in index["cases"]
    assert "fake_beta/only/weights_f32" in index["cases"]
    assert index["families"]["fake_alpha"]["count"] == 4
    assert index["root"] != old_root
    ids = [c.id for c in iter_cases(tmp_path)]
    assert vector_fakes.PRUNED_CASE not in ids and len(ids) == 5
    # the pruned corpus equals a full generation of the pruned generators
    generate(full)
    assert _snapshot(full) == _snapshot(tmp_path)


def test_iter_cases_yields_every_case_with_its_notes(tmp_path):
    generate(tmp_path)
    cases = list(iter_cases(tmp_path))
    assert [c.family for c in cases] == ["fake_alpha"] * 5 + ["fake_beta"]
    refusal = next(c for c in cases if c.id == "fake_alpha/mixed/zero_mass")
    assert refusal.result == "invalid" and refusal.expected == {"error": "ZERO_MASS"}
    dense_c = next(c for c in cases if c.id == "fake_alpha/rows/dense_c")
    assert set(dense_c.notes) == {"SKEW", "TIE"} and dense_c.group == "rows"
    assert [c.id for c in iter_cases(tmp_path, ["fake_beta"])] == ["fake_beta/only/weights_f32"]


def test_iter_cases_refuses_a_file_edited_after_generation(tmp_path):
    generate(tmp_path)
    path = tmp_path / "fake_beta.json"
    path.write_bytes(path.read_bytes().replace(b'"comment"', b'"comment" '))
    with pytest.raises(VectorFileError, match="fake_beta.json: \\$: file bytes do not match"):
        list(iter_cases(tmp_path))


def _alpha_with(**changes):
    """fake_alpha with its first case changed, or other family fields replaced."""
    case_changes = changes.pop("case", {})
    groups = list(ALPHA.build())
    first = dataclasses.replace(groups[0].tests[0], **case_changes)
    groups[0] = Group(groups[0].name, groups[0].description, groups[0].rules, [first, *groups[0].tests[1:]])
    return dataclasses.replace(ALPHA, build=lambda: groups, **changes)


@pytest.mark.parametrize(
    "family, message",
    [
        (_alpha_with(case={"name": "dense_b"}), "duplicate id 'fake_alpha/rows/dense_b'"),
        (_alpha_with(case={"flags": ("NOPE",)}), "flag NOPE is not defined in notes"),
        (_alpha_with(notes={**ALPHA.notes, "UNUSED": ALPHA.notes["TIE"]}), "$.notes.UNUSED: note is not used"),
        (_alpha_with(case={"rules": ("R30",)}), "rules ['R30'] are not among the file's rules"),
        (_alpha_with(case={"result": "invalid"}), "an invalid case's expected must be exactly"),
        (_alpha_with(case={"expected": {"error": "ZERO_MASS"}}), "a valid case must not expect an error"),
        (_alpha_with(case={"result": "acceptable", "flags": ()}), "an acceptable case needs flags"),
        (_alpha_with(case={"expected": {"token": 1, "mass": "2/4"}}), "not in lowest terms (1/2)"),
        (
            _alpha_with(
                case={
                    "input": {
                        "q": {"representation": "dense", "counts": {"dtype": "u32", "shape": [2], "b64": "AAAAAA=="}},
                        "seed": "1",
                    }
                }
            ),
            "blob holds 4 bytes, shape [2] of u32 needs 8",
        ),
        (_alpha_with(case={"input": {"q": {}, "seed": "1"}}), "$.testGroups[0].tests[0].input.q"),
        (_alpha_with(input_schema={}), "schema $.$defs.input accepts unknown properties"),
    ],
)
def test_generated_files_that_fail_their_checks_are_refused(tmp_path, family, message):
    with pytest.raises(CorpusError) as info:
        generate(tmp_path, [family])
    assert any(message in p for p in info.value.problems), info.value.problems
    assert list(tmp_path.iterdir()) == []


def test_case_ids_must_be_unique_across_families():
    with pytest.raises(
        CorpusError, match="duplicate id 'fake_alpha/rows/dense_a' in fake_alpha.json and fake_alpha.json"
    ):
        corpus.build_families([ALPHA, dataclasses.replace(ALPHA)])


def test_a_failed_write_leaves_no_partial_or_temporary_file(tmp_path):
    (tmp_path / "schemas").write_text("a file where the schemas directory should be")
    with pytest.raises(OutputError) as info:
        generate(tmp_path)
    assert "schemas" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schemas"]


def test_a_failed_replace_cleans_up_the_staged_files(tmp_path, monkeypatch):
    generate(tmp_path)
    before = _snapshot(tmp_path)
    (tmp_path / "index.json").unlink()
    (tmp_path / "index.json").mkdir()  # os.replace of a file onto a directory fails
    monkeypatch.setenv("QCONFORM_FAKE_PRUNE", "1")
    with pytest.raises(OutputError, match="index.json"):
        generate(tmp_path)
    leftovers = [p.name for p in tmp_path.rglob("*.tmp")]
    assert leftovers == []
    for rel, data in _snapshot(tmp_path).items():
        assert rel in before  # every file is whole: either its old or its new bytes
        assert json.loads(data)


def test_load_vector_file_names_file_and_json_path(tmp_path):
    generate(tmp_path)
    path = tmp_path / "fake_alpha.json"
    obj = json.loads(path.read_text())
    obj["testGroups"][1]["tests"][0]["input"]["seed"] = "01"
    path.write_bytes(serialize(obj))
    with pytest.raises(VectorFileError) as info:
        load_vector_file(path)
    assert str(info.value).startswith(f"{path}: $.testGroups[1].tests[0].input.seed: ")
    path.write_text('{"family": ')
    with pytest.raises(VectorFileError, match="invalid JSON at line 1 column 12"):
        load_vector_file(path)


def test_default_vectors_dir_is_the_package_dir_unless_overridden(monkeypatch, tmp_path):
    import qconform.vectors

    monkeypatch.delenv(corpus.VECTORS_ENV, raising=False)
    assert corpus.default_vectors_dir() == Path(qconform.vectors.__file__).parent
    monkeypatch.setenv(corpus.VECTORS_ENV, str(tmp_path))
    assert corpus.default_vectors_dir() == tmp_path


def test_registry_is_patched_to_fakes():
    # guards the fixture: every test above runs on the fakes, never on the real families
    assert registry.family_names() == ("fake_alpha", "fake_beta")
    assert isinstance(next(iter(registry.load_family("fake_beta").build())).tests[0], Case)


@pytest.mark.slow
def test_real_corpus_is_byte_identical_across_hash_seeds(tmp_path):
    runs = []
    for seed in ("0", "12345"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-m", "qconform", "generate", "--out", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.returncode == 0, done.stderr
        runs.append(_snapshot(out))
    assert runs[0] == runs[1]


@pytest.mark.slow
def test_committed_corpus_has_no_drift():
    done = subprocess.run(
        [sys.executable, "-m", "qconform", "generate", "--check"], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout + done.stderr
