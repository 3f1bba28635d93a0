"""The `qconform generate` / `rules` / `sizes` commands: outputs, drift report, errors, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import vector_fakes
from click.testing import CliRunner

from qconform.cli.group import cli
from qconform.generators.corpus import serialize

pytestmark = pytest.mark.rules()


@pytest.fixture(autouse=True)
def fakes(monkeypatch):
    monkeypatch.delenv("QCONFORM_FAKE_PRUNE", raising=False)
    vector_fakes.install(monkeypatch)


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env=env)


def assert_one_line_error(result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def corpus_dir(tmp_path) -> Path:
    out = tmp_path / "vectors"
    result = run("generate", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "2 families, 6 cases" in result.stdout
    return out


def _edit(path: Path, change) -> None:
    obj = json.loads(path.read_text())
    change(obj)
    path.write_bytes(serialize(obj))


def test_check_passes_on_a_clean_corpus(corpus_dir):
    result = run("generate", "--out", str(corpus_dir), "--check")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines() == [f"clean: 2 families, 6 cases match {corpus_dir}"]


def test_check_names_every_drifted_missing_and_orphan_case_and_file(corpus_dir):
    def drift_cases(obj):
        rows = obj["testGroups"][0]["tests"]
        rows[0]["expected"]["token"] = 0  # drifted
        orphan = json.loads(json.dumps(rows[1]))
        orphan["id"] = "fake_alpha/rows/retired"
        del rows[2]  # missing: dense_c
        rows.append(orphan)  # orphan
        obj["testGroups"][1]["tests"][0]["flags"] = ["TINY", "SKEW", "TIE"]  # keep every note used

    _edit(corpus_dir / "fake_alpha.json", drift_cases)
    _edit(corpus_dir / "schemas/fake_beta.schema.json", lambda s: s.update(description="edited"))
    (corpus_dir / "old_family.json").write_text("{}")

    result = run("generate", "--out", str(corpus_dir), "--check")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    for expected in [
        "drifted  fake_alpha/rows/dense_a: expected.token: committed 0, regenerated ",
        "missing  fake_alpha/rows/dense_c",
        "orphan   fake_alpha/rows/retired",
        "drifted  fake_alpha/mixed/sparse_k2: len(flags): committed 3, regenerated 1",
        "drifted  schemas/fake_beta.schema.json",
        "orphan   old_family.json",
    ]:  # a drifted case names its first differing field with both values (issue #12 §2)
        assert any(line == expected or (expected.endswith(" ") and line.startswith(expected)) for line in lines), (
            expected,
            lines,
        )
    # the index is what the generators would write, so it has not drifted
    assert len(lines) == 6, lines
    assert "6 drift(s)" in result.stderr
    # the check wrote nothing
    assert json.loads((corpus_dir / "schemas/fake_beta.schema.json").read_text())["description"] == "edited"


def test_check_reports_missing_files_and_drift_outside_cases(corpus_dir):
    (corpus_dir / "fake_beta.json").unlink()
    (corpus_dir / "index.json").unlink()
    _edit(corpus_dir / "fake_alpha.json", lambda o: o["testGroups"][0].update(description="edited"))
    result = run("generate", "--out", str(corpus_dir), "--check")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert "missing  fake_beta.json" in lines
    assert "missing  fake_beta/only/weights_f32" in lines
    assert "missing  index.json" in lines
    assert any(line.startswith("drifted  fake_alpha.json (outside its cases") for line in lines)


def test_check_of_one_family_ignores_the_others(corpus_dir):
    _edit(corpus_dir / "fake_beta.json", lambda o: o["testGroups"][0].update(description="edited"))
    result = run("generate", "--out", str(corpus_dir), "--check", "--family", "fake_alpha")
    # the index still lists fake_beta by the hash of its (edited) committed file
    assert result.exit_code == 1
    assert result.stdout.splitlines() == ["drifted  index.json"]
    assert run("generate", "--out", str(corpus_dir), "--family", "fake_beta").exit_code == 0
    assert run("generate", "--out", str(corpus_dir), "--check").exit_code == 0


def test_family_option_prunes_and_updates_the_index(corpus_dir):
    beta = (corpus_dir / "fake_beta.json").read_bytes()
    result = run("generate", "--out", str(corpus_dir), "--family", "fake_alpha", env={"QCONFORM_FAKE_PRUNE": "1"})
    assert result.exit_code == 0, result.output
    assert "1 families, 4 cases" in result.stdout
    index = json.loads((corpus_dir / "index.json").read_text())
    assert vector_fakes.PRUNED_CASE not in index["cases"] and len(index["cases"]) == 5
    assert vector_fakes.PRUNED_CASE.encode() not in (corpus_dir / "fake_alpha.json").read_bytes()
    assert (corpus_dir / "fake_beta.json").read_bytes() == beta
    check = run("generate", "--out", str(corpus_dir), "--check", env={"QCONFORM_FAKE_PRUNE": "1"})
    assert check.exit_code == 0, check.output


def test_env_var_sets_the_default_output(tmp_path):
    result = run("generate", env={"QCONFORM_VECTORS": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "index.json").is_file()


@pytest.mark.parametrize("extra", [[], ["--check"]])
def test_unknown_family_is_a_one_line_usage_error(tmp_path, extra):
    result = run("generate", "--out", str(tmp_path), "--family", "nope", *extra)
    assert_one_line_error(result, 2, "unknown family nope", "known families: fake_alpha, fake_beta")
    assert list(tmp_path.iterdir()) == []


def test_malformed_committed_json_is_a_one_line_error(corpus_dir):
    (corpus_dir / "fake_alpha.json").write_text('{"family": "fake_alpha",\n  oops')
    result = run("generate", "--out", str(corpus_dir), "--check")
    assert_one_line_error(result, 1, str(corpus_dir / "fake_alpha.json"), "$: invalid JSON at line 2 column 3")


def test_schema_violation_in_committed_file_names_the_json_path(corpus_dir):
    _edit(corpus_dir / "fake_alpha.json", lambda o: o["testGroups"][1]["tests"][0]["input"]["q"].update(extra=1))
    result = run("generate", "--out", str(corpus_dir), "--check")
    assert_one_line_error(result, 1, "fake_alpha.json: $.testGroups[1].tests[0].input.q: ", "('extra' was unexpected)")


def test_malformed_sibling_file_stops_a_partial_generation(corpus_dir):
    (corpus_dir / "fake_beta.json").write_text("[]")
    result = run("generate", "--out", str(corpus_dir), "--family", "fake_alpha")
    assert_one_line_error(result, 1, "fake_beta.json: $:")


def test_unwritable_output_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run("generate", "--out", str(blocker / "vectors"))
    assert_one_line_error(result, 4, "cannot write", str(blocker / "vectors"))


def test_generator_bug_is_reported_without_traceback(tmp_path, monkeypatch):
    import dataclasses

    broken = dataclasses.replace(vector_fakes.FAKE_FAMILIES["fake_beta"], rules=("R01",))
    monkeypatch.setitem(vector_fakes.FAKE_FAMILIES, "fake_beta", broken)
    result = run("generate", "--out", str(tmp_path))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "generator bug" in result.stderr and "rules ['R10'] are not among the file's rules" in result.stderr


@pytest.mark.rules("R26")
def test_sizes_command_prints_the_design_table():
    result = run("sizes")
    assert result.exit_code == 0, result.output
    for text in [
        "2,585,600",
        "10,342,400",
        "640",
        "2,560",
        "1,280",
        "5,120",
        "10,240",
        "40,960",
        "1,292,800",
        "5,171,200",
        "0.517 ms",
        "2.068 ms",
        "0.259 ms",
        "20,684,800",
        "19.73 MiB",
        "2.586 MB",
        "10.342 MB",
        "1616/3125 ms",
        "6464/3125 ms",
        "808/3125 ms",
    ]:
        assert text in result.stdout, text
    assert "R27 refuses" not in result.stdout


@pytest.mark.rules("R26", "R27")
def test_sizes_command_takes_overrides_and_flags_refused_shapes():
    result = run(
        "sizes",
        "--vocab",
        "1000",
        "--depth",
        "6",
        "--requests",
        "8",
        "--k",
        "8",
        "--shards",
        "4",
        "--link-gbps",
        "25/2",
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "24,000" in out  # dense 4 * 1000 * 6
    assert "192,000" in out  # 8 requests
    assert "Sparse k=8" in out and "384" in out  # 8 * 8 * 6
    assert "250 tokens" in out and "6,000" in out  # 4 * 250 * 6
    assert "12.5 Gb/s" in out or "25/2 Gb/s" in out
    assert "R27 refuses this shape" in out
    bad = run("sizes", "--link-gbps", "fast")
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_rules_command_reports_and_missing_exits_nonzero(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text('import pytest\n\n@pytest.mark.rules("R05")\ndef test_a():\n    pass\n')
    result = run("rules", "--tests", str(tests), "--vectors", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "R05" in result.stdout and "test_x.py (1)" in result.stdout
    missing = run("rules", "--missing", "--tests", str(tests), "--vectors", str(tmp_path))
    assert missing.exit_code == 1
    assert "R38" in missing.stdout


def test_help_lists_the_commands():
    result = run("--help")
    assert result.exit_code == 0
    for name in ("generate", "rules", "sizes"):
        assert name in result.stdout
