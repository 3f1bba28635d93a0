"""The adapter zygote (harness/transport/zygote.py; docs/distributed.md, "One torch import for all
ranks"): a rank's adapter forked from one process that imported the adapter's modules once, which the
rank still owns. It answers as a fresh start does, its exit status and stderr reach the rank, a start
the zygote does not serve runs the command itself, and however the command, a rank or the zygote is
killed, no process is left."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest
from robustness.processes import alive, qconform, wait_until

from qconform.adapters.faulty import ECHO_FAMILY, affected
from qconform.generators.encoding import encode_blob
from qconform.harness.adapter import AdapterError
from qconform.harness.transport import zygote as zygote_module
from qconform.harness.transport.client import host_command, open_adapter
from qconform.harness.transport.subreaper import descendants
from qconform.harness.transport.zygote import Zygote, refusal, start_zygote

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="the zygote is Linux's")

INPUTS = [{"i": i, "counts": encode_blob("u32", [i, i + 1, i + 2])} for i in range(10)]


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def parent_of(pid: int) -> int | None:
    return zygote_module.parent_of(pid)


@pytest.fixture
def zygote_of():
    started: list[Zygote] = []

    def start(adapter: str) -> Zygote:
        zygote = start_zygote(adapter, "cpu")
        assert zygote is not None and zygote.pid is not None
        started.append(zygote)
        return zygote

    yield start
    for zygote in started:
        pid = zygote.pid or 0
        zygote.close()
        assert wait_until(lambda: not alive(pid))


def test_an_adapter_the_zygote_serves_is_forked_from_it_and_ends_with_its_client(zygote_of):
    zygote = zygote_of("faulty:exit")
    with open_adapter("faulty:exit") as client:
        child = client._child
        assert child is not None and "zygote_stub.py" in cmdline(child.pid)
        served = descendants(zygote.pid)  # the adapter's keeper and the adapter, forked from the zygote
        assert len(served) == 2, [cmdline(pid) for pid in served]
        clean = [case for case in INPUTS if not affected(case)]
        outcomes = client.run_batch(ECHO_FAMILY, clean)
        assert not any(isinstance(outcome, AdapterError) for outcome in outcomes), outcomes
    assert wait_until(lambda: not any(alive(pid) for pid in served))
    assert wait_until(lambda: descendants(zygote.pid) == [])  # its keeper reaped by the zygote


def test_each_forked_adapter_has_a_session_of_its_own_as_a_fresh_start_does(zygote_of):
    """The scheduler shares the cores between sessions (autogroups): ranks' adapters in the zygote's one
    session would share one share of them (measured on a loaded machine: main's wall / the zygote's at
    2 ranks 0.81, bench/RESULTS.md)."""
    zygote = zygote_of("reference")
    with open_adapter("reference"), open_adapter("reference"):
        served = descendants(zygote.pid)
        sessions = {os.getsid(pid) for pid in served}
        assert len(served) == 4 and len(sessions) == 2 and os.getsid(zygote.pid) not in sessions


def test_a_rank_that_stops_its_adapter_ends_the_fork_even_while_it_computes(zygote_of):
    """A request that times out kills the child (its keeper kills the stub): the forked adapter, asleep
    in the batch and deaf to its closed stdin, is killed by its keeper in the zygote at once."""
    zygote = zygote_of("faulty:hang")
    with open_adapter("faulty:hang") as client:
        served = descendants(zygote.pid)
        assert len(served) == 2
        outcomes = client.run_batch(ECHO_FAMILY, INPUTS, timeout_s=1.0)
        assert all(isinstance(outcome, AdapterError) and "timed out" in str(outcome) for outcome in outcomes)
        assert wait_until(lambda: not any(alive(pid) for pid in served), 10.0), [cmdline(p) for p in served]


@pytest.mark.parametrize(
    "mode, said",
    [
        ("exit", "adapter exited with status 3 before answering request"),
        ("kill", "adapter was killed by signal 9 (SIGKILL) before answering request"),
    ],
)
def test_a_forked_adapters_exit_status_and_stderr_reach_the_rank_as_a_fresh_ones_do(zygote_of, mode, said):
    def failure() -> str:
        with open_adapter(f"faulty:{mode}") as client:
            outcome = client.run_batch(ECHO_FAMILY, INPUTS)[next(i for i, c in enumerate(INPUTS) if affected(c))]
            assert isinstance(outcome, AdapterError)
            return str(outcome)

    fresh = failure()
    zygote = zygote_of(f"faulty:{mode}")
    forked = failure()
    assert said in forked and f"stderr: faulty adapter: mode {mode} triggered" in forked, forked
    assert forked == fresh
    assert wait_until(lambda: descendants(zygote.pid) == [])  # its keeper reaped by the zygote


def test_a_start_the_zygote_does_not_serve_runs_the_command_itself(zygote_of, monkeypatch):
    zygote = zygote_of("faulty:exit")
    monkeypatch.setenv("QCONFORM_ZYGOTE_TEST", "another environment")  # the zygote refuses: not its own
    with open_adapter("faulty:exit") as client:
        child = client._child
        assert child is not None
        assert "transport.host" in cmdline(child.pid)  # the stub became the command (execvp)
        assert wait_until(lambda: descendants(zygote.pid) == [])  # nothing was forked


def traced(path) -> list[str]:
    """The decisions in a zygote's trace file, without their times and pids."""
    return [line.split(": ", 1)[1] for line in path.read_text().splitlines()] if path.exists() else []


