"""bench/gpu_check.py, the prepared CUDA check: rehearsed on the CPU (``--smoke``),
and shown to report what goes wrong instead of hiding it or losing the rest.

The script itself only runs natively on a CUDA machine (bench/README.md); here its
every part runs on the CPU, Triton in its interpreter."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not imported here: Triton reads TRITON_INTERPRET on import
    pytest.skip("the GPU check needs triton", allow_module_level=True)

pytestmark = pytest.mark.rules("R34")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None, SCRIPT
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gpu_check = load_script()


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the markdown table under ``heading``."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_smoke_rehearses_every_part_and_the_candidates_agree(tmp_path):
    out = tmp_path / "gpu.md"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--repeat", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    runs = table_rows(text, "## Conformance")
    assert [r[:2] for r in runs] == [
        ["torch", "yes"],
        ["triton", "yes"],
        ["torch-tp2 on NCCL", "skipped"],
        ["vLLM Triton kernels", "skipped"],
        ["transformers _speculative_sampling", "skipped"],
    ]
    for adapter in ("torch", "triton"):  # the reports come back whole, beside the table
        report = json.loads((tmp_path / "gpu-reports" / f"run-{adapter}-cpu.json").read_text())
        assert report["adapter"] == adapter and report["ok"] and report["cases"]
    stages = table_rows(text, "## Stages")
    assert len(stages) == 7
    for row in stages:
        assert row[3] not in ("error", "-") and row[5] not in ("error", "-"), row
        agree = row[7]
        assert agree == "yes" or (agree.startswith("rel. gap") and float(agree.split()[-1]) < 1e-12), row
    assert "## Errors and notes" not in text


def stage(name, triton, torch_impl, agree=None):
    return gpu_check.Stage(name, 1024, triton, torch_impl, agree or gpu_check.rows_differ)


def test_a_stage_that_raises_is_reported_and_the_others_are_kept():
    def broken():
        raise RuntimeError("kernel launch failed\nsecond line")

    ok = gpu_check.time_stage(stage("fine", lambda: torch.ones(2, 3), lambda: torch.ones(2, 3)), "cpu", 1)
    bad = gpu_check.time_stage(stage("broken", broken, lambda: torch.ones(2)), "cpu", 1)
    assert ok.errors == [] and ok.agree == "yes"
    assert bad.triton_us is None and bad.torch_us is not None
    assert bad.errors == ["triton: RuntimeError: kernel launch failed"] and bad.agree == "-"
    text = gpu_check.markdown("dev", "env", 4096, 1e9, [], [], [ok, bad], ["copy bandwidth: OSError: x"])
    assert table_rows(text, "## Stages")[1][3] == "error"
    assert "- broken: triton: RuntimeError: kernel launch failed" in text
    assert "- copy bandwidth: OSError: x" in text


def test_outputs_that_differ_show_in_the_agree_column():
    a = torch.tensor([[1, 2], [3, 4], [5, 6]])
    b = torch.tensor([[1, 2], [3, 5], [5, 6]])
    assert gpu_check.rows_differ(a, a.clone()) == "yes"
    assert gpu_check.rows_differ(a, b) == "1/3 rows differ"
    assert gpu_check.rows_differ(a, b[:2]).startswith("shapes")
    assert gpu_check.relative_gap(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])) == "yes"
    assert gpu_check.relative_gap(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 2**-20])) == "rel. gap 4.8e-07"
    timing = gpu_check.time_stage(stage("wrong", lambda: a, lambda: b), "cpu", 1)
    assert timing.agree == "1/3 rows differ"


def test_a_failed_conformance_run_is_not_ok():
    run = gpu_check.Conformance("triton", False, {"pass": 3, "fail": 1}, 2.0, "c/1: fail wrong count")
    text = gpu_check.markdown("dev", "env", gpu_check.VOCAB, 1e9, [run], [], [], [])
    assert table_rows(text, "## Conformance (whole corpus)")[0][:3] == ["triton", "**NO**", "fail 1, pass 3"]


def test_without_cuda_it_says_so_and_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    assert gpu_check.main([]) == 0
    assert "no CUDA device on this machine" in capsys.readouterr().out
    assert "triton" not in sys.modules  # left for the Triton tests to import under TRITON_INTERPRET


def test_without_torch_it_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert gpu_check.main([]) == 2
    assert "torch is not installed" in capsys.readouterr().err


def test_bad_arguments_are_usage_errors(capsys):
    for argv in (["--repeat", "0"], ["--out", "a.md", "--out-dir", "b"]):
        with pytest.raises(SystemExit) as exit_info:
            gpu_check.main(argv)
        assert exit_info.value.code == 2
    assert "--repeat must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "stdout, returncode, verdict",
    [
        (
            "rng_abi: 9 cases in 0.1 s (90 cases/s, 2 rank(s), 1 shard(s))\nPASS: the adapter's answers hash\n",
            0,
            "PASS",
        ),
        ("x: 9 cases in 0.1 s (90 cases/s, 1 rank(s), 1 shard(s))\nFAIL: first divergent case: 3\n", 1, "FAIL"),
        ("Error: the adapter cannot start\n", 2, "exit 2"),
    ],
)
def test_accumulated_runs_are_reported_with_their_verdict(monkeypatch, tmp_path, stdout, returncode, verdict):
    """Part 4 (``--accumulated N``): each run's verdict line and rate land in the table; a run
    that does not PASS (or is not excused as PRECISION) makes the check fail."""
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, returncode, stdout, "")

    monkeypatch.setattr(gpu_check.subprocess, "run", fake_run)
    run = gpu_check.accumulated_run("torch", "rng_abi", 9, "cuda", 4, 10.0, tmp_path)
    assert run.verdict == verdict
    assert "torch.distributed.run" in commands[0] and "--nproc-per-node=4" in commands[0]
    rows = table_rows("\n".join(gpu_check.accumulated_markdown([run])), "## Accumulated runs")
    assert rows[0][:4] == ["torch", "rng_abi", "9", verdict]


def test_an_accumulated_run_past_its_limit_is_cut(monkeypatch, tmp_path):
    def slow(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    monkeypatch.setattr(gpu_check.subprocess, "run", slow)
    run = gpu_check.accumulated_run("triton", "verification_round", 10**8, "cuda", 1, 5.0, tmp_path)
    assert run.verdict == "cut" and "over 5 s" in run.note


def test_without_cuda_the_accumulate_ratio_says_it_is_skipped(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    assert gpu_check.main(["--accumulate-ratio"]) == 0
    out = capsys.readouterr().out
    assert "accumulate ratio on CUDA: skipped, no CUDA device" in out and "bench_accumulate_torch.py" in out


def test_the_accumulate_ratio_runs_the_command_against_torch_in_process():
    """Part 5 (``--accumulate-ratio``), on the CPU: the command through its child process and the
    torch adapter in this process on the same blocks; its rates, its verdict, its table row."""
    ratios = []
    gpu_check.accumulate_ratios("cpu", ("rng_abi",), 2048, 1024, 1, ratios.append)
    (ratio,) = ratios
    assert ratio.family == "rng_abi" and ratio.verdicts == {"PASS"}
    assert len(ratio.command) == len(ratio.torch) == 1 and min(ratio.command + ratio.torch) > 0
    assert ratio.value == ratio.torch[0] / ratio.command[0]
    (row,) = table_rows("\n".join(gpu_check.ratio_markdown(ratios)), "## Accumulate ratio")
    assert row[:2] == ["rng_abi", "2,048"] and row[4] == f"**{ratio.value:.2f}x**" and row[5] == "PASS"


def test_a_failed_accumulate_ratio_run_is_an_error_row_and_the_others_run(monkeypatch):
    """A family whose command fails (bench_accumulate_torch stops with SystemExit) is an error row,
    which fails the check, and the next family is still measured."""
    bench = gpu_check.bench_module("bench_accumulate_torch")
    measured = []

    def measure(family, cases, batch, repeat, device):
        measured.append(family)
        if family == "rng_abi":
            raise SystemExit("qconform accumulate failed (exit 1): the adapter cannot start")
        return bench.Ratio(family, device, [10.0], [12.0], verdicts={"PASS"}, load=("1.0", "1.0"), cases=cases)

    monkeypatch.setattr(bench, "measure", measure)
    ratios = []
    gpu_check.accumulate_ratios("cuda", ("rng_abi", "allocation_dense"), 9, 9, 1, ratios.append)
    assert measured == ["rng_abi", "allocation_dense"]
    rows = table_rows("\n".join(gpu_check.ratio_markdown(ratios)), "## Accumulate ratio")
    assert rows[0][:3] == ["rng_abi", "-", "error"] and "cannot start" in rows[0][5]
    assert rows[1][:2] == ["allocation_dense", "9"] and rows[1][4] == "**1.20x**"


def test_the_accumulate_ratio_runs_each_family_at_its_own_size_unless_told(monkeypatch):
    """Without ``--ratio-cases`` a family runs at bench_accumulate_torch's size for it on the device (a
    light family's four blocks would time the pipeline's fill and drain; on CUDA verification_round runs
    longer, past the child's first use of the device); with it, every family runs that many."""
    bench = gpu_check.bench_module("bench_accumulate_torch")
    sizes = {}
    monkeypatch.setattr(bench, "measure", lambda family, cases, *rest: sizes.setdefault(family, cases))
    gpu_check.accumulate_ratios("cuda", ("rng_abi", "verification_round"), None, 9, 1, lambda r: None)
    assert sizes == {"rng_abi": bench.LIGHT_RUN_CASES, "verification_round": bench.CUDA_RUN_CASES["verification_round"]}
    assert bench.CUDA_RUN_CASES["verification_round"] > bench.RUN_CASES["verification_round"]
    sizes.clear()
    gpu_check.accumulate_ratios("cpu", ("rng_abi", "verification_round"), None, 9, 1, lambda r: None)
    assert sizes == {"rng_abi": bench.LIGHT_RUN_CASES, "verification_round": bench.RUN_CASES["verification_round"]}
    sizes.clear()
    gpu_check.accumulate_ratios("cuda", ("rng_abi", "verification_round"), 4096, 9, 1, lambda r: None)
    assert sizes == {"rng_abi": 4096, "verification_round": 4096}


