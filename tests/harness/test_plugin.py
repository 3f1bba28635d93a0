"""The pytest plugin end to end: collection, batching, verdict mapping, expectations, reports, xdist."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from harness_stubs import ScriptedAdapter, corpus_cases, small_corpus

from qconform.harness.adapter import AdapterError, Unimplemented
from qconform.harness.run import plugin
from qconform.harness.run.case_runner import CHUNK
from qconform.harness.run.plugin import PLUGIN_ARGS
from qconform.harness.transport.arena import BlobArena, case_blobs

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.rules()

FAMILIES = ("rng_abi", "categorical_sampling")
#: the plugin module is already imported here, so pytest could not rewrite it anyway
ARGS = (*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--assert=plain")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = small_corpus(tmp_path_factory.mktemp("corpus"), FAMILIES)
    return root, corpus_cases(root)


def run(pytester, monkeypatch, corpus, adapter, *args) -> tuple[pytest.RunResult, dict]:
    monkeypatch.setattr(plugin, "open_client", adapter.open)
    out = pytester.path / "run.json"
    result = pytester.runpytest_inprocess(
        *ARGS,
        "--qconform-adapter=stub",
        f"--qconform-vectors={corpus[0]}",
        f"--qconform-json={out}",
        f"--junitxml={pytester.path / 'run.xml'}",
        *args,
    )
    assert out.exists(), f"no --qconform-json report; pytest said:\n{result.stdout.str()}"
    return result, json.loads(out.read_text())


def by_class(report):
    return {case["id"]: case["class"] for case in report["cases"]}


def test_without_the_adapter_option_the_plugin_does_nothing(pytester):
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = pytester.runpytest_inprocess(*ARGS)
    result.assert_outcomes(passed=1)
    assert "qconform" not in result.stdout.str()


def test_a_perfect_adapter_passes_every_case_in_chunked_batches(pytester, monkeypatch, corpus):
    adapter = ScriptedAdapter(corpus[1], families=FAMILIES)
    result, report = run(pytester, monkeypatch, corpus, adapter)
    assert result.ret == 0
    result.assert_outcomes(passed=len(corpus[1]))
    assert report["ok"] is True and report["counts"]["pass"] == len(corpus[1])
    assert {c["id"] for c in report["cases"]} == {c["id"] for c in corpus[1]}
    assert report["corpusRoot"] == json.loads((corpus[0] / "index.json").read_text())["root"]
    (client,) = adapter.clients
    assert client.closed
    (arena,) = adapter.arenas  # the collected cases' blobs, decoded once, offered to the adapter
    assert isinstance(arena, BlobArena) and len(arena.index) == len(set(case_blobs(corpus[1])))
    assert all(n <= CHUNK for _, n in client.batches)
    for family in FAMILIES:  # each family's cases went in as few batches as the chunk size allows
        count = sum(1 for c in corpus[1] if c["family"] == family)
        assert sum(n for f, n in client.batches if f == family) == count
        assert len([f for f, _ in client.batches if f == family]) == -(-count // CHUNK)
    assert "adapter stub on cpu" in result.stdout.str()


def test_verdicts_map_onto_pytest_outcomes_and_fail_the_run(pytester, monkeypatch, corpus):
    valid = [c for c in corpus[1] if c["result"] == "valid" and c["family"] == "categorical_sampling"]
    wrong, crashed = valid[0], valid[1]
    adapter = ScriptedAdapter(
        corpus[1],
        {
            wrong["id"]: {"tokens": [0] * len(wrong["expected"]["tokens"])},
            crashed["id"]: AdapterError("segfault in kernel"),
        },
        families=("categorical_sampling",),
    )
    result, report = run(pytester, monkeypatch, corpus, adapter)
    assert result.ret == 1
    classes = by_class(report)
    assert classes[wrong["id"]] == "fail" and classes[crashed["id"]] == "error"
    assert {classes[c["id"]] for c in corpus[1] if c["family"] == "rng_abi"} == {"unsupported"}
    assert not any(case_id.startswith("rng_abi/") for case_id in adapter.seen)  # never asked
    case = next(c for c in report["cases"] if c["id"] == wrong["id"])
    assert case["diff"]["path"].startswith("tokens[") and case["unexpected"] is True
    text = result.stdout.str()
    assert "segfault in kernel" in text and f"FAIL {wrong['id']}" in text
    suites = ET.parse(pytester.path / "run.xml").getroot()
    suite = suites if suites.tag == "testsuite" else suites[0]
    assert int(suite.attrib["failures"]) == 2
    assert int(suite.attrib["skipped"]) == sum(1 for c in corpus[1] if c["family"] == "rng_abi")


def test_expectations_xfail_xpass_disabled_and_stale(pytester, monkeypatch, corpus):
    valid = [c for c in corpus[1] if c["result"] == "valid" and c["family"] == "categorical_sampling"]
    broken, fine = valid[0], valid[1]
    exp = pytester.path / "stub.toml"
    exp.write_text(
        '[disabled]\n"rng_abi/philox_kat/*" = "slow"\n"rng_abi/no_such_group/*" = "gone"\n'
        f'[xfail]\n"{broken["id"]}" = "known bug"\n"{fine["id"]}" = "fixed since"\n'
    )
    adapter = ScriptedAdapter(corpus[1], {broken["id"]: {"error": "ZERO_MASS"}})
    result, report = run(pytester, monkeypatch, corpus, adapter, f"--qconform-expectations={exp}")
    assert result.ret == 1
    classes = by_class(report)
    assert classes[broken["id"]] == "xfail" and classes[fine["id"]] == "xpass"
    disabled = [c["id"] for c in corpus[1] if c["id"].startswith("rng_abi/philox_kat/")]
    assert disabled and all(classes[i] == "disabled" for i in disabled)
    assert not set(disabled) & set(adapter.seen)
    assert any("rng_abi/no_such_group/*" in p and "stale" in p for p in report["problems"])
    outcomes = result.parseoutcomes()
    assert outcomes["xfailed"] == 1 and outcomes["failed"] == 1 and outcomes["skipped"] == len(disabled)


def test_a_stale_entry_alone_fails_an_otherwise_clean_run(pytester, monkeypatch, corpus):
    exp = pytester.path / "stub.toml"
    exp.write_text('[xfail]\n"rng_abi/renamed/case" = "old"\n')
    result, report = run(pytester, monkeypatch, corpus, ScriptedAdapter(corpus[1]), f"--qconform-expectations={exp}")
    assert result.ret == 1 and report["counts"]["pass"] == len(corpus[1])
    assert report["ok"] is False and "rng_abi/renamed/case" in report["problems"][0]
    assert "rng_abi/renamed/case" in result.stdout.str()


def test_family_filter_and_deselection_are_reported_as_not_run(pytester, monkeypatch, corpus):
    result, report = run(
        pytester, monkeypatch, corpus, ScriptedAdapter(corpus[1]), "--qconform-family=rng_abi", "-k", "philox_kat"
    )
    rng = [c for c in corpus[1] if c["family"] == "rng_abi"]
    kat = [c for c in rng if "/philox_kat/" in c["id"]]
    assert result.ret == 0 and report["counts"]["pass"] == len(kat)
    assert report["notRun"] == {"family filter": len(corpus[1]) - len(rng), "deselected": len(rng) - len(kat)}
    assert report["problems"] == []


def test_flags_and_rules_are_keywords(pytester, monkeypatch, corpus):
    result, report = run(pytester, monkeypatch, corpus, ScriptedAdapter(corpus[1]), "-k", "KNOWN_ANSWER")
    assert result.ret == 0
    assert {c["id"].split("/")[1] for c in report["cases"]} == {"philox_kat"}


def test_an_adapter_that_cannot_start_stops_the_run_with_one_line_and_a_report(pytester, monkeypatch, corpus):
    """docs/adapters.md: one AdapterStartError line stops the run (status 3); no case is judged."""
    adapter = ScriptedAdapter(corpus[1], start_error="no CUDA device")
    result, report = run(pytester, monkeypatch, corpus, adapter)
    assert result.ret == 3
    assert report["cases"] == [] and report["ok"] is False
    assert report["problems"] == ["AdapterStartError: no CUDA device"]
    assert result.stderr.str().count("AdapterStartError") == 1


def test_unimplemented_is_unsupported_and_does_not_fail(pytester, monkeypatch, corpus):
    overrides = {c["id"]: Unimplemented("no sparse rows") for c in corpus[1]}
    result, report = run(pytester, monkeypatch, corpus, ScriptedAdapter(corpus[1], overrides))
    assert result.ret == 0 and set(by_class(report).values()) == {"unsupported"}


def test_usage_errors_are_reported_by_pytest(pytester, corpus):
    result = pytester.runpytest_inprocess(
        *ARGS, "--qconform-adapter=stub", f"--qconform-vectors={corpus[0]}", "--qconform-family=nope"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown family nope" in result.stderr.str()


def test_xdist_workers_run_families_and_the_controller_reports(pytester, corpus):
    """A real subprocess run: -n 2 with the reference adapter (plain -n becomes loadgroup)."""
    out = pytester.path / "x.json"
    result = pytester.runpytest_subprocess(
        *ARGS,
        "-n",
        "2",
        "--qconform-adapter=reference",
        f"--qconform-vectors={corpus[0]}",
        f"--qconform-json={out}",
        timeout=120,
    )
    assert result.ret == 0, result.stdout.str()
    report = json.loads(out.read_text())
    assert report["counts"]["pass"] == len(corpus[1]) and report["adapterConfig"]["name"] == "reference"
    assert report["problems"] == []


def test_a_corrupted_vector_file_is_a_collection_error_named_in_the_report(pytester, monkeypatch, corpus, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(corpus[0], broken)
    path = broken / "rng_abi.json"
    path.write_text(path.read_text().replace('"0x6627e8d5"', '"0x6627e8d6"'))
    result, report = run(pytester, monkeypatch, (broken, corpus[1]), ScriptedAdapter(corpus[1]))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert any("rng_abi.json" in p and "sha256" in p for p in report["problems"])
    assert report["notRun"]["not collected"] == sum(1 for c in corpus[1] if c["family"] == "rng_abi")
