"""The rough edges of issue #22: ``faulty:<mode>`` adapters start, ``pytest --co`` lists each case
once and claims no verdict, and a ``kill -9`` of ``qconform run`` leaves no folder behind for long.
Before: every ``faulty:`` adapter failed at start (``declares unknown family 'echo'``), ``--co``
listed each case twice then printed ``NO CASES ... 0 judged``, and ``qconform-run-*/pytest.ini``
stayed in the temporary folder for good.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from qconform.cli.group import cli
from qconform.generators.corpus import default_vectors_dir
from qconform.generators.validation import load_index
from robustness.processes import REPO, qconform, tree_shim, wait_until_asked

RNG_ABI = sorted(cid for cid in load_index(default_vectors_dir())["cases"] if cid.startswith("rng_abi/"))


@pytest.mark.parametrize("mode", ["raise", "nan"])
def test_a_faulty_adapter_runs_and_fails_the_cases_it_breaks(mode):
    result = CliRunner().invoke(cli, ["run", "--adapter", f"faulty:{mode}", "--family", "rng_abi"])
    assert result.exit_code == 1, result.output
    assert "unknown family" not in result.output
    assert " error;" in result.output and " pass," in result.output, result.output[-2000:]


def test_pytest_collect_only_lists_each_case_once_and_claims_nothing(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"]
        + ["--qconform-adapter=reference", "--qconform-family", "rng_abi"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    listed = [line.removeprefix("::") for line in done.stdout.splitlines() if "rng_abi/" in line]
    assert sorted(listed) == RNG_ABI
    assert "NO CASES" not in done.stdout and "judged" not in done.stdout, done.stdout[-2000:]
    assert f"{len(RNG_ABI)} tests collected" in done.stdout


def test_the_folder_of_a_run_killed_by_sigkill_is_removed_by_the_next_run(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    pids = tmp_path / "pids"
    env = {**os.environ, "TMPDIR": str(temp)}
    proc = qconform("run", "--adapter", tree_shim(pids, "hang"), "--family", "rng_abi", cwd=tmp_path, env=env)
    wait_until_asked(pids, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    (left,) = temp.glob("qconform-run-*")
    assert (left / "pytest.ini").exists()
    listed = qconform("run", "--adapter", "reference", "--family", "rng_abi", "--list", cwd=tmp_path, env=env)
    out, err = listed.communicate(timeout=300)
    assert listed.returncode == 0, err[-2000:]
    assert list(temp.glob("qconform-run-*")) == []
