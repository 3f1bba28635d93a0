"""``qconform endpoint worker|verifier`` as processes: they log, negotiate, drive rounds and stop on a signal.

Each endpoint runs as its own process on an ephemeral loopback port (read off
its ``listening on`` log line); SIGINT and SIGTERM end it cleanly with status 0.
Two processes driving rounds against each other take two torch start-ups, so
that test is ``slow`` (opt in with ``-m slow``).
"""

from __future__ import annotations

import importlib.util
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from qconform.cli.endpoint import endpoint_group, parse_address

pytestmark = pytest.mark.rules("R12", "R13", "R22", "R25")

QCONFORM = str(Path(sys.executable).with_name("qconform"))
START_S = 60.0
LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


class Process:
    """A child process whose stderr lines are collected on a thread (so every wait can be bounded)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [QCONFORM, "endpoint", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None  # opened as a pipe above
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern: re.Pattern, timeout: float = START_S) -> re.Match:
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                raise AssertionError(f"exited before {pattern.pattern!r}: {''.join(self.seen)[-2000:]}")
            self.seen.append(line)
            match = pattern.search(line)
            if match:
                return match

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=START_S)
        while (line := self.lines.get(timeout=START_S)) is not None:
            self.seen.append(line)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=START_S)


@pytest.fixture
def processes():
    started: list[Process] = []

    def start(*args: str) -> Process:
        started.append(Process(*args))
        return started[-1]

    yield start
    for process in started:
        process.kill()


def test_verifier_answers_and_stops_on_sigint(processes):
    from qconform.harness.transport.tcp_adapter import TcpAdapter

    verifier = processes("verifier", "--port", "0", "--vocab", "64")
    port = int(verifier.wait_for(LISTENING).group(1))
    assert TcpAdapter(f"tcp://127.0.0.1:{port}").about["role"] == "verifier"
    assert verifier.stop(signal.SIGINT) == 0
    log = "".join(verifier.seen)
    assert "received SIGINT" in log and "verifier stopped" in log


def test_worker_stops_on_sigterm(processes):
    pytest.importorskip("torch")
    worker = processes("worker", "--port", "0", "--vocab", "16", "--max-support", "4")
    worker.wait_for(LISTENING)
    assert worker.stop(signal.SIGTERM) == 0
    log = "".join(worker.seen)
    assert "received SIGTERM" in log and "worker stopped" in log


@pytest.mark.slow
def test_worker_and_verifier_drive_rounds_then_stop(processes):
    pytest.importorskip("torch")
    worker = processes("worker", "--port", "0", "--vocab", "32", "--max-support", "8")
    port = int(worker.wait_for(LISTENING).group(1))
    verifier = processes(
        "verifier",
        "--port",
        "0",
        "--vocab",
        "32",
        "--max-support",
        "8",
        "--worker",
        f"127.0.0.1:{port}",
        "--rounds",
        "2",
        "--support-policy",
        "8",
        "--exit-after-rounds",
    )
    verifier.wait_for(re.compile(r"round 2 committed"))
    assert verifier.proc.wait(timeout=START_S) == 0
    assert worker.stop(signal.SIGTERM) == 0
    worker_log = "".join(worker.seen)
    assert "sent HELLO" in worker_log and "top-8: sent 5 REPLY + COMPLETION" in worker_log
    assert "received SIGTERM" in worker_log and "worker stopped" in worker_log


def test_the_roles_that_sample_say_they_need_torch(monkeypatch):
    """A missing optional dependency is exit 3 on every command (docs/harness.md, "Exit codes")."""
    monkeypatch.setitem(sys.modules, "torch", None)
    result = CliRunner().invoke(endpoint_group, ["worker", "--port", "0"])
    assert result.exit_code == 3
    assert result.output.strip().splitlines() == [
        "Error: the worker samples with the torch candidate, and torch is not installed: pip install 'qconform[torch]'"
    ]
    result = CliRunner().invoke(endpoint_group, ["verifier", "--port", "0", "--worker", "127.0.0.1:1"])
    assert result.exit_code == 3 and "the driving target (--worker) samples with the torch candidate" in result.output


@pytest.mark.parametrize(
    ("command", "flags", "expected"),
    [
        ("worker", ["--return-large-buffers"], ["pinned", "served"]),
        ("worker", [], ["served"]),
        ("verifier", ["--return-large-buffers"], ["pinned", "served"]),
        ("verifier", [], ["served"]),
    ],
)
def test_large_buffers_returned_only_when_asked(monkeypatch, command, flags, expected):
    """Each endpoint command pins glibc's mmap threshold before it serves when, and only when, it is given
    --return-large-buffers, as the soak's processes always do: the pin costs fresh pages for every large
    buffer, twice a standalone verifier's CPU a dense round (docs/endpoint.md, "Large buffers returned")."""
    if command == "worker":
        pytest.importorskip("torch")
    from qconform.adapters.endpoint import memory
    from qconform.cli import endpoint as cli

    calls: list[str] = []

    async def served(endpoint, host, port, driver=None, exit_after_rounds=False):
        calls.append("served")
        return 0

    monkeypatch.setattr(memory, "return_large_buffers", lambda: calls.append("pinned") or True)
    monkeypatch.setattr(cli, "serve_until_signalled", served)
    result = CliRunner().invoke(endpoint_group, [command, "--port", "0", "--vocab", "32", *flags])
    assert result.exit_code == 0, result.output
    assert calls == expected


def test_usage_errors(monkeypatch):
    runner = CliRunner()
    result = runner.invoke(endpoint_group, ["verifier", "--port", "0", "--mutant", "nope"])
    assert result.exit_code == 2 and "unknown mutant" in result.output
    from qconform.cli import endpoint as cli

    async def served(*args, **kwargs):  # a command that wrongly serves fails here instead of hanging
        return 0

    monkeypatch.setattr(cli, "serve_until_signalled", served)
    for command in ("worker", "verifier"):  # one Deployment check for both (a verifier served such a HELLO)
        result = runner.invoke(endpoint_group, [command, "--port", "0", "--vocab", "64", "--dense-stride", "60"])
        assert result.exit_code == 2 and "dense stride must hold the vocabulary" in result.output
    if importlib.util.find_spec("torch") is not None:  # the worker's mutants are looked up once torch is there
        result = runner.invoke(endpoint_group, ["worker", "--port", "0", "--mutant", "nope"])
        assert result.exit_code == 2 and "unknown mutant; known: serves-before-acceptance" in result.output
    for bad in ("0", "-1", "soon"):
        result = runner.invoke(endpoint_group, ["worker", "--port", "0", "--answer-timeout", bad])
        assert result.exit_code == 2 and "--answer-timeout" in result.output
    assert parse_address("127.0.0.1:7700") == ("127.0.0.1", 7700)
    with pytest.raises(Exception, match="HOST:PORT"):
        parse_address("7700")
