"""A shim that misbehaves in one chosen way (tests/robustness/test_probes.py).

``probe_shim.py MODE``: by MODE, the shim

* ``garbage-config`` answers ``get_config`` with a line that is not JSON;
* ``protocol2`` declares protocol 2;
* ``silent-start`` never answers ``get_config``;
* ``dies-at-start`` writes a line to stderr and exits with status 7 before answering;
* ``wrong-id`` answers every request after ``get_config`` under another request's id;
* ``refuses-declared`` declares ``rng_abi`` and answers every case ``unimplemented``;
* ``stderr-flood`` writes 4 MiB to stderr, then serves as examples/shim/python_shim.py;
* ``close-stdout`` closes its stdout after ``get_config`` and stays alive;
* ``hang`` answers ``get_config``, then never answers again;
* ``crash`` exits with status 3 at the first request after ``get_config``;
* ``killed`` kills itself with SIGKILL at the first request after ``get_config``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

EXAMPLE_SHIM = Path(__file__).resolve().parents[2] / "examples" / "shim" / "python_shim.py"

CONFIG = {
    "name": "probe-shim",
    "protocol": 1,
    "capabilities": {"families": ["rng_abi"], "devices": ["cpu"]},
    "precision": {},
    "device": "cpu",
}


def answer(reply: dict) -> None:
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


def misbehave(mode: str, request: dict) -> None:
    """What MODE does with a request other than ``get_config``."""
    rid = request["id"]
    if mode == "wrong-id":
        answer({"id": rid + 100, "status": "ok", "outputs": []})
    elif mode == "refuses-declared":
        entries = [{"status": "unimplemented", "reason": "refused"} for _ in request.get("inputs", [])]
        answer({"id": rid, "status": "ok", "outputs": entries})
    elif mode == "crash":
        os._exit(3)
    elif mode == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    else:  # hang, close-stdout
        time.sleep(3600)


def main() -> None:
    mode = sys.argv[1]
    if mode == "dies-at-start":
        print("probe_shim: cannot open the device", file=sys.stderr, flush=True)
        sys.exit(7)
    if mode == "stderr-flood":
        sys.stderr.write(("x" * 1023 + "\n") * 4096)
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, str(EXAMPLE_SHIM)])
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "shutdown":
            return
        if request.get("op") != "get_config":
            misbehave(mode, request)
            continue
        if mode == "silent-start":
            time.sleep(3600)
        if mode == "garbage-config":
            sys.stdout.write("loading the engine...\n")
            sys.stdout.flush()
            continue
        answer({"id": request["id"], "status": "ok", "config": {**CONFIG, "protocol": 2 if mode == "protocol2" else 1}})
        if mode == "close-stdout":
            os.close(1)
            time.sleep(3600)


if __name__ == "__main__":
    main()
