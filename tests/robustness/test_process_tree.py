"""Process hygiene: however a command ends, every process its adapter started is gone (issue #22).

The adapter is tests/robustness/tree_shim.py: before it serves the protocol it starts a helper
that leaves its session (``setsid``), ignores SIGTERM, SIGINT and SIGHUP and holds its pipes,
and a grandchild that does the same. Before the keeper of the adapter's tree
(harness/transport/subreaper.py) every test below left both helpers running under PID 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from qconform.harness.adapter import AdapterStartError
from qconform.harness.transport.client import open_adapter
from robustness.processes import qconform, recorded, survivors, tree_shim, wait_for_helpers

RNG_CASE = {"n": 1}


def test_a_closed_adapter_leaves_none_of_its_helpers(tmp_path):
    pids = tmp_path / "pids"
    with open_adapter(tree_shim(pids)) as client:
        assert client.config.capabilities.families
        assert len(recorded(pids)) == 2
    assert survivors(pids) == []


def test_a_crash_is_reported_as_one_at_once_while_a_helper_holds_its_pipes(tmp_path):
    """Before: no EOF while the helper held stdout, so the start timed out after 60 s."""
    pids = tmp_path / "pids"
    started = time.monotonic()
    with pytest.raises(AdapterStartError) as info:
        open_adapter(tree_shim(pids, "crash"), start_timeout_s=60)
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert "adapter exited with status 1 before answering request 1" in message, message
    assert "stderr: tree_shim: crashing on purpose" in message, message
    assert elapsed < 10, elapsed  # about 1 s on an idle machine; the old client waited the 60 s timeout
    assert survivors(pids) == []


def test_a_shim_killed_by_a_signal_is_reported_as_killed_by_it(tmp_path):
    pids = tmp_path / "pids"
    client = open_adapter(tree_shim(pids))
    try:
        child = client._child
        assert child is not None
        os.kill(child.pid, signal.SIGSEGV)
        line = child.read_line(time.monotonic() + 30)
        assert child.exit_status() == "was killed by signal 11 (SIGSEGV)"
        assert line is not None
    finally:
        client.close()
    assert survivors(pids) == []


def test_forked_workers_die_with_a_command_killed_by_sigkill(tmp_path):
    """``qconform mutants`` and ``adequacy`` fork their workers: they end with the command, kill -9 included."""
    script = (
        "import multiprocessing, sys, time\n"
        "from qconform.harness.transport.client import forks_die_with_parent\n"
        "forks_die_with_parent()\n"
        "def sleeps(): time.sleep(600)\n"
        "p = multiprocessing.get_context('fork').Process(target=sleeps)\n"
        "p.start()\n"
        "open(sys.argv[1], 'w').write(f'{p.pid}\\n')\n"
        "time.sleep(600)\n"
    )
    pids = tmp_path / "pids"
    proc = subprocess.Popen([sys.executable, "-c", script, str(pids)], cwd=str(tmp_path.parent))
    try:
        wait_for_helpers(pids, 1, proc)
    finally:
        proc.kill()
        proc.wait()
    assert survivors(pids) == []


#: each command that starts an adapter, as it ends on its own (0 for a clean run, else its error status)
COMMANDS = {
    "run": ["run", "--family", "rng_abi"],
    "run -n 2": ["run", "--family", "rng_abi", "--family", "categorical_sampling", "-n", "2"],
    "stat": ["stat"],
    "fuzz": ["fuzz", "--family", "rng_abi", "--examples", "5"],
    "accumulate": ["accumulate", "--family", "verification_round", "--count", "2"],
    "accumulate --ranks 2": ["accumulate", "--family", "rng_abi", "--count", "2", "--ranks", "2"],
    "batch-invariance": ["batch-invariance"],
}
HELPERS = {"run -n 2": 4, "accumulate --ranks 2": 4}
SIGNALS = ("SIGINT", "SIGTERM")


#: every command ends normally and by SIGKILL in the main suite; by SIGINT and SIGTERM, ``run``
#: there and the others behind ``slow`` (the same client code stops them)
ENDINGS = [
    pytest.param(command, ending, marks=[pytest.mark.slow] if ending in SIGNALS and "run" not in command else [])
    for command in COMMANDS
    for ending in ("normal", "SIGINT", "SIGTERM", "SIGKILL")
]


@pytest.mark.parametrize("command, ending", ENDINGS)
def test_no_helper_outlives_a_command(tmp_path, command, ending):
    pids = tmp_path / "pids"
    args = [*COMMANDS[command], "--adapter", tree_shim(pids, "serve" if ending == "normal" else "hang")]
    proc = qconform(*args, cwd=tmp_path)
    if ending != "normal":
        wait_for_helpers(pids, HELPERS.get(command, 2), proc)
        proc.send_signal(getattr(signal, ending))
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert recorded(pids), f"the adapter never started: {out[-2000:]} {err[-2000:]}"
    assert survivors(pids) == [], f"status {proc.returncode}: {out[-2000:]} {err[-2000:]}"
    assert "Traceback" not in err, err[-3000:]
