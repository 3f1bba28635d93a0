"""Issue #12 §2, triage: from a red line to the bug in one step.

``qconform show``, the flags/rules/comment/reproducer of every failure, ``--case``,
``-x``, ``--lf``, ``--list``, the drift diff of ``generate --check``, and ``stat``'s
``-k``/``--exclude`` and the answer it keeps for an invalid case.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness_stubs import ScriptedAdapter, corpus_cases, small_corpus

from qconform.cli.group import cli
from qconform.generators.corpus import default_vectors_dir
from qconform.generators.drift import check
from qconform.generators.registry import load_family
from qconform.harness.adapter import Adapter, Capabilities, PrecisionProfile
from qconform.harness.run import plugin
from qconform.harness.run.gate import RunExit
from qconform.harness.stat.report import case_json
from qconform.harness.stat.runner import FAIL, PASS, InProcess, StatOptions, load_cases, run_stat

pytestmark = pytest.mark.rules()
VECTORS = default_vectors_dir()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = small_corpus(tmp_path_factory.mktemp("corpus"), ("rng_abi",))
    return root, corpus_cases(root)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QCONFORM_CACHE", str(tmp_path / "cache"))


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def victims(cases, n=2):
    return [c for c in cases if c["result"] == "valid"][:n]


def scripted(monkeypatch, cases, bad=()):
    adapter = ScriptedAdapter(cases, {c["id"]: {"error": "BROKEN"} for c in bad})
    monkeypatch.setattr(plugin, "open_client", adapter.open)
    return adapter


def test_a_failure_carries_flags_rules_comment_and_a_reproducer_that_reruns_only_it(corpus, monkeypatch, tmp_path):
    (victim,) = victims(corpus[1], 1)
    scripted(monkeypatch, corpus[1], [victim])
    report = tmp_path / "r.json"
    result = invoke("run", "--vectors", str(corpus[0]), "--adapter", "shim:./my engine", "--json", str(report))
    assert result.exit_code == RunExit.FAILED
    entry = next(c for c in json.loads(report.read_text())["cases"] if c["id"] == victim["id"])
    full = next(
        c
        for g in json.loads((corpus[0] / "rng_abi.json").read_text())["testGroups"]
        for c in g["tests"]
        if c["id"] == victim["id"]
    )
    assert entry["flags"] == full["flags"] and entry["rules"] == full["rules"] and entry["comment"] == full["comment"]
    assert entry["reproducer"] == shlex.join(
        ["qconform", "run", "--adapter", "shim:./my engine", "--vectors", str(corpus[0]), "--case", victim["id"]]
    )
    lines = result.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"FAIL {victim['id']}"))
    assert f"rules: {', '.join(full['rules'])}" in lines[at + 1] and full["comment"] in lines[at + 1]
    assert lines[at + 2].strip() == f"rerun: {entry['reproducer']}"
    rerun = shlex.split(entry["reproducer"])[1:]
    adapter = scripted(monkeypatch, corpus[1], [victim])
    again = invoke(*rerun)
    assert again.exit_code == RunExit.FAILED and adapter.seen == [victim["id"]]


def test_the_start_timeout_reaches_the_client_and_the_reproducer(corpus, monkeypatch, tmp_path):
    (victim,) = victims(corpus[1], 1)
    adapter = scripted(monkeypatch, corpus[1], [victim])
    report = tmp_path / "r.json"
    args = ["--adapter", "shim:./slow engine", "--vectors", str(corpus[0]), "--timeout", "7", "--start-timeout", "900"]
    assert invoke("run", *args, "--json", str(report)).exit_code == RunExit.FAILED
    assert adapter.start_timeouts and set(adapter.start_timeouts) == {900.0}
    entry = next(c for c in json.loads(report.read_text())["cases"] if c["id"] == victim["id"])
    assert entry["reproducer"] == shlex.join(["qconform", "run", *args, "--case", victim["id"]])
    adapter = scripted(monkeypatch, corpus[1])
    assert invoke("run", "--adapter", "shim:./slow engine", "--vectors", str(corpus[0])).exit_code == 0
    assert set(adapter.start_timeouts) == {None}  # not given: the client's default (the batch timeout)


def test_case_is_exact_where_k_is_a_substring(corpus, monkeypatch):
    ids = [c["id"] for c in corpus[1]]
    target = "rng_abi/draw_keys/domains-accept"
    assert target in ids
    adapter = scripted(monkeypatch, corpus[1])
    assert invoke("run", "--vectors", str(corpus[0]), "--adapter", "reference", "-k", "domains").exit_code == 0
    assert len(adapter.seen) > 1  # -k matches substrings
    adapter = scripted(monkeypatch, corpus[1])
    assert invoke("run", "--vectors", str(corpus[0]), "--adapter", "reference", "--case", target).exit_code == 0
    assert adapter.seen == [target]


def test_exitfirst_stops_at_the_first_unexpected_result(corpus, monkeypatch):
    bad = victims(corpus[1], 2)
    scripted(monkeypatch, corpus[1], bad)
    result = invoke("run", "--vectors", str(corpus[0]), "--adapter", "reference", "-x")
    assert result.exit_code == RunExit.FAILED
    assert "unexpected results (1):" in result.output and "stopped by -x" in result.output
    assert "interrupted" not in result.output


def test_lf_reruns_the_last_failures_of_that_adapter(corpus, monkeypatch):
    args = ("run", "--vectors", str(corpus[0]), "--adapter", "reference")
    result = invoke(*args, "--lf")
    assert result.exit_code == RunExit.NO_CASES and "no unexpected result recorded" in result.output
    bad = victims(corpus[1], 2)
    scripted(monkeypatch, corpus[1], bad)
    assert invoke(*args).exit_code == RunExit.FAILED
    adapter = scripted(monkeypatch, corpus[1], bad[1:])  # the first is fixed
    assert invoke(*args, "--case", bad[0]["id"]).exit_code == RunExit.OK
    assert invoke(*args, "--lf").exit_code == RunExit.FAILED  # a --case rerun forgot only what it fixed
    assert adapter.seen == [bad[0]["id"], bad[1]["id"]]
    adapter = scripted(monkeypatch, corpus[1])  # both fixed
    assert invoke(*args, "--lf").exit_code == RunExit.OK and adapter.seen == [bad[1]["id"]]
    assert invoke(*args, "--lf").exit_code == RunExit.NO_CASES  # nothing is left to rerun


def test_list_prints_the_selected_ids_and_runs_nothing(corpus, monkeypatch):
    adapter = scripted(monkeypatch, corpus[1])
    result = invoke("run", "--vectors", str(corpus[0]), "--adapter", "reference", "--list", "-k", "philox_kat")
    assert result.exit_code == 0 and adapter.seen == []
    assert result.output.splitlines() == [c["id"] for c in corpus[1] if "/philox_kat/" in c["id"]]


def test_show_prints_a_case_for_people_and_for_tools():
    case_id = "rng_abi/draw_keys/domains-accept"
    result = invoke("show", case_id)
    assert result.exit_code == 0
    for text in (
        "comment: Fixed seed",
        "rules: R22, R23",
        "DOMAIN_SEPARATION: [FUNCTIONALITY]",
        '"domain": "ACCEPT"',
        "expected:",
    ):
        assert text in result.output
    data = json.loads(invoke("show", "--json", case_id).output)
    assert data["id"] == case_id and data["input"]["domain"] == "ACCEPT" and "DOMAIN_SEPARATION" in data["flags"]
    assert set(data) == {"id", "family", "group", "result", "comment", "flags", "rules", "input", "expected"}
    result = invoke("show", "rng_abi/draw_keys/domain-accept")
    assert result.exit_code == 2 and "did you mean rng_abi/draw_keys/domains-accept" in result.output


def test_generate_check_prints_the_first_differing_field_of_each_drifted_case(tmp_path):
    root = small_corpus(tmp_path / "v", ("rng_abi",))
    path = root / "rng_abi.json"
    obj = json.loads(path.read_text())
    case = obj["testGroups"][0]["tests"][0]
    old = case["expected"]["output"][1]
    case["expected"]["output"][1] = "0x00000004"
    path.write_text(json.dumps(obj, sort_keys=True, indent=1) + "\n")
    from qconform.cli.generate import case_change

    (drift,) = check(root, [load_family("rng_abi")], describe=case_change).drifts[:1]
    assert str(drift) == (f"drifted  {case['id']}: expected.output[1]: committed 0x00000004, regenerated {old}")


def test_stat_selects_with_k_and_exclusion_not_only_a_glob():
    """Was: ``--case 'depth3-on*'`` also matched ``depth3-one-*``, and nothing could exclude."""
    glob = "verification_round/acceptance_boundary/depth3-on*"
    both = [c.id for c in load_cases(VECTORS, ["verification_round"], [glob])]
    assert any("depth3-one-" in i for i in both)
    only = [c.id for c in load_cases(VECTORS, ["verification_round"], [glob], excludes=["*/depth3-one-*"])]
    assert only == ["verification_round/acceptance_boundary/depth3-on-boundary-rejects"]
    keyed = [c.id for c in load_cases(VECTORS, ["verification_round"], keyword="depth3-on- and not one")]
    assert keyed == only
    result = invoke("stat", "-k", "bad (")
    assert result.exit_code == 2 and "not a valid expression" in result.output


class Sampler(Adapter):
    """Samples every input it is given, valid or not (a missing refusal)."""

    name = "sampler"

    def capabilities(self) -> Capabilities:
        return Capabilities(families=(), injected_draws=False, sampling=("verification_round",))

    def precision(self) -> PrecisionProfile:
        return PrecisionProfile()

    def run_batch(self, family, inputs):
        return []

    def sample_batch(self, family, inputs, samples, seed):
        return [{"requests": [{"outcomes": [{"accepted": 0, "emitted": [0], "count": samples}]}]} for _ in inputs]


def test_stat_shows_what_the_adapter_answered_on_an_invalid_case(tmp_path):
    """Was: ``histograms`` empty and the answer lost."""
    from qconform.harness.stat.report import write_json

    (case,) = load_cases(VECTORS, ["verification_round"], ["verification_round/invalid_requests/zero-q-at-draft"])
    run = run_stat(InProcess(Sampler()), [case], StatOptions(samples=20))
    (result,) = run.results
    assert result.verdict == FAIL and result.verdict != PASS
    assert case_json(result)["answer"]["requests"][0]["outcomes"][0]["count"] == 20
    write_json(run, tmp_path / "missing" / "dir" / "stat.json")  # stat --json into a missing directory
    assert json.loads((tmp_path / "missing" / "dir" / "stat.json").read_text())["cases"][0]["answer"]
    assert ((tmp_path / "missing" / "dir" / "stat.json").stat().st_mode & 0o777) == 0o644


def test_readme_lists_the_new_run_options():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for option in (
        "--corpus-root",
        "--require",
        "--max-unsupported",
        "--case",
        "-x",
        "--lf",
        "--list",
        "qconform show",
    ):
        assert option in readme
