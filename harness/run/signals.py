"""SIGINT and SIGTERM as one clean stop: :class:`SignalGuard`.

A module of its own, with nothing but the standard library: a command installs its guard without
importing the run gate's summary and reports (harness/run/gate.py).
"""

from __future__ import annotations

import signal
import threading
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

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
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
