"""The test run ends without a wall of warnings (issue #22, rough edge 10).

The wall was nanobind's ``leaked ... instances``, ``leaked ... types`` and ``leaked ... functions``
from Triton at the exit of every test process that had imported Triton and then ran ``qconform
run`` in-process: the plugin froze the heap at collection (``gc.freeze()``, so that full
collections skip the cases) and never unfroze it, and the permanent generation is not collected
at interpreter exit, so Triton's types and their cycles outlived its module. The plugin now
unfreezes what it froze when pytest unconfigures it.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from qconform.cli.group import cli
from robustness.processes import REPO

ONE_CASE = ["run", "--adapter", "reference", "--family", "rng_abi", "--case", "rng_abi/philox_kat/zeros"]


def test_an_in_process_run_leaves_nothing_frozen():
    gc.unfreeze()  # whatever an earlier test left: this run's own freeze is what is measured
    result = CliRunner().invoke(cli, ONE_CASE)
    assert result.exit_code == 0, result.output
    assert gc.get_freeze_count() == 0


def test_a_test_process_with_triton_exits_without_nanobind_leak_reports(tmp_path):
    """A pytest session that imports Triton (in its interpreter, as the suite does) and runs
    ``qconform run`` in-process, as many of the suite's tests do: nothing about leaks at exit."""
    pytest.importorskip("triton")
    (tmp_path / "test_triton_then_run.py").write_text(
        textwrap.dedent(f"""
            import os
            os.environ.setdefault("TRITON_INTERPRET", "1")
            import triton  # noqa: F401
            from click.testing import CliRunner
            from qconform.cli.group import cli

            def test_run_in_process():
                result = CliRunner().invoke(cli, {ONE_CASE!r})
                assert result.exit_code == 0, result.output
        """)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "1 passed" in done.stdout
    assert "nanobind" not in output, output[-3000:]
