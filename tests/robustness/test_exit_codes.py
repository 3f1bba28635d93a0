"""One exit status per cause, on every command (docs/harness.md, "Exit codes"; issue #22).

Each OS error a user can meet is one ``Error:`` line with its row's status and what to do:
a port in use (3), a missing optional dependency (3), a device the machine or the adapter
lacks (3), an output path whose parent is a file, a denied write and a full disk (4). Before
issue #22 the port and the dependency were 29- and 48-line tracebacks, the file in the way
said ``File exists``, ``--device cuda`` was 2 while ``--device tpu`` was 3, and ``generate``
and ``adequacy`` reported an unwritable output as 1 and 2.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner

from qconform.cli.group import cli
from qconform.harness.run.gate import RunExit
from robustness.processes import REPO, qconform

FAMILY = ["--family", "rng_abi"]


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.strip().splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


# --- 3: something the command needs cannot start here -------------------------------------------


@pytest.mark.parametrize("role", ["worker", "verifier"])
def test_a_port_in_use_is_one_start_error(role):
    if role == "worker":
        pytest.importorskip("torch")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = qconform("endpoint", role, "--port", str(port), "--log-level", "error")
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == RunExit.ADAPTER_START, err[-3000:]
    line = one_error_line(err)
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use; choose another --port" in line, line


def test_a_missing_optional_dependency_is_one_start_error():
    """``mutants`` without torch (simulated: the import of torch fails), as ``run`` already said."""
    script = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.argv = ['qconform', 'mutants', '--family', 'rng_abi']\n"
        "from qconform.cli import main\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == RunExit.ADAPTER_START, done.stderr[-3000:]
    assert one_error_line(done.stderr) == (
        "Error: this command needs torch, which is not installed: pip install 'qconform[torch]'"
    )


@pytest.mark.parametrize("device", ["tpu", "cuda"])
def test_a_device_the_adapter_or_machine_lacks_is_one_start_error(device, monkeypatch):
    """One rule for every device: exit 3, whether qconform or the adapter finds it missing."""
    if device == "cuda":
        torch = pytest.importorskip("torch")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = invoke("run", "--adapter", "reference", *FAMILY, "--device", device)
    assert result.exit_code == RunExit.ADAPTER_START, result.output
    assert "Traceback" not in result.output and device in result.output


# --- 4: an output cannot be written ---------------------------------------------------------------


def test_a_report_path_under_a_file_names_the_file(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    result = invoke("run", "--adapter", "reference", *FAMILY, "--json", str(blocker / "x.json"))
    assert result.exit_code == RunExit.REPORT_WRITE, result.output
    assert f"cannot write {blocker / 'x.json'}: {blocker} is a file, not a directory" in result.output
    assert "File exists" not in result.output


def failing_writer(monkeypatch, code: int) -> None:
    """The atomic writer's temporaries fail as a full disk does (ENOSPC at fsync, where a write that
    did not fit surfaces) or as a denied write does (EACCES at their creation); nothing else fails."""
    from qconform.generators import atomic_file

    real_open, real_fsync = os.open, os.fsync

    def temporary(path) -> bool:
        return str(path).endswith(".tmp")

    def opening(path, flags, mode=0o777, *, dir_fd=None):
        if code == errno.EACCES and temporary(path):
            raise PermissionError(code, os.strerror(code), str(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def syncing(fd: int) -> None:
        if code == errno.ENOSPC and temporary(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(code, os.strerror(code))
        real_fsync(fd)

    monkeypatch.setattr(atomic_file.os, "open", opening)
    monkeypatch.setattr(atomic_file.os, "fsync", syncing)


WRITES = {
    "run --json": lambda out: ["run", "--adapter", "reference", *FAMILY, "--json", str(out / "r.json")],
    "run --junit": lambda out: ["run", "--adapter", "reference", *FAMILY, "--junit", str(out / "r.xml")],
    "generate": lambda out: ["generate", "--family", "rng_abi", "--out", str(out / "vectors")],
}


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES], ids=["disk-full", "permission-denied"])
@pytest.mark.parametrize("command", list(WRITES))
def test_an_output_that_cannot_be_written_is_one_write_error(tmp_path, monkeypatch, command, code):
    failing_writer(monkeypatch, code)
    result = invoke(*WRITES[command](tmp_path))
    assert result.exit_code == RunExit.REPORT_WRITE, result.output
    assert "Traceback" not in result.output
    assert os.strerror(code) in result.output and "cannot write" in result.output, result.output
    assert not list(tmp_path.rglob("*.tmp")), "a failed write leaves its temporary behind"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES], ids=["disk-full", "permission-denied"])
def test_an_output_file_of_a_finding_or_a_report_that_cannot_be_written_is_its_write_line(tmp_path, monkeypatch, code):
    """``write_output``, the one writer of ``--vector-out`` (accumulate, fuzz) and ``--json``
    (adequacy, mutants): a refused write is the WriteLineError row, whole file or none."""
    from qconform.cli.errors import WriteLineError, write_output

    failing_writer(monkeypatch, code)
    with pytest.raises(WriteLineError) as caught:
        write_output(tmp_path / "finding.json", "{}\n")
    assert caught.value.exit_code == RunExit.REPORT_WRITE
    assert os.strerror(code) in caught.value.message and "cannot write" in caught.value.message
    assert list(tmp_path.iterdir()) == []
