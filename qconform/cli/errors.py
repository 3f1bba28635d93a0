"""How a command reports a user's mistake: one ``Error:`` line and an exit status, never a traceback.

:class:`UsageLineError` is a bad argument (exit status 2, without click's usage
banner); :func:`user_errors` turns the pipeline's typed errors (unreadable or
malformed corpus files, unwritable output) into one line with exit status 1.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import click

__all__ = ["UsageLineError", "user_errors"]


class UsageLineError(click.ClickException):
    """A one-line usage mistake (exit status 2, without click's usage banner)."""

    exit_code = 2


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn the pipeline's typed errors into one-line click errors (exit status 1)."""
    from qconform.generators.corpus import CorpusError, OutputError
    from qconform.generators.validation import VectorFileError

    try:
        yield
    except (VectorFileError, OutputError) as exc:
        raise click.ClickException(str(exc)) from None
    except CorpusError as exc:
        lines = "\n".join(f"  {p}" for p in exc.problems)
        raise click.ClickException(f"generated vectors fail their own checks (generator bug):\n{lines}") from None
