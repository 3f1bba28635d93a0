"""The engine matrix (adapters/engine_matrix.py): rows from the reports' names and devices,
a GPU row "not run" until filled, counts that vary shown as a verdict, and a page that
cannot go stale (--check fails on any difference, --write mends it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qconform.adapters import engine_matrix
from qconform.adapters.engine_matrix import BEGIN, END, ReportError, parse_name


def run_report(name, counts, ok=True, device="cpu", expectations=""):
    return {
        "format": engine_matrix.RUN_FORMAT,
        "adapter": "x",
        "device": device,
        "adapterConfig": {"name": name},
        "counts": counts,
        "ok": ok,
        "expectations": expectations,
    }


def stat_report(name, counts, ok=True, samples=2000):
    return {
        "format": engine_matrix.STAT_FORMAT,
        "adapter": name,
        "device": "cpu",
        "counts": counts,
        "ok": ok,
        "options": {"samples": samples},
    }


@pytest.fixture
def reports(tmp_path):
    folder = tmp_path / "reports"
    (folder / "transformers-5.23.0").mkdir(parents=True)
    (folder / "vllm-0.32.0").mkdir()
    files = {
        "transformers-5.23.0/run.json": run_report(
            "transformers-5.23.0-torch",
            {"pass": 46, "precision": 6, "xfail": 17, "fail": 0},
            expectations="/elsewhere/expectations/transformers.toml",
        ),
        "transformers-5.23.0/stat.json": stat_report("transformers-5.23.0-torch", {"pass": 15}),
        "transformers-5.23.0/strict.json": run_report(
            "transformers-5.23.0-torch+patch-strict-accept", {"pass": 46, "precision": 5}, expectations="/dev/null"
        ),
        "vllm-0.32.0/run.json": run_report("vllm-0.32.0-cpu", {"pass": 9, "fail": 40, "xfail": 8}, ok=False),
    }
    for name, report in files.items():
        (folder / name).write_text(json.dumps(report))
    return folder


def test_rows_come_from_the_names_and_devices(reports):
    rows = engine_matrix.collect([reports])
    keys = [(r.key.engine, r.key.kernels, r.key.variant, r.key.device) for r in rows]
    assert keys == [
        ("transformers", "torch", "", "cpu"),
        ("transformers", "torch", "", "cuda"),
        ("transformers", "torch", "strict-accept", "cpu"),
        ("vllm", "cpu", "", "cpu"),
    ]
    text = engine_matrix.render(rows, engine_matrix.Path(engine_matrix.__file__).resolve().parents[1])
    cells = [[cell.strip() for cell in line.split("|")] for line in text.splitlines() if line.startswith("| ")]
    lines = {f"{c[1]}/{c[4]}/{c[5]}": "|".join(c) for c in cells}
    assert "ok: 46 pass, 6 precision, 17 xfail (of 69)" in lines["transformers/as released/cpu"]
    assert "ok: 15 pass of 15 laws, N = 2000" in lines["transformers/as released/cpu"]
    entries = len(
        re.findall(
            r'^"[^"]+" = ',
            (Path(engine_matrix.__file__).resolve().parents[1] / "expectations/transformers.toml").read_text(),
            re.M,
        )
    )
    assert f"[{entries}](../../expectations/transformers.toml)" in lines["transformers/as released/cpu"]
    assert lines["transformers/as released/cuda"].count("not run") == 2
    assert "|none|" in lines["transformers/patched: strict-accept/cpu"]
    vllm_row = lines["vllm/as released/cpu"]
    assert "**FAILED**: counts vary from run to run (57 cases)" in vllm_row and "40 fail" not in vllm_row
    assert "vLLM #55005" in vllm_row


def test_check_fails_on_a_stale_page_and_write_mends_it(reports, tmp_path, capsys):
    page = tmp_path / "README.md"
    page.write_text(f"# Engines\n\n{BEGIN}\n| stale |\n{END}\n\nafter\n")
    assert engine_matrix.main([str(reports), "--check", str(page)]) == 1
    assert "| stale |" in capsys.readouterr().out
    assert engine_matrix.main([str(reports), "--write", str(page)]) == 0
    assert engine_matrix.main([str(reports), "--check", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Engines\n\n" + BEGIN) and text.endswith(END + "\n\nafter\n") and "| stale |" not in text


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not a readable JSON report"),
        ('{"format": "other"}', "not a qconform run or stat report"),
        (json.dumps(run_report("torch", {})), "is not <engine>-<version>-<kernels>"),
    ],
)
def test_a_report_that_is_not_an_engines_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    (tmp_path / "bad.json").write_text(content)
    assert engine_matrix.main([str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_names_parse_with_local_versions():
    assert parse_name("vllm-0.32.0+cpu-triton+patch-expand") == ("vllm", "0.32.0+cpu", "triton", "expand")
    assert parse_name("transformers-5.23.0-torch") == ("transformers", "5.23.0", "torch", "")
    with pytest.raises(ReportError):
        parse_name("vllm-cpu")


def test_the_committed_matrix_has_its_section():
    page = (
        engine_matrix.Path(engine_matrix.__file__).resolve().parents[1] / "docs" / "engines" / "README.md"
    ).read_text()
    assert page.count(BEGIN) == 1 and page.count(END) == 1
