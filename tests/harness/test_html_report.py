"""The self-contained HTML reports of `qconform run --html` and `qconform stat --html`
(harness/run/html_report.py), checked as data and in a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from qconform.harness.run import html_report

REPO = Path(__file__).resolve().parents[2]
#: test artifacts (screenshots) are kept here, outside git (.gitignore: /tmp/)
ARTIFACTS = REPO / "tmp" / "reports"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
MUTANT = "torch-mutant:cumulative-ge"


def report_with_failures() -> dict:
    """A run report as json_report.build makes it, with every optional field of a failure entry."""
    return {
        "format": "qconform-run-v1",
        "adapter": "shim:./my<engine>",
        "device": "cpu",
        "corpusRoot": "ab" * 32,
        "vectors": "/corpus",
        "qconformVersion": "0.1.0",
        "expectations": "",
        "adapterConfig": {"name": "my-engine", "precision": {"ratio_margin": "0/1"}},
        "ok": False,
        "counts": {"pass": 3, "fail": 1, "precision": 1, "error": 1},
        "families": {"a": {"pass": 3, "fail": 1}, "b": {"precision": 1, "error": 1}},
        "notRun": {"family filter": 7},
        "problems": ["1 case(s) of the index were never collected: b/x/y"],
        "cases": [
            {"id": "a/g/ok", "family": "a", "class": "pass", "message": "", "duration": 0.0, "unexpected": False},
            {
                "id": "a/g/bad",
                "family": "a",
                "class": "fail",
                "message": "token differs",
                "duration": 0.0,
                "unexpected": True,
                "diff": {"path": "tokens[3]", "expected": "7", "got": "<script>alert(1)</script>"},
                "flags": ["CumulativeBoundary"],
                "rules": ["R08"],
                "comment": "draw C_v must pick the next token",
                "reproducer": "qconform run --adapter torch-mutant:cumulative-ge -k 'a/g/bad'",
            },
            {
                "id": "b/g/near",
                "family": "b",
                "class": "precision",
                "message": "inside the margin",
                "duration": 0.0,
                "unexpected": False,
                "diff": {"path": "draws[0].decision", "expected": "accept", "got": "reject"},
            },
            {
                "id": "b/g/crash",
                "family": "b",
                "class": "error",
                "message": "exited with status 3",
                "duration": 0.0,
                "unexpected": True,
            },
        ],
    }


def external_references(page: str) -> list[str]:
    """Every attribute or CSS reference that would make the browser fetch something."""
    found = re.findall(r"""(?:src|href|action|poster|srcset)\s*=\s*["']?([^"'\s>]+)""", page, re.IGNORECASE)
    found += re.findall(r"url\(\s*([^)]*)\)", page, re.IGNORECASE)
    found += re.findall(r"<(script|link|iframe|object|embed|img)\b", page, re.IGNORECASE)
    found += re.findall(r"@import", page, re.IGNORECASE)
    return found


@pytest.mark.rules()
def test_the_run_page_lists_failures_with_diffs_reproducers_and_config():
    page = html_report.render_run(report_with_failures())
    assert external_references(page) == []
    for fetching in ('<img src="https://x/a.png">', "<style>b{background:url(x.png)}</style>", '<a href="x">'):
        assert external_references(fetching), fetching  # the check itself sees a fetch
    assert "FAILED: 3 pass, 1 fail, 1 precision, 1 error; 3 unexpected" in page
    for text in (
        "a/g/bad",
        "tokens[3]",
        "CumulativeBoundary",
        "R08",
        "draw C_v must pick the next token",
        "qconform run --adapter torch-mutant:cumulative-ge -k &#x27;a/g/bad&#x27;",
        "b/g/crash",
        "never collected",
        "family filter",
        "&quot;ratio_margin&quot;",
        "ab" * 32,
    ):
        assert text in page, text
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "shim:./my&lt;engine&gt;" in page
    # a bar per family, one segment per class present, widths in proportion
    assert re.search(r'data-family="a">.*?class="pass" style="width:75\.000%', page)
    assert re.search(r'data-family="b">.*?class="precision" style="width:50\.000%', page)
    # the passing case is not listed, the precision case is, after the unexpected ones
    assert 'data-case="a/g/ok"' not in page
    assert page.index('data-case="a/g/bad"') < page.index('id="precision"') < page.index('data-case="b/g/near"')


@pytest.mark.rules()
def test_fields_a_report_lacks_are_simply_not_shown():
    report = report_with_failures()
    for case in report["cases"]:
        for key in ("flags", "rules", "comment", "reproducer"):
            case.pop(key, None)
    page = html_report.render_run(report)
    assert 'class="reproducer"' not in page and 'class="tag' not in page and "a/g/bad" in page


@pytest.mark.rules()
def test_long_values_are_cut_and_long_lists_capped(monkeypatch):
    report = report_with_failures()
    report["cases"][1]["diff"]["expected"] = "9" * 10_000
    monkeypatch.setattr(html_report, "LIST_LIMIT", 1)
    report["cases"].append({**report["cases"][1], "id": "a/g/bad2"})
    page = html_report.render_run(report)
    assert "9" * html_report.VALUE_LIMIT in page and "9" * (html_report.VALUE_LIMIT + 1) not in page
    assert "(10000 characters; the whole value is in the JSON report)" in page
    assert "... and 2 more (see the JSON report)" in page and "a/g/bad2" not in page


@pytest.mark.rules()
def test_the_stat_page_embeds_an_svg_plot_per_failing_case(tmp_path):
    from qconform.generators.corpus import default_vectors_dir
    from qconform.harness.adapter import Adapter, Capabilities, PrecisionProfile
    from qconform.harness.stat.runner import FAIL, InProcess, StatOptions, load_cases, run_stat

    case = load_cases(default_vectors_dir(), patterns=["distribution/depth1/q-equals-p-v2"])[0]

    class Skewed(Adapter):  # a possible outcome every round: a wrong law
        name = "skewed"

        def capabilities(self):
            return Capabilities(families=(), injected_draws=False, sampling=("distribution",))

        def precision(self):
            return PrecisionProfile()

        def run_batch(self, family, inputs):
            return []

        def sample_batch(self, family, inputs, samples, seed):
            return [{"outcomes": [{"emitted": [1, 1], "count": samples}]}]

    run = run_stat(InProcess(Skewed()), [case], StatOptions(samples=400))
    assert run.results[0].verdict == FAIL
    html_report.write_stat(tmp_path / "stat.html", run)
    page = (tmp_path / "stat.html").read_text()
    assert external_references(page) == []
    assert page.count("<svg") == 1 and "distribution/depth1/q-equals-p-v2: X2 =" in page
    # one dot per bin of the histogram
    bins = len(run.results[0].histograms[0].bins)
    assert page.count("<circle") == bins


@pytest.mark.rules()
def test_the_stat_command_writes_its_page(tmp_path):
    """Through the shim protocol: a mutant's failing case gets its plot in the page."""
    pytest.importorskip("torch")
    from qconform.cli.group import cli

    page = tmp_path / "deep" / "stat.html"
    result = CliRunner().invoke(
        cli,
        [
            "stat",
            "--adapter",
            "torch-native-mutant:correction-reuses-accept-draw",
            "--case",
            "verification_round/residual/outside-support-only",
            "--samples",
            "2000",
            "--alpha",
            "1e-3",
            "--html",
            str(page),
        ],
    )
    assert result.exit_code == 1, result.output
    text = page.read_text()
    assert external_references(text) == [] and "FAILED: 1 fail" in text
    assert 'data-case="verification_round/residual/outside-support-only"' in text and "<svg" in text


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def headless(browser: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="qconform-chromium-") as profile:
        return subprocess.run(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.mark.rules()
def test_a_mutant_run_page_in_headless_chromium():
    """The page of a real run with failures, loaded in Chromium: the failures are in the rendered
    DOM, and the screenshot is kept under tmp/reports/ for a person to look at."""
    pytest.importorskip("torch")
    browser = chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium); .ci/run installs it")
    from qconform.cli.group import cli

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page, report = ARTIFACTS / "mutant-run.html", ARTIFACTS / "mutant-run.json"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--adapter",
            MUTANT,
            "--family",
            "categorical_sampling",
            "--family",
            "rng_abi",
            "--html",
            str(page),
            "--json",
            str(report),
        ],
    )
    assert result.exit_code == 1, result.output
    failures = [c["id"] for c in json.loads(report.read_text())["cases"] if c["class"] == "fail"]
    assert failures
    dom = headless(browser, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    listed = re.findall(r'data-case="([^"]+)"', dom.stdout)
    assert sorted(listed) == sorted(failures)
    assert 'id="verdict"' in dom.stdout and "FAILED" in dom.stdout
    assert 'data-family="categorical_sampling"' in dom.stdout and 'data-family="rng_abi"' in dom.stdout
    shot = ARTIFACTS / "mutant-run.png"
    shot.unlink(missing_ok=True)
    taken = headless(browser, f"--screenshot={shot}", "--window-size=1280,1600", "--hide-scrollbars", page.as_uri())
    assert taken.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, taken.stderr[-2000:]