def test_the_zygote_traces_why_it_serves_or_refuses_each_start(zygote_of, monkeypatch, tmp_path):
    """Rule 7: with QCONFORM_ZYGOTE_TRACE set, the zygote appends its readiness and each start's fork or
    refusal with the reason, so a run whose ranks each imported torch says why (a lent H200 showed it)."""
    trace = tmp_path / "zygote.trace"
    monkeypatch.setenv(zygote_module.TRACE_ENV, str(trace))
    zygote_of("reference")
    with open_adapter("reference"):
        pass
    monkeypatch.setenv("QCONFORM_ZYGOTE_TEST", "another environment")
    with open_adapter("reference"):
        pass
    decisions = traced(trace)
    assert len(decisions) == 3 and decisions[0].startswith("ready: imports ") and decisions[0].endswith(" 1 thread(s)")
    assert decisions[1].startswith("forked ") and decisions[1].split()[1].isdigit()
    assert decisions[2] == "refused: the environment differs from the zygote's"


def test_a_trace_file_that_cannot_be_written_loses_the_line_not_the_start(zygote_of, monkeypatch, tmp_path):
    monkeypatch.setenv(zygote_module.TRACE_ENV, str(tmp_path / "no such folder" / "zygote.trace"))
    zygote = zygote_of("reference")
    with open_adapter("reference") as client:
        assert client._child is not None and len(descendants(zygote.pid)) == 2  # forked all the same


def test_an_adapter_the_host_does_not_serve_gets_no_zygote():
    assert start_zygote("shim:./my_shim", "cpu") is None
    assert start_zygote("tcp://127.0.0.1:1", "cpu") is None
    assert zygote_module.zygote_for(host_command("reference", "cpu")) is None


#: a stand-in for the CUDA driver: cuDeviceGetCount answers STATUS (3: not initialised, as before cuInit)
STUB_DRIVER = "int cuDeviceGetCount(int *count) { *count = 0; return STATUS; }\n"