def test_the_accumulate_ratio_runs_both_rows_at_one_thread_and_restores_the_settings(monkeypatch):
    """As bench_accumulate_torch's CPU figures: OMP_NUM_THREADS=1 for the command (inherited) and one
    torch thread in process, during part 5 only (the H200's first run had torch's default, 16)."""
    bench = gpu_check.bench_module("bench_accumulate_torch")
    seen = []
    monkeypatch.setattr(
        bench, "measure", lambda *args: seen.append((os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()))
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        gpu_check.accumulate_ratios("cuda", ("rng_abi", "verification_round"), 9, 9, 1, lambda r: None)
        assert seen == [("1", 1), ("1", 1)]
        assert os.environ["OMP_NUM_THREADS"] == "3" and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_conformance_message_that_quotes_stderr_stays_on_one_table_line(tmp_path):
    """An error may quote the adapter's stderr over several lines (docs/shim-protocol.md, "Errors"): the
    table's cell takes its first 120 characters on one line; the kept report has it whole."""

    class Done:
        returncode = 1

        def communicate(self, timeout=None):
            return "", None

    message = "adapter reported: RuntimeError: PassManager::run failed; stderr: select.py:140:26: error:\n  operand"
    report = tmp_path / "triton.json"
    case = {"id": "allocation_sparse/x", "class": "error", "message": message, "unexpected": True}
    report.write_text(json.dumps({"ok": False, "counts": {"error": 1}, "cases": [case]}))
    run = gpu_check.finish_conformance("triton", Done(), time.perf_counter(), report)
    assert "\n" not in run.note and run.note.startswith("allocation_sparse/x: error adapter reported: RuntimeError")
    assert run.note.endswith(" ".join(message.split())[:120]) and not run.ok
    (row,) = table_rows(gpu_check.markdown("dev", "env", gpu_check.VOCAB, 1e9, [run], [], [], []), "## Conformance")
    assert row[0] == "triton" and "PassManager::run failed; stderr: select.py" in row[4]
