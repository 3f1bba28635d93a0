"""SIGINT and SIGTERM as one clean stop: :class:`SignalGuard`.

A module of its own, with nothing but the standard library, so that a command installs its guard
before it starts anything (``qconform accumulate`` starts its adapter first, docs/accumulated.md
"Start-up"), without first importing the run gate's summary and reports (harness/run/gate.py).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


def interrupted_exit(signum: int) -> int:
    """The status of a command a signal stopped: 128 + its number, as a shell reports it
    (docs/harness.md, "Exit codes")."""
    return 128 + signum


class SignalGuard:
    """While installed (main thread only), SIGINT and SIGTERM raise KeyboardInterrupt and are remembered.

    pytest handles the KeyboardInterrupt as an interruption: the session still
    finishes, so the partial report is written and the adapter is stopped.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self._deferring = 0

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            if not self._deferring:
                raise KeyboardInterrupt(self.name)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A signal inside the block is remembered and raised as KeyboardInterrupt when the block
        ends, not where it lands: around imports. CPython 3.11 marks a KeyboardInterrupt that
        escapes an ``exec`` of a string (``dataclasses`` builds its methods so, as a module is
        imported) as unhandled even when a caller catches it, and then ends the process by SIGINT
        at exit instead of with the command's status (seen as exit -2 in place of 130)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if self.signum is not None and not self._deferring:
            raise KeyboardInterrupt(self.name)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def status(self) -> int:
        """The command's status once stopped: :func:`interrupted_exit` of the signal caught (SIGINT's
        when the KeyboardInterrupt came from Python's own handler, before the guard was installed)."""
        return interrupted_exit(self.signum or signal.SIGINT)
