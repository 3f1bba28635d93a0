"""SIGINT and SIGTERM as one clean stop: :class:`SignalGuard`.

A module of its own, with nothing but the standard library, so that a command installs its guard
before it starts anything (``qconform accumulate`` starts its adapter first, docs/accumulated.md
"Start-up"), without first importing the run gate's summary and reports (harness/run/gate.py).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


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
            raise KeyboardInterrupt(signal.Signals(signum).name)

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
