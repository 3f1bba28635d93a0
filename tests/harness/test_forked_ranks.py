"""``qconform accumulate --ranks N``: ranks the command forks itself, without torchrun (docs/distributed.md,
"Without torchrun"). The same hash at 1 to 4 ranks; a rank that fails before the gather is one line
with its status on rank 0, and no rank or adapter outlives the command; ``--ranks`` under torchrun
is a usage error."""

from __future__ import annotations

import os
import re
import shlex
import sys

import pytest
from click.testing import CliRunner
from robustness.processes import qconform, recorded, recording_shim, survivors

from qconform.cli.group import cli
from qconform.generators.accumulated_engine import engine_hash
from qconform.harness.run.distributed import Ranks

pytestmark = pytest.mark.rules("R11")

SMALL = ["--family", "verification_round", "--count", "900", "--shard-cases", "100", "--batch", "50"]

#: a shim that serves the reference adapter in one rank and fails to start in the other: it finds its
#: rank from its process tree (shim -> keeper -> rank process; rank 0's parent is the test)
ONE_RANK_FAILS = """
import os, sys
def parent(pid):
    with open(f"/proc/{pid}/stat", "rb") as file:
        stat = file.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[1])
open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
rank_process = parent(parent(os.getpid()))
rank = 0 if parent(rank_process) == int(sys.argv[2]) else 1
if rank == int(sys.argv[3]):
    sys.stderr.write(f"one_rank_fails: rank {rank} cannot start\\n")
    sys.exit(1)
os.execv(sys.executable, [sys.executable, "-m", "qconform.harness.transport.host", "--adapter", "reference"])
"""


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_forked_ranks_give_the_single_process_hash(world):
    proc = qconform("accumulate", "--adapter", "reference", *SMALL, "--ranks", str(world))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    assert f"{world} rank(s)" in out
    digest = re.search(r"^hash\s+([0-9a-f]{64})", out, re.M)
    assert digest is not None and digest.group(1) == engine_hash("verification_round", 900, 100)
    assert out.count("PASS") == 1 and err == ""  # rank 0 alone prints


@pytest.mark.parametrize("failing", [0, 1])
def test_a_rank_that_cannot_start_is_one_line_with_its_status(tmp_path, failing):
    """Rank 1 failing: rank 0 finishes its share, finds the rank gone at the gather and quotes it;
    rank 0 failing: it says why and ends rank 1 at once. Either way exit 3 and nothing left running."""
    pids = tmp_path / "pids"
    shim = [sys.executable, "-c", ONE_RANK_FAILS, str(pids), str(os.getpid()), str(failing)]
    proc = qconform("accumulate", "--adapter", "shim:" + shlex.join(shim), *SMALL, "--ranks", "2")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 3, out + err
    errors = [line for line in err.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("Error: "), err
    assert f"one_rank_fails: rank {failing} cannot start" in errors[0]
    if failing == 1:
        assert "rank 1 ended before the gather with status 3" in errors[0]
    assert "PASS" not in out and "Traceback" not in err
    assert len(recorded(pids)) == 2
    assert survivors(pids) == []


#: a shim that records its pid, then serves the reference adapter as that process
def test_a_rank_closes_its_adapter_while_it_gathers(tmp_path, monkeypatch):
    """The rank's adapter is shut down while the rank is in the gather (its shutdown overlaps the
    wait for the other ranks): a gather that waits for the adapter to end sees it end, and the run
    still passes."""
    pids = tmp_path / "pids"
    shim = recording_shim(pids)
    running_at_gather: list[list[int]] = []

    def gather(obj):
        running_at_gather.append(survivors(pids, wait_s=20.0))  # a close after the gather never comes
        return [obj]

    monkeypatch.setattr("qconform.cli.ranks.command_ranks", lambda _prepared, _guard: Ranks(0, 1, gather))
    result = CliRunner().invoke(cli, ["accumulate", "--adapter", shim, *SMALL])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    assert len(recorded(pids)) == 1
    assert running_at_gather == [[]]


def test_ranks_under_torchrun_is_a_usage_error():
    result = CliRunner(env={"WORLD_SIZE": "2", "RANK": "0"}).invoke(
        cli, ["accumulate", "--adapter", "reference", *SMALL, "--ranks", "2"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "Error: --ranks starts its own ranks; under torchrun leave it out (torchrun sets the ranks)"
    ]
