"""Many interrupted starts at once, under load: the check that found the one escape of
``accumulate``'s start-up in 300 (an import between two handlers answered ``Aborted!`` and 1;
docs/harness.md, "Stopping cleanly"). Opt in with ``-m slow`` (about 40 s on 2 cores).

Each start runs a command against an adapter that never answers ``get_config`` (tree_shim's
``mute`` mode), waits until the adapter is up, waits a moment drawn from :data:`DELAYS_S`, and
sends SIGINT or SIGTERM. Every one must end with 128 + the signal, its line, no ``Aborted!``
and no traceback, and leave nothing running. The draws come from a fixed seed, so a failure
names the start that failed and reruns the same way."""

from __future__ import annotations

import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from robustness.interruptions import PARTIAL, STARTING, starting_line
from robustness.processes import qconform, recorded, survivors, tree_shim

pytestmark = [pytest.mark.rules(), pytest.mark.slow]

ACCUMULATE, ACCUMULATED = PARTIAL["accumulate"]
#: command -> (its arguments, the adapters it starts, what its output says once interrupted)
COMMANDS = {
    "accumulate": (ACCUMULATE, 1, ACCUMULATED),
    "accumulate --ranks 2": ([*ACCUMULATE, "--ranks", "2"], 2, ACCUMULATED),
    **{command: (args, 1, starting_line(nothing)) for command, (args, nothing) in STARTING.items()},
}
#: how long after the adapter is up the signal is sent
DELAYS_S = (0.0, 0.0, 0.001, 0.01, 0.05, 0.2)
STARTS = 120
AT_ONCE = 6


def interrupted_start(folder: Path, command: str, signum: int, delay_s: float) -> str:
    """One start of ``command`` interrupted ``delay_s`` after its adapters are up: "" if it ended
    as it must, else why not."""
    args, adapters, expected = COMMANDS[command]
    pids = folder / "pids"
    proc = qconform(*args, "--adapter", tree_shim(pids, "mute"), cwd=folder)
    deadline = time.monotonic() + 120
    while len(recorded(pids)) < 2 * adapters and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(delay_s)
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=120)
    except Exception:  # noqa: BLE001 - a hang is one more way to fail
        proc.kill()
        out, err = proc.communicate()
        err += "\n(hung)"
    left = survivors(pids)
    name = signal.Signals(signum).name
    problems = []
    if proc.returncode != 128 + signum:
        problems.append(f"status {proc.returncode}")
    if expected.format(name=name) not in out + err:
        problems.append("no interruption line")
    if "Aborted" in err or "Traceback" in err or "(hung)" in err:
        problems.append("Aborted!, a traceback or a hang")
    if left:
        problems.append(f"{len(left)} helper(s) left")
    if not problems:
        return ""
    return f"{command}, {name} {delay_s} s after its adapter: {', '.join(problems)}\n{out[-800:]}\n{err[-1500:]}"


def test_many_starts_interrupted_at_once_each_end_with_their_status(tmp_path):
    draw = random.Random(20261204)
    starts = [
        (
            tmp_path / str(index),
            draw.choice(list(COMMANDS)),
            draw.choice([signal.SIGINT, signal.SIGTERM]),
            draw.choice(DELAYS_S),
        )
        for index in range(STARTS)
    ]
    for folder, *_ in starts:
        folder.mkdir()
    with ThreadPoolExecutor(AT_ONCE) as pool:
        failures = [line for line in pool.map(lambda start: interrupted_start(*start), starts) if line]
    assert failures == [], f"{len(failures)} of {STARTS}:\n" + "\n".join(failures)
