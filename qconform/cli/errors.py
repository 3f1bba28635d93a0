"""How a command reports a mistake or a fault of its environment: one ``Error:`` line and the
exit status of its cause, never a traceback.

The statuses are the one table of every command, :class:`qconform.harness.run.gate.RunExit`
(docs/harness.md, "Exit codes"): :class:`UsageLineError` is a bad argument (2, without
click's usage banner); :class:`StartLineError` is something the command needs that cannot
start here (3: an adapter, an endpoint's listening socket, an optional dependency that is not
installed, a device the machine or the adapter lacks); :class:`WriteLineError` is an output
that cannot be written (4). :func:`user_errors` turns the pipeline's typed errors into one
line, and :func:`environment_errors`, around every command (qconform.cli.main), turns what
still escapes (an ``OSError``, a missing optional module) into its row's line and status.
"""

from __future__ import annotations

import contextlib
import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, NoReturn

import click

if TYPE_CHECKING:
    from qconform.harness.run.signals import SignalGuard

__all__ = [
    "UsageLineError",
    "StartLineError",
    "WriteLineError",
    "user_errors",
    "environment_errors",
    "missing_dependency",
    "os_error",
    "write_output",
]

#: the optional modules a command may need, and the extra of pyproject.toml that installs each
OPTIONAL_MODULES = {"torch": "torch", "triton": "triton", "matplotlib": "stat", "atheris": "fuzz"}
#: errno values that mean "this output cannot be written here"
WRITE_ERRNOS = frozenset(
    {errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.ENOTDIR, errno.EISDIR}
)
#: errno values of a socket that cannot listen
LISTEN_ERRNOS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL})


class UsageLineError(click.ClickException):
    """A one-line usage mistake (exit status 2, without click's usage banner)."""

    exit_code = 2


class StartLineError(click.ClickException):
    """Something the command needs cannot start here: an adapter, a listening socket, an optional
    dependency, a device (exit status 3)."""

    exit_code = 3


class WriteLineError(click.ClickException):
    """An output cannot be written: permission denied, a file in the way, a full disk (exit status 4)."""

    exit_code = 4


def command_guard() -> SignalGuard:
    """SIGINT and SIGTERM for the rest of the running command: a guard raising at checkpoints (and
    inside its ``interrupting`` blocks, harness/run/signals.py), installed now and restored as
    click closes the command's context (docs/harness.md, "Stopping cleanly")."""
    from qconform.harness.run.signals import SignalGuard

    guard = SignalGuard(at_checkpoints=True)
    guard.install()
    click.get_current_context().call_on_close(guard.restore)
    return guard


def interrupted_by(name: str, when: str = "") -> NoReturn:
    """End a command that the signal ``name`` stopped before it had a partial report to give: one
    ``Error:`` line, saying ``when`` if given, and 128 + the signal's number (docs/harness.md, "Exit
    codes"; click's own answer, ``Aborted!`` and 1, is a failure's status)."""
    import signal

    from qconform.harness.run.signals import interrupted_exit

    click.echo(f"Error: interrupted by {name}" + (f" {when}" if when else ""), err=True)
    raise SystemExit(interrupted_exit(signal.Signals[name]))


def interrupted_line(guard: SignalGuard, when: str) -> NoReturn:
    """:func:`interrupted_by` the signal ``guard`` caught (SIGINT's, when the KeyboardInterrupt came
    from Python's own handler)."""
    interrupted_by(guard.name or "SIGINT", when)


def broken_optional_module(exc: ImportError) -> str:
    """The optional module whose own import code raised ``exc`` ("" if none did): an install that
    is there but cannot be imported (a missing shared library, a build for another CUDA) raises an
    ImportError that names no module, from inside that module's ``<module>`` code."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        root = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if frame.f_code.co_name == "<module>" and root in OPTIONAL_MODULES:
            return root
        tb = tb.tb_next
    return ""


def missing_dependency(exc: ImportError) -> StartLineError | None:
    """The line of an optional dependency that is not installed, or is installed but cannot be
    imported; None for any other import error."""
    root = (exc.name or "").split(".")[0]
    if root in OPTIONAL_MODULES:
        return StartLineError(
            f"this command needs {root}, which is not installed: pip install 'qconform[{OPTIONAL_MODULES[root]}]'"
        )
    root = broken_optional_module(exc)
    if not root:
        return None
    return StartLineError(
        f"this command needs {root}, which is installed but cannot be imported ({type(exc).__name__}: {exc}): "
        f"reinstall it, pip install --force-reinstall 'qconform[{OPTIONAL_MODULES[root]}]'"
    )


def os_error(exc: OSError) -> click.ClickException:
    """The one line, and row, of an operating-system error that reached the command line."""
    from qconform.generators.atomic_file import WriteError

    if isinstance(exc, WriteError):
        return WriteLineError(f"{exc}; choose another path, or free or fix the one given")
    where = f" {exc.filename}" if exc.filename else ""
    reason = exc.strerror or str(exc)
    if exc.errno in LISTEN_ERRNOS:
        return StartLineError(f"cannot listen{where}: {reason}; choose another --port, or stop what holds it")
    if exc.errno in WRITE_ERRNOS:
        return WriteLineError(f"cannot write{where}: {reason}; choose another path, or free or fix the one given")
    return StartLineError(f"the system refused{where}: {reason}")


def write_output(path: Path | str, text: str) -> None:
    """Write a command's output file (``--vector-out``, ``--json``) whole or not at all; a path
    that cannot take it is its :class:`WriteLineError` line (exit status 4)."""
    from qconform.generators import atomic_file

    try:
        atomic_file.write_text(path, text)
    except atomic_file.WriteError as exc:
        raise os_error(exc) from None


@contextlib.contextmanager
def environment_errors() -> Iterator[None]:
    """Around a whole command: an ``OSError`` or a missing optional module that no layer below
    named is still one line with its row's status (docs/harness.md, "Exit codes")."""
    try:
        yield
    except ImportError as exc:
        line = missing_dependency(exc)
        if line is None:
            raise
        line.show()
        sys.exit(line.exit_code)
    except OSError as exc:
        line = os_error(exc)
        line.show()
        sys.exit(line.exit_code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn the pipeline's typed errors into their one-line click errors: an unwritable output is a
    write error (4); a malformed committed file, or vectors that fail their own checks, fail the
    check that read them (1)."""
    from qconform.generators.corpus import CorpusError, OutputError
    from qconform.generators.validation import VectorFileError

    try:
        yield
    except VectorFileError as exc:
        raise click.ClickException(str(exc)) from None
    except OutputError as exc:
        raise WriteLineError(str(exc)) from None
    except CorpusError as exc:
        lines = "\n".join(f"  {p}" for p in exc.problems)
        raise click.ClickException(f"generated vectors fail their own checks (generator bug):\n{lines}") from None
