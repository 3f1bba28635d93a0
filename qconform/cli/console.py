"""The consoles commands print to: a wide stdout table console, and progress bars on stderr (over
families, or over units of work with the time left) that only a terminal shows."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from rich.console import Console


@contextlib.contextmanager
def family_progress(total: int, verb: str) -> Iterator[Callable[[str], None]]:
    """A rich progress bar over families on stderr (hidden when stderr is not a terminal)."""
    from rich.progress import Progress

    console = Console(stderr=True)
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task(verb, total=total)

        def advance(name: str) -> None:
            progress.update(task, advance=1, description=f"{verb} {name}")

        yield advance


@contextlib.contextmanager
def rounds_progress(total: int, verb: str, unit: str = "rounds") -> Iterator[Callable[[int], None]]:
    """A rich progress bar over ``total`` units of work on stderr, with the elapsed time and an
    estimate of the time left; hidden when stderr is not a terminal (a pipe, a CI log)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task(verb, total=total)
        yield lambda done: progress.update(task, advance=done)


def wide_console() -> Console:
    """A stdout console; 132 columns when stdout is not a terminal (pipes, CI logs)."""
    console = Console()
    if not console.is_terminal:
        console.width = 132
    return console
