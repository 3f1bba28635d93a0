"""``qconform accumulate`` starts the adapter before its own work (docs/accumulated.md, "Start-up"):
the adapter's child (one rank) or the adapter zygote (``--ranks N``) is started before the command
reads ``vectors/accumulated.json``, so its import runs beside the command's, and a command that
stops there closes what it started.

Each test holds the order by making the file's loading wait for the adapter: an adapter started
only after the file is read never appears while the loading waits, and the test fails."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from robustness.processes import alive, recorded, recording_shim, sent_to_self, survivors, wait_until

import qconform.harness.run.accumulate as run_accumulate
from qconform.cli.group import cli
from qconform.harness.transport.zygote import TRACE_ENV

pytestmark = pytest.mark.rules("R11")

SMALL = ["--family", "verification_round", "--count", "300", "--shard-cases", "100", "--batch", "50"]
#: how long the file's loading waits for the adapter before it gives up (the test then fails)
WAIT_S = 60.0


def zygote_pids(trace: Path) -> list[int]:
    """The pids of the zygotes that traced ``ready`` in ``trace``."""
    text = trace.read_text() if trace.exists() else ""
    return [int(pid) for pid in re.findall(r"zygote (\d+): ready", text)]


def test_one_rank_starts_its_adapter_before_it_reads_the_accumulated_file(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    load_expected = run_accumulate.load_expected
    seen: list[bool] = []

    def waiting(folder):
        seen.append(wait_until(lambda: bool(recorded(pids))))
        return load_expected(folder)

    monkeypatch.setattr(run_accumulate, "load_expected", waiting)
    shim = recording_shim(pids)
    result = CliRunner().invoke(cli, ["accumulate", "--adapter", shim, *SMALL])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    assert seen == [True], "the adapter started only after the accumulated file was read"
    assert len(recorded(pids)) == 1  # one adapter: the one started early is the one the run used
    assert survivors(pids) == []


def test_a_signal_landing_in_its_start_up_is_raised_only_at_the_next_checkpoint(tmp_path, monkeypatch):
    """A SIGTERM that lands in the command's own start-up code (here, as it reads the accumulated
    file) is not raised there, where an import between two handlers once let it escape as click's
    ``Aborted!`` and 1: the command stops at its next checkpoint with the report of an interrupted
    run and 143, and closes the adapter it started (docs/harness.md, "Stopping cleanly")."""
    pids = tmp_path / "pids"
    load_expected = run_accumulate.load_expected
    survived: list[bool] = []

    def signalled(folder):
        sent_to_self()
        survived.append(True)
        return load_expected(folder)

    monkeypatch.setattr(run_accumulate, "load_expected", signalled)
    result = CliRunner().invoke(cli, ["accumulate", "--adapter", recording_shim(pids), *SMALL])
    assert result.exit_code == 128 + signal.SIGTERM, result.output
    assert "INTERRUPTED by SIGTERM: verification_round: 0 of 300 cases answered" in result.output
    assert survived == [True], "the signal was raised inside the start-up's own code"
    assert survivors(pids) == []


def test_forked_ranks_start_their_zygote_before_they_read_the_accumulated_file(tmp_path):
    """In a process of its own (the ranks fork it): the file's loading waits for the zygote's
    ``ready`` line, then the run passes as usual."""
    trace = tmp_path / "zygote.trace"
    code = f"""
import sys, time
import qconform.harness.run.accumulate as run_accumulate
load_expected = run_accumulate.load_expected
def ready():
    try:
        return "ready" in open({str(trace)!r}).read()
    except FileNotFoundError:
        return False
def waiting(folder):
    deadline = time.monotonic() + {WAIT_S}
    while not ready():
        if time.monotonic() > deadline:
            print("NO ZYGOTE YET", flush=True)
            break
        time.sleep(0.02)
    return load_expected(folder)
run_accumulate.load_expected = waiting
sys.argv = ["qconform", "accumulate", "--adapter", "reference", *{SMALL!r}, "--ranks", "2"]
from qconform.cli import main
main()
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, TRACE_ENV: str(trace)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "NO ZYGOTE YET" not in done.stdout, "the zygote started only after the accumulated file was read"
    assert "PASS" in done.stdout and "2 rank(s)" in done.stdout
    decisions = [line.split(": ", 1)[1].split()[0].rstrip(":") for line in trace.read_text().splitlines()]
    assert decisions == ["ready", "forked", "forked"]


def corrupt_accumulated(tmp_path: Path) -> Path:
    folder = tmp_path / "vectors"
    folder.mkdir()
    (folder / "accumulated.json").write_text('{"families": {')  # truncated
    return folder


def test_one_rank_that_stops_at_the_accumulated_file_closes_its_adapter(tmp_path, monkeypatch):
    """The adapter started early is closed when the command stops before its run: in this process,
    where nothing else would end it (its keeper ends it only with the process)."""
    pids = tmp_path / "pids"
    load_expected = run_accumulate.load_expected

    def waiting(folder):
        wait_until(lambda: bool(recorded(pids)))  # the adapter is up when the file turns out malformed
        return load_expected(folder)

    monkeypatch.setattr(run_accumulate, "load_expected", waiting)
    shim = recording_shim(pids)
    vectors = corrupt_accumulated(tmp_path)
    result = CliRunner().invoke(cli, ["accumulate", "--adapter", shim, *SMALL, "--vectors", str(vectors)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[0].startswith("Error: "), result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert len(recorded(pids)) == 1
    assert survivors(pids, wait_s=30.0) == []


def test_forked_ranks_that_stop_at_the_accumulated_file_close_their_zygote(tmp_path, monkeypatch):
    """The zygote started before the ranks is closed when the command stops before it forks them
    (in this process: no rank is forked before the file is read)."""
    trace = tmp_path / "zygote.trace"
    monkeypatch.setenv(TRACE_ENV, str(trace))
    load_expected = run_accumulate.load_expected

    def waiting(folder):
        wait_until(lambda: bool(zygote_pids(trace)))
        return load_expected(folder)

    monkeypatch.setattr(run_accumulate, "load_expected", waiting)
    vectors = corrupt_accumulated(tmp_path)
    result = CliRunner().invoke(
        cli, ["accumulate", "--adapter", "reference", *SMALL, "--ranks", "2", "--vectors", str(vectors)]
    )
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    zygotes = zygote_pids(trace)
    assert len(zygotes) == 1
    assert wait_until(lambda: not alive(zygotes[0]), wait_s=30.0), "the zygote outlived the command"
