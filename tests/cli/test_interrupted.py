"""An interruption that reaches the command group (a command with no guard of its own, or one
interrupted before its guard is installed) ends with one line and 128 + the signal's number, never
click's ``Aborted!`` and 1, the status of a failure (qconform/cli/group.py, ``LazyGroup.invoke``;
docs/harness.md, "Stopping cleanly")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner
from robustness.processes import sent_to_self

from qconform.cli import main
from qconform.cli.group import LazyGroup, cli

pytestmark = pytest.mark.rules()


@pytest.mark.parametrize(
    ("raised", "name"),
    [(KeyboardInterrupt(), "SIGINT"), (KeyboardInterrupt("SIGTERM"), "SIGTERM"), (KeyboardInterrupt("x"), "SIGINT")],
    ids=["python-sigint", "guard-sigterm", "unnamed"],
)
def test_an_interrupted_command_says_so_with_the_signals_status(monkeypatch, raised, name):
    @click.command()
    def interrupted() -> None:
        raise raised

    monkeypatch.setattr(LazyGroup, "get_command", lambda self, ctx, cmd_name: interrupted)
    result = CliRunner().invoke(cli, ["generate"])
    assert result.exit_code == 128 + signal.Signals[name], result.output
    assert result.output.strip().splitlines() == [f"Error: interrupted by {name}"]


def test_a_signal_while_the_kit_starts_is_raised_once_its_imports_are_done(monkeypatch, capsys):
    """``main``'s start guard: a SIGTERM landing in the kit's own start (here, as it arms the
    parent-death signal) is not raised there, and ends the command with one line and 143 before
    anything runs."""
    import qconform.harness.transport.client as client

    survived: list[bool] = []

    def signalled() -> None:
        sent_to_self()
        survived.append(True)

    monkeypatch.setattr(client, "forks_die_with_parent", signalled)
    monkeypatch.setattr(sys, "argv", ["qconform", "generate", "--check"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 128 + signal.SIGTERM
    assert survived == [True]
    assert capsys.readouterr().err.strip() == "Error: interrupted by SIGTERM as it started; nothing done"


#: ``python -m`` this module: a command whose KeyboardInterrupt escapes an ``exec`` of a string (as
#: one does that lands while ``dataclasses`` builds a class during an import), caught by the group
INTERRUPTED_INSIDE_EXEC = """
import click
from qconform.cli import main
from qconform.cli.group import LazyGroup

@click.command()
def interrupted():
    exec("raise KeyboardInterrupt('SIGTERM')")

LazyGroup.get_command = lambda self, ctx, name: interrupted
main()
"""


def test_an_interrupt_that_escaped_an_exec_still_ends_with_its_status(tmp_path):
    """CPython would end the process by SIGINT at exit (-2) though the interrupt was caught
    (``forget_escaped_interrupt``, harness/run/signals.py); ``main`` keeps the command's 143. Run as
    ``python -m``, as ``qconform`` runs."""
    (tmp_path / "interrupted_inside_exec.py").write_text(INTERRUPTED_INSIDE_EXEC)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "interrupted_inside_exec", "generate"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert done.stderr.strip() == "Error: interrupted by SIGTERM"
