"""Long work shows progress on a terminal, is quiet on a pipe, refuses the absurd up front, and
leaves a report when interrupted (issue #22). Before: ``stat --samples 10^15`` printed nothing
for a minute, and a SIGTERM of ``stat`` ended with status 143, no output and no report.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time

import pytest
from click.testing import CliRunner

from qconform.cli.group import cli
from robustness.interruptions import PARTIAL, STARTING, starting_line
from robustness.processes import qconform, survivors, tree_shim, wait_for_helpers, wait_until_asked


def test_an_absurd_sample_count_is_refused_before_anything_starts():
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["stat", "--adapter", "shim:/nonexistent/shim", "--samples", str(10**15)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "more than a day" in lines[0] and "lower --samples" in lines[0], lines
    assert time.monotonic() - started < 60  # the cases are loaded; no adapter is started


@pytest.mark.parametrize(
    ("argv", "advice"),
    [
        (["accumulate", "--family", "rng_abi", "--count", str(10**12)], "lower --count"),
        (["fuzz", "--examples", str(10**9)], "lower --examples"),
    ],
    ids=["accumulate", "fuzz"],
)
def test_more_than_a_day_of_work_is_refused_before_an_adapter_starts(argv, advice):
    """Before: ``accumulate --count 2^40`` and ``fuzz --examples 10^14`` started silently on a pipe
    and ran for days. The adapter here does not exist, so a refusal that came after starting it
    would name the adapter instead."""
    result = CliRunner().invoke(cli, [argv[0], "--adapter", "shim:/nonexistent/shim", *argv[1:]])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "more than a day" in lines[0] and advice in lines[0], lines


@pytest.mark.parametrize(
    ("command", "rate", "option"),
    [("accumulate", "FASTEST_CASES", "--count"), ("fuzz", "FASTEST_EXAMPLES", "--examples")],
)
def test_a_day_of_work_is_still_accepted(command, rate, option):
    """The bound is a day, not less: exactly a day at the fastest rate passes the check and
    fails later, on the adapter that does not exist (exit 2 with the adapter's own line)."""
    import importlib

    most = getattr(importlib.import_module(f"qconform.cli.{command}"), rate) * 86_400
    argv = [command, "--adapter", "shim:/nonexistent/shim", option, str(most)]
    if command == "accumulate":
        argv += ["--family", "rng_abi"]
    result = CliRunner().invoke(cli, argv)
    assert "more than a day" not in result.output, result.output


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_stat_reports_what_it_sampled(tmp_path, signum):
    pids, report = tmp_path / "pids", tmp_path / "stat.json"
    proc = qconform("stat", "--adapter", tree_shim(pids, "hang"), "--json", str(report), cwd=tmp_path)
    wait_until_asked(pids, proc)  # the adapter answered get_config; the first sample request hangs
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err[-3000:]
    name = signal.Signals(signum).name
    assert f"problem: run interrupted by {name}" in out and "FAILED:" in out, out[-3000:]
    data = json.loads(report.read_text())
    assert data["interrupted"] == name and data["ok"] is False
    assert data["counts"].get("interrupted"), data["counts"]
    assert survivors(pids) == []


def read_all(fd: int, proc: subprocess.Popen) -> bytes:
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal's other end closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif proc.poll() is not None:
            break
    return b"".join(chunks)


def test_stat_shows_progress_on_a_terminal_and_nothing_on_a_pipe(tmp_path):
    pids = tmp_path / "pids"
    args = ("stat", "--adapter", tree_shim(pids, "hang"))
    piped = qconform(*args, cwd=tmp_path)
    wait_until_asked(pids, piped)
    piped.send_signal(signal.SIGTERM)
    _, err = piped.communicate(timeout=120)
    assert "sampling" not in err and "left" not in err, err[-2000:]

    main, secondary = pty.openpty()
    pids, args = tmp_path / "pids2", ("stat", "--adapter", tree_shim(tmp_path / "pids2", "hang"))
    # stdout is not read while the terminal is: the partial report must not fill a pipe and block the exit
    terminal = qconform(*args, cwd=tmp_path, stderr=secondary, stdout=subprocess.DEVNULL)
    os.close(secondary)
    wait_until_asked(pids, terminal)
    time.sleep(0.5)  # a refresh of the bar
    terminal.send_signal(signal.SIGTERM)
    shown = read_all(main, terminal).decode("utf-8", "replace")
    terminal.communicate(timeout=120)
    os.close(main)
    assert "sampling" in shown and "rounds" in shown, shown[-2000:]
    assert survivors(pids) == []


def signalled(proc: subprocess.Popen, signum: int) -> tuple[str, str]:
    """Send ``signum`` to the command; its output, once it has ended with 128 + the signal's number,
    with neither a traceback nor click's ``Aborted!``."""
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, out[-2000:] + err[-2000:]
    assert "Traceback" not in err and "Aborted" not in err, err[-2000:]
    return out, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", list(PARTIAL))
def test_an_interrupted_fuzz_or_accumulate_says_how_far_it_got(tmp_path, command, signum):
    pids = tmp_path / "pids"
    args, expected = PARTIAL[command]
    proc = qconform(*args, "--adapter", tree_shim(pids, "hang"), cwd=tmp_path)
    wait_until_asked(pids, proc)
    out, _err = signalled(proc, signum)
    assert expected.format(name=signal.Signals(signum).name) in out, out[-2000:]
    assert survivors(pids) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_an_accumulate_interrupted_while_its_adapter_starts_says_so(tmp_path, ranks, signum):
    """Before the first case (each rank's adapter never answers ``get_config``): the same report and
    status as an interrupted run, 0 cases answered, never click's ``Aborted!`` and exit 1 (a FAIL's
    status), and nothing left running (docs/harness.md, "Exit codes")."""
    pids = tmp_path / "pids"
    args, expected = PARTIAL["accumulate"]
    proc = qconform(*args, "--adapter", tree_shim(pids, "mute"), "--ranks", str(ranks), cwd=tmp_path)
    wait_for_helpers(pids, 2 * ranks, proc)  # every rank's adapter is up and silent
    out, _err = signalled(proc, signum)
    assert expected.format(name=signal.Signals(signum).name) in out, out[-2000:]
    assert survivors(pids) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", list(STARTING))
def test_a_command_interrupted_while_its_adapter_starts_says_so(tmp_path, command, signum):
    """One ``Error:`` line and 128 + the signal (docs/harness.md, "Exit codes"), never click's
    ``Aborted!`` and 1, and nothing left running."""
    pids = tmp_path / "pids"
    args, nothing = STARTING[command]
    proc = qconform(*args, "--adapter", tree_shim(pids, "mute"), cwd=tmp_path)
    wait_for_helpers(pids, 2, proc)
    _out, err = signalled(proc, signum)
    name = signal.Signals(signum).name
    assert err.strip().splitlines() == [starting_line(nothing).format(name=name)], err
    assert survivors(pids) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_batch_invariance_interrupted_while_it_checks_says_so(tmp_path, signum):
    pids = tmp_path / "pids"
    proc = qconform("batch-invariance", "--adapter", tree_shim(pids, "hang"), cwd=tmp_path)
    wait_until_asked(pids, proc)  # the first re-batched request hangs
    _out, err = signalled(proc, signum)
    line = err.strip().splitlines()
    assert len(line) == 1 and line[0].startswith(f"Error: interrupted by {signal.Signals(signum).name} before the "), (
        err
    )
    assert line[0].endswith("requests were all checked; nothing compared"), err
    assert survivors(pids) == []
