"""``qconform accumulate`` and ``qconform stat`` under ``torchrun`` (docs/distributed.md): 1, 2 and 4
CPU ranks (gloo) give the same accumulated hash and the same stat verdicts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from qconform.cli.group import cli
from qconform.generators.accumulated_engine import engine_hash

pytestmark = pytest.mark.rules("R11")

TESTS = Path(__file__).parents[1]
ACCUMULATE = [
    "--adapter",
    "reference",
    "--family",
    "verification_round",
    "--count",
    "900",
    "--shard-cases",
    "100",
    "--batch",
    "50",
]


def torchrun() -> str:
    found = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if found is None:
        pytest.skip("torchrun is not installed (pip install 'qconform[torch]')")
    return found


def verdicts(report: Path) -> dict[str, dict]:
    """Per case: the verdict and everything it rests on (statistic, p-values, histograms)."""
    return {case["id"]: case for case in json.loads(report.read_text())["cases"]}


def printed_hash(output: str) -> str:
    """The engine hash that accumulate printed on its ``hash`` line."""
    found = re.search(r"^hash\s+([0-9a-f]{64})", output, re.M)
    assert found is not None, output
    return found.group(1)


def single_rank(tmp_path: Path) -> tuple[str, dict]:
    runner = CliRunner()
    acc = runner.invoke(cli, ["accumulate", *ACCUMULATE])
    assert acc.exit_code == 0, acc.output
    report = tmp_path / "stat-1.json"
    stat = runner.invoke(
        cli,
        [
            "stat",
            "--adapter",
            "torch-native-rng",
            "--case",
            "verification_round/residual/*",
            "--samples",
            "3000",
            "--chunk",
            "1000",
            "--json",
            str(report),
        ],
    )
    assert stat.exit_code == 0, stat.output
    return printed_hash(acc.output), verdicts(report)


def multi_rank(tmp_path: Path, world: int) -> tuple[str, dict]:
    report = tmp_path / f"stat-{world}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            torchrun(),
            "--standalone",
            f"--nproc-per-node={world}",
            str(TESTS / "torchrun_driver.py"),
            *ACCUMULATE,
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert "exit codes [0, 0]" in done.stdout, done.stdout + done.stderr
    assert f"{world} rank(s)" in done.stdout
    return printed_hash(done.stdout), verdicts(report)


def test_world_sizes_1_2_4_agree(tmp_path):
    hash1, stat1 = single_rank(tmp_path)
    assert hash1 == engine_hash("verification_round", 900, 100)
    assert stat1 and all(case["class"] == "pass" for case in stat1.values())
    for world in (2, 4):
        assert multi_rank(tmp_path, world) == (hash1, stat1), world
