"""The `qconform` command line: :func:`main`, the entry point (``qconform`` and ``python -m
qconform``), and one module per command under ``qconform.cli``, gathered by the click group of
:mod:`qconform.cli.group`.

This module imports nothing but the standard library before :func:`main` has installed its
start guard: until then a signal would be raised inside an import, as a traceback
(docs/harness.md, "Stopping cleanly").
"""

from __future__ import annotations


def main() -> None:
    from qconform.harness.run.signals import SignalGuard, forget_escaped_interrupt

    # the kit's own start (its imports, about 0.1 s) raises a signal only at its end, never inside an
    # import (harness/run/signals.py); from there on, LazyGroup.invoke and each command's guard
    starting = SignalGuard(at_checkpoints=True)
    starting.install()
    try:
        from qconform.cli.errors import environment_errors, interrupted_line
        from qconform.cli.group import cli
        from qconform.harness.transport.client import forks_die_with_parent

        forks_die_with_parent()  # a command's forked workers never outlive it (docs/harness.md, "Stopping cleanly")
    finally:
        starting.restore()
    try:
        if starting.signum is not None:
            interrupted_line(starting, "as it started; nothing done")
        with environment_errors():  # an OS error or a missing optional module: one line and its status
            cli()
    finally:
        forget_escaped_interrupt()  # an interrupted command ends with its own status (130, 143)
