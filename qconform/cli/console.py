"""The consoles commands print to: a wide stdout table console and a progress bar on stderr."""

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


def wide_console() -> Console:
    """A stdout console; 132 columns when stdout is not a terminal (pipes, CI logs)."""
    console = Console()
    if not console.is_terminal:
        console.width = 132
    return console
