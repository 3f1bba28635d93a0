"""The human report (header, per-family table, unexpected results) and the JSON report."""

from __future__ import annotations

import json

import pytest

from qconform.harness.run import json_report
from qconform.harness.run.report import header_lines, render_to_text
from qconform.harness.run.summary import RunHeader, RunSummary
from qconform.harness.verdicts import Diff, Verdict, VerdictClass

pytestmark = pytest.mark.rules()

HEADER = RunHeader(
    adapter="torch",
    device="cuda:0",
    corpus_root="ab" * 32,
    vectors="/v",
    qconform_version="9.9",
    expectations="/e/torch.toml",
    families=("allocation_dense", "rng_abi"),
)


def summary(*verdicts: Verdict, problems=(), not_run=None) -> RunSummary:
    result = RunSummary(HEADER, not_run=dict(not_run or {}), problems=list(problems))
    for verdict in verdicts:
        result.add(verdict)
    return result


PASSES = [Verdict(VerdictClass.PASS, f"rng_abi/g/c{i}") for i in range(3)]
FAILURE = Verdict(
    VerdictClass.FAIL, "allocation_dense/g/bad", "counts differ at counts[3]", Diff("counts[3]", "7", "8")
)
PRECISE = Verdict(VerdictClass.PRECISION, "allocation_dense/g/near", "within margins", Diff("counts[1]", "2", "3"))
DISABLED = Verdict(VerdictClass.DISABLED, "rng_abi/slow/c", "disabled: slow")


def test_header_names_adapter_device_corpus_root_and_version():
    text = "\n".join(header_lines(HEADER))
    for part in ("torch", "cuda:0", "ab" * 32, "9.9", "/e/torch.toml", "allocation_dense, rng_abi"):
        assert part in text


def test_summary_table_lists_counts_per_family_and_the_unexpected_results():
    text = render_to_text(summary(*PASSES, FAILURE, PRECISE, DISABLED, not_run={"family filter": 4}), width=120)
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 2}
    assert [c.strip() for c in rows["rng_abi"].split("│")[2:-1]] == ["3", "0", "0", "1", "4"]  # pass fail prec dis tot
    assert [c.strip() for c in rows["allocation_dense"].split("│")[2:-1]] == ["0", "1", "1", "0", "2"]
    assert "FAIL allocation_dense/g/bad: counts differ at counts[3]" in text
    assert "not run: 5 (family filter 4, disabled 1)" in text
    assert "FAILED" in text and "1 unexpected" in text


def test_a_clean_run_says_ok_and_problems_are_listed():
    assert "OK: 3 pass; 0 unexpected" in render_to_text(summary(*PASSES))
    text = render_to_text(summary(*PASSES, problems=["stale [xfail] entry 'a/b/c'"]))
    assert "problem: stale [xfail] entry 'a/b/c'" in text and "FAILED" in text


def test_json_report_holds_every_case_and_the_counts(tmp_path):
    result = summary(*PASSES, FAILURE, PRECISE, problems=["p"], not_run={"deselected": 2})
    path = tmp_path / "sub" / "run.json"
    json_report.write(path, result)
    report = json.loads(path.read_text())
    assert report["format"] == "qconform-run-v1" and report["ok"] is False
    assert report["adapter"] == "torch" and report["corpusRoot"] == "ab" * 32
    assert report["counts"]["pass"] == 3 and report["counts"]["fail"] == 1 and report["counts"]["precision"] == 1
    assert report["families"]["allocation_dense"] == {"fail": 1, "precision": 1}
    assert report["notRun"] == {"deselected": 2} and report["problems"] == ["p"]
    ids = [c["id"] for c in report["cases"]]
    assert ids == sorted(ids) and len(ids) == 5
    bad = next(c for c in report["cases"] if c["id"] == FAILURE.case_id)
    assert bad["unexpected"] is True and bad["diff"] == {"path": "counts[3]", "expected": "7", "got": "8"}
    assert {k for k in bad} >= {"id", "family", "class", "message", "duration"}
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind
