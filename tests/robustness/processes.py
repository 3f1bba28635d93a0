"""What the robustness tests share: a shim with stubborn helpers, and whether its pids survive."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREE_SHIM = Path(__file__).resolve().with_name("tree_shim.py")


def tree_shim(pidfile: Path, mode: str = "serve") -> str:
    """The ``shim:`` spec of tests/robustness/tree_shim.py (helpers that ignore SIGTERM and leave its session)."""
    return "shim:" + shlex.join([sys.executable, str(TREE_SHIM), str(pidfile), mode])


def recorded(pidfile: Path) -> list[int]:
    return [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie is an ended process whose status is not collected yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] != b"Z"


def survivors(pidfile: Path, wait_s: float = 10.0) -> list[int]:
    """The recorded helpers still running after ``wait_s`` seconds; each is then killed, so that a
    failing test leaves nothing behind itself."""
    deadline = time.monotonic() + wait_s
    while (left := [pid for pid in recorded(pidfile) if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def wait_until(condition, wait_s: float = 20.0) -> bool:
    """Whether ``condition()`` becomes true within ``wait_s`` seconds (polled every 20 ms)."""
    deadline = time.monotonic() + wait_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


#: a shim (``python -c RECORDS_ITS_PID PIDFILE``) that appends its pid to PIDFILE, then serves the
#: reference adapter as that same process
RECORDS_ITS_PID = """
import os, sys
open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
os.execv(sys.executable, [sys.executable, "-m", "qconform.harness.transport.host", "--adapter", "reference"])
"""


def recording_shim(pidfile: Path) -> str:
    """The ``shim:`` spec of :data:`RECORDS_ITS_PID` recording into ``pidfile``."""
    return "shim:" + shlex.join([sys.executable, "-c", RECORDS_ITS_PID, str(pidfile)])


def wait_for_helpers(pidfile: Path, count: int, proc: subprocess.Popen, wait_s: float = 120.0) -> None:
    """Wait until ``count`` helpers have recorded their pids (the adapters have started)."""
    deadline = time.monotonic() + wait_s
    while len(recorded(pidfile)) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            raise AssertionError(f"no {count} helpers started (status {proc.returncode}): {out[-2000:]} {err[-2000:]}")
        time.sleep(0.05)


def wait_until_asked(pidfile: Path, proc: subprocess.Popen, wait_s: float = 120.0) -> None:
    """Wait until the ``hang`` shim got its first request after ``get_config`` (the work has begun)."""
    asked = pidfile.with_name(pidfile.name + ".asked")
    deadline = time.monotonic() + wait_s
    while not asked.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            raise AssertionError(f"no request reached the shim (status {proc.returncode}): {out[-2000:]} {err[-2000:]}")
        time.sleep(0.05)


def qconform(*args: str, **popen) -> subprocess.Popen:
    """``qconform ARGS`` as a process of its own (this checkout's package), output captured."""
    base = popen.pop("env", os.environ)
    env = {**base, "PYTHONPATH": str(REPO) + os.pathsep + base.get("PYTHONPATH", "")}
    return subprocess.Popen(
        [sys.executable, "-m", "qconform", *args],
        stdout=popen.pop("stdout", subprocess.PIPE),
        stderr=popen.pop("stderr", subprocess.PIPE),
        text=True,
        env=env,
        cwd=popen.pop("cwd", REPO),
        **popen,
    )


def sent_to_self(signum: int = signal.SIGTERM) -> None:
    """``signum`` to this process, and time for its handler to run (in the main thread). SIGTERM by
    default: pytest's own SIGINT handling stays out of it."""
    os.kill(os.getpid(), signum)
    time.sleep(0.05)
