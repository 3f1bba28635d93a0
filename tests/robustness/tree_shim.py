"""A shim whose helpers try every way to outlive it (tests/robustness/test_process_tree.py).

``tree_shim.py PIDFILE MODE``: first starts a helper that leaves the shim's session
(``setsid``), ignores SIGTERM and holds the shim's stdin, stdout and stderr, and a grandchild
of the helper that does the same; both append their pid to PIDFILE. Then, by MODE:
``serve`` becomes examples/shim/python_shim.py (``rng_abi``, ``categorical_sampling``);
``crash`` writes a line to stderr and exits with status 1 before answering anything;
``hang`` answers ``get_config`` (every family a command may need, sampling included) and then
never answers again, so a command is still running when a test signals it; ``mute`` never
answers anything, ``get_config`` included, so a command is still starting its adapter.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

EXAMPLE_SHIM = Path(__file__).resolve().parents[2] / "examples" / "shim" / "python_shim.py"


def linger(pidfile: str) -> None:
    """Ignore SIGTERM, record this pid, and sleep (a helper that never ends by itself)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    fd = os.open(pidfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)
    while True:
        time.sleep(3600)


def recorded(pidfile: str) -> int:
    path = Path(pidfile)
    return len(path.read_text().split()) if path.exists() else 0


def start_helpers(pidfile: str) -> None:
    """Start the helper and its grandchild, and return once both have recorded their pids."""
    before = recorded(pidfile)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            linger(pidfile)
        linger(pidfile)
    while recorded(pidfile) < before + 2:
        time.sleep(0.01)


#: what the ``hang`` mode declares: enough for every command to send it a request
HANG_CONFIG = {
    "name": "tree-shim",
    "protocol": 1,
    "capabilities": {
        "families": ["rng_abi", "categorical_sampling", "verification_round", "distribution", "allocation_dense"],
        "sampling": ["verification_round", "distribution"],
        "injected_draws": True,
        "devices": ["cpu"],
    },
    "precision": {},
    "device": "cpu",
}


def hang(pidfile: str) -> None:
    """Answer get_config, then create PIDFILE.asked at the first other request and never answer it."""
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") != "get_config":
            Path(pidfile + ".asked").touch()
            time.sleep(3600)
        reply = {"id": request.get("id"), "status": "ok", "config": HANG_CONFIG}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def main() -> None:
    pidfile, mode = sys.argv[1], sys.argv[2]
    start_helpers(pidfile)
    if mode == "crash":
        print("tree_shim: crashing on purpose", file=sys.stderr, flush=True)
        os._exit(1)
    if mode == "hang":
        hang(pidfile)
        return
    if mode == "mute":
        time.sleep(3600)
        return
    os.execv(sys.executable, [sys.executable, str(EXAMPLE_SHIM)])


if __name__ == "__main__":
    main()