def stub_driver(tmp_path, status: int | None) -> str:
    """A ``libcuda.so.1`` whose cuDeviceGetCount returns ``status`` (None: it lacks the function)."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler")
    folder = tmp_path / f"driver-{status}"
    folder.mkdir()
    (folder / "driver.c").write_text(STUB_DRIVER if status is not None else "int cuInit(int flags) { return 0; }\n")
    library = folder / "libcuda.so.1"
    subprocess.run(
        [compiler, "-shared", "-fPIC", f"-DSTATUS={status}", "-o", str(library), str(folder / "driver.c")], check=True
    )
    return str(library)


def prepared_with_driver(library: str | None, tmp_path) -> tuple[bool, list[str]]:
    """The zygote's decision (:func:`prepared`) in a fresh Python that has ``library`` mapped, as an
    import would map it, and the trace line it wrote."""
    trace = tmp_path / "zygote.trace"
    code = (
        "import ctypes, sys\n"
        "from qconform.harness.transport import zygote\n"
        f"{library!r} and ctypes.CDLL({library!r})\n"
        "sys.exit(0 if zygote.prepared('reference') else 1)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, zygote_module.TRACE_ENV: str(trace)}, timeout=60
    )
    assert done.returncode in (0, 1)
    return done.returncode == 0, traced(trace)


def test_a_zygote_forks_where_the_cuda_driver_is_mapped_but_not_initialised(tmp_path):
    served, decisions = prepared_with_driver(stub_driver(tmp_path, zygote_module.CUDA_ERROR_NOT_INITIALIZED), tmp_path)
    assert served and len(decisions) == 1
    assert decisions[0].startswith("ready: imports ") and decisions[0].endswith(
        " 1 thread(s), the CUDA driver mapped, not initialised"
    )


@pytest.mark.parametrize("status", [0, 100, None], ids=["initialised", "no-device", "cannot-be-asked"])
def test_a_zygote_whose_imports_initialised_the_cuda_driver_ends_without_serving(tmp_path, status):
    served, decisions = prepared_with_driver(stub_driver(tmp_path, status), tmp_path)
    why = (
        f"cuDeviceGetCount returned {status}, not 3 (not initialised)"
        if status is not None
        else "it cannot be asked (AttributeError: "
    )
    assert not served and len(decisions) == 1
    assert decisions[0].startswith(f"not serving: the imports initialised the CUDA driver: {why}")


def test_a_zygote_without_the_cuda_driver_serves_and_says_nothing_of_it(tmp_path):
    assert zygote_module.cuda_driver_mapped() is None  # torch imported, CPU build: no driver here
    served, decisions = prepared_with_driver(None, tmp_path)
    assert served and len(decisions) == 1 and decisions[0].endswith(" 1 thread(s)")


def test_a_zygote_whose_imports_fail_ends_without_serving_and_says_why_on_one_line(monkeypatch, tmp_path):
    def preload(adapter: str) -> None:
        raise ImportError(f"{adapter}: no module named\n  torch")

    monkeypatch.setattr(zygote_module, "preload", preload)
    monkeypatch.setenv(zygote_module.TRACE_ENV, str(tmp_path / "zygote.trace"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    assert zygote_module.main(["--adapter", "reference", "--listen-fd", str(listener.detach())]) == 1
    assert traced(tmp_path / "zygote.trace") == [
        "not serving: importing reference failed (ImportError: reference: no module named torch)"
    ]


SERVED = host_command("reference", "cpu")
REQUEST = {"argv": SERVED, "env": {"A": "1"}, "cwd": "/x", "fds": [0, 1, 2, 5]}


@pytest.mark.parametrize(
    "change, running, why",
    [
        ({}, 1, None),
        ({}, 2, "the zygote runs 2 threads (a fork needs one)"),
        ({"argv": host_command("torch", "cpu")}, 1, "it serves another command"),
        ({"env": {"A": "2"}}, 1, "the environment differs from the zygote's"),
        ({"cwd": "/y"}, 1, "the working directory differs from the zygote's"),
        ({"fds": [1, 0, 2]}, 1, "the descriptors are not stdin, stdout, stderr and more"),
    ],
)
def test_the_zygote_forks_only_with_one_thread_for_its_own_command_environment_and_directory(change, running, why):
    assert refusal({**REQUEST, **change}, SERVED, {"A": "1"}, "/x", running) == why


RANKS_RUN = ["accumulate", "--adapter", "reference", "--family", "verification_round", "--count", "10000000"]


def command_tree(root: int) -> dict[str, list[int]]:
    """The processes of a ``--ranks 2`` command by role, read from /proc."""
    pids = descendants(root)
    roles: dict[str, list[int]] = {"rank": [], "zygote": [], "forked": [], "stub": []}
    for pid in pids:
        line = cmdline(pid)
        if "subreaper.py" in line:  # a keeper (of the zygote, or of a rank's adapter)
            continue
        if "-m qconform.harness.transport.zygote" in line:
            roles["zygote" if "subreaper.py" in cmdline(parent_of(pid) or 0) else "forked"].append(pid)
        elif "zygote_stub.py" in line:
            roles["stub"].append(pid)
        elif parent_of(pid) == root and "accumulate" in line:
            roles["rank"].append(pid)
    return roles


@pytest.mark.parametrize("victim", ["command", "rank", "zygote"])
def test_no_process_outlives_a_sigkill_of_the_command_a_rank_or_the_zygote(victim):
    proc = qconform(*RANKS_RUN, "--ranks", "2")
    try:
        tree: dict[str, list[int]] = {}

        def started() -> bool:
            tree.update(command_tree(proc.pid))
            return len(tree["forked"]) == 4 and len(tree["stub"]) == 2 and len(tree["rank"]) == 1

        assert wait_until(started, 120.0), tree
        before = [proc.pid, *descendants(proc.pid)]
        zygote = tree["zygote"][0]
        if victim == "rank":
            rank = tree["rank"][0]
            os.kill(rank, signal.SIGKILL)
            # the rank's keeper, its stub, and the adapter the zygote forked for it all end with it,
            # while rank 0 still runs with its own
            assert wait_until(lambda: not any(alive(pid) for pid in descendants(rank)) and not alive(rank))
            assert wait_until(lambda: len(descendants(zygote)) == 2), [cmdline(p) for p in descendants(zygote)]
            assert proc.poll() is None
        elif victim == "zygote":
            forked = descendants(zygote)
            os.kill(zygote, signal.SIGKILL)
            assert wait_until(lambda: not any(alive(pid) for pid in [zygote, *forked]))
            assert wait_until(lambda: not any(alive(pid) for pid in tree["stub"]))  # each rank sees its adapter end
        before += descendants(proc.pid)  # the ranks' restarts meanwhile (today's start: the zygote is gone)
        proc.kill()
        proc.communicate(timeout=60)
        assert wait_until(lambda: not any(alive(pid) for pid in before)), [cmdline(p) for p in before if alive(p)]
    finally:
        proc.kill()
        proc.wait()
