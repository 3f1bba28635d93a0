"""A torchrun rank whose peers fail it (docs/distributed.md, "When a rank is lost"): a rendezvous that
never completes is stopped by SIGINT or SIGTERM like any other wait, and a peer that is gone at the
gather is one line and status 1, never a traceback; the rank's adapter is ended either way.

Each test plays one rank of a world of two (``WORLD_SIZE=2``, torchrun's environment) on a free port
of its own; the other rank is absent, or is a process that joins the group and exits at once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from robustness.processes import qconform, recorded, recording_shim, survivors, wait_until

from qconform.cli.errors import StartLineError
from qconform.cli.ranks import RankLineError, group_errors
from qconform.harness.run import distributed
from qconform.harness.run.distributed import GroupFailed, Ranks, collective, finish, torch_said

pytestmark = pytest.mark.rules("R11")

#: a rank that joins the process group and exits at once: its peers lose it at their gather
GONE_PEER = "import torch.distributed as dist; dist.init_process_group('gloo', init_method='env://')"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rank_environment(rank: int, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "WORLD_SIZE": "2",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def listening(port: int) -> bool:
    """Whether rank 0's store listens on ``port``: rank 0 is in the rendezvous."""
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def command(name: str, adapter: str) -> list[str]:
    if name == "accumulate":
        return ["accumulate", "--adapter", adapter, "--family", "rng_abi", "--count", "64"]
    return ["stat", "--adapter", adapter, "--case", "verification_round/residual/*", "--samples", "100"]


@pytest.fixture(autouse=True)
def with_torch_distributed():
    pytest.importorskip("torch.distributed")


@pytest.mark.parametrize(
    ("name", "signum"),
    [("accumulate", signal.SIGINT), ("accumulate", signal.SIGTERM), ("stat", signal.SIGTERM)],
    ids=["accumulate-SIGINT", "accumulate-SIGTERM", "stat-SIGTERM"],
)
def test_a_rendezvous_that_never_completes_is_stopped_by_a_signal(tmp_path: Path, name: str, signum: int):
    """Rank 0 waits for a rank 1 that never comes (torch waits 30 minutes, in C++ where a signal
    cannot stop it): the signal ends the command at once, with its line and 128 + its number."""
    pids, port = tmp_path / "pids", free_port()
    proc = qconform(*command(name, recording_shim(pids)), env=rank_environment(0, port))
    try:
        assert wait_until(lambda: listening(port) and len(recorded(pids)) == 1, 120.0), proc.poll()
        time.sleep(0.3)  # well inside the wait
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, (out, err)
    said = out + err
    assert "Traceback" not in said
    name_of = signal.Signals(signum).name
    if name == "accumulate":
        assert f"INTERRUPTED by {name_of}: rng_abi: 0 of 64 cases answered" in said
    else:
        assert f"Error: interrupted by {name_of} while the ranks met; nothing sampled" in said
    assert survivors(pids) == []


@pytest.mark.parametrize("name", ["accumulate", "stat"])
def test_a_peer_gone_at_the_gather_is_one_line_and_an_incomplete_run(tmp_path: Path, name: str):
    pids, port = tmp_path / "pids", free_port()
    adapter = recording_shim(pids) if name == "accumulate" else "torch-native-rng"
    proc = qconform(*command(name, adapter), env=rank_environment(0, port))
    peer = subprocess.Popen([sys.executable, "-c", GONE_PEER], env=rank_environment(1, port))
    try:
        out, err = proc.communicate(timeout=120)
        peer.wait(timeout=30)
    finally:
        proc.kill()
        peer.kill()
    assert proc.returncode == 1, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("Error: torchrun's process group failed at the gather: "), err
    assert lines[-1].endswith("(the run is incomplete)"), err
    assert survivors(pids) == []


def test_what_torch_raises_is_the_group_failing_this_rank_in_its_first_sentence():
    said = (
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:20874. This is typically caused by a remote worker crashing. Check the logs.\nmore"
    )
    assert torch_said(RuntimeError(said)) == "Connection closed by peer [127.0.0.1]:20874"

    def lost() -> None:
        raise RuntimeError(said)

    with pytest.raises(GroupFailed, match=r"^torchrun's process group failed at the gather: Connection closed") as at:
        collective(distributed.GATHER, lost)
    assert not at.value.at_start
    with pytest.raises(GroupFailed) as at:
        collective(distributed.RENDEZVOUS, lost)
    assert at.value.at_start
    with pytest.raises(ValueError, match="not torch's"):  # only torch's own failures are the group's
        collective(distributed.GATHER, lambda: (_ for _ in ()).throw(ValueError("not torch's")))


def test_the_group_failing_at_the_rendezvous_cannot_start_and_at_a_collective_is_an_incomplete_run():
    with pytest.raises(StartLineError, match="failed at the rendezvous: no peer") as start:
        with group_errors():
            raise GroupFailed(distributed.RENDEZVOUS, "no peer")
    assert start.value.exit_code == 3
    with pytest.raises(RankLineError, match=r"failed at the barrier: gone \(the run is incomplete\)") as run:
        with group_errors():
            raise GroupFailed(distributed.BARRIER, "gone")
    assert run.value.exit_code == 1


def test_a_rank_whose_run_did_not_complete_does_not_wait_for_the_others(monkeypatch):
    """An interrupted or failed rank ends at once: its peers were interrupted too, or torchrun ends
    them when it exits (a barrier would wait for peers that may never come)."""
    import torch.distributed as dist

    barriers: list[int] = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "barrier", lambda: barriers.append(1))
    ranks = Ranks(rank=0, world=2, gather=lambda obj: [obj, obj])
    finish(ranks, completed=False)
    assert barriers == []
    finish(ranks, completed=True)
    assert barriers == [1]
