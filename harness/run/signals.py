"""SIGINT and SIGTERM as one clean stop: :class:`SignalGuard`.

A module of its own, with nothing but the standard library, so that a command installs its guard
before it starts anything (``qconform accumulate`` starts its adapter first, docs/accumulated.md
"Start-up"), without first importing the run gate's summary and reports (harness/run/gate.py).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Generic, TypeVar

T = TypeVar("T")

#: how often a wait on a thread (:class:`OnThread`) looks for a signal its guard remembered, in seconds
CHECKPOINT_S = 0.05


def interrupted_exit(signum: int) -> int:
    """The status of a command a signal stopped: 128 + its number, as a shell reports it
    (docs/harness.md, "Exit codes")."""
    return 128 + signum


def forget_escaped_interrupt() -> None:
    """Let the process end with the status it chose after a KeyboardInterrupt was caught.

    CPython (3.11 at least) remembers a KeyboardInterrupt that escaped an ``exec`` of a string
    (``dataclasses`` builds a class's methods so, while a module is imported) as unhandled even
    when a caller caught it, and then ends a ``python -m`` process by SIGINT at exit instead of
    with its status (-2, not 130). It forgets it at the start of the next ``exec`` of a string;
    this is one, of nothing. A KeyboardInterrupt that really goes unhandled is remembered again
    by the interpreter's own main, after this."""
    exec("None")  # noqa: S102 - a constant string: the exec is the point (above)


class SignalGuard:
    """While installed (main thread only), SIGINT and SIGTERM are remembered, and stop the command
    as one KeyboardInterrupt (docs/harness.md, "Stopping cleanly"). Where it is raised depends on
    the guard:

    - ``SignalGuard()`` raises it where the signal lands. pytest handles it as an interruption:
      the session still finishes, so the partial report is written and the adapter is stopped.
    - ``SignalGuard(at_checkpoints=True)`` raises it only at :meth:`checkpoint`, or inside
      :meth:`interrupting`. A command's start-up runs so: its steps import modules, where a
      KeyboardInterrupt can escape an ``exec`` of a string (:func:`forget_escaped_interrupt`), and
      no signal can land in the few lines between two handlers.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, at_checkpoints: bool = False) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self._interrupting = 0 if at_checkpoints else 1

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            if self._interrupting and (frame is None or frame.f_code is not _LEAVING):
                raise KeyboardInterrupt(self.name)

    def checkpoint(self) -> None:
        """Raise the KeyboardInterrupt of a signal remembered since the guard was installed, if any."""
        if self.signum is not None:
            raise KeyboardInterrupt(self.name)

    def interrupting(self) -> Interrupting:
        """A block inside which a signal interrupts where it lands (the run itself: a request that
        never returns is interrupted); one remembered before the block is raised as it begins."""
        return Interrupting(self)

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


class Interrupting:
    """:meth:`SignalGuard.interrupting`. A class, not a generator: a signal handled as the block is
    left (in :meth:`__exit__`, whose code the guard recognizes) is remembered, not raised after the
    block's work is done."""

    def __init__(self, guard: SignalGuard) -> None:
        self.guard = guard

    def __enter__(self) -> None:
        self.guard.checkpoint()
        self.guard._interrupting += 1  # noqa: SLF001 - the guard's own block

    def __exit__(self, *exc_info: object) -> None:
        self.guard._interrupting -= 1  # noqa: SLF001 - the guard's own block


#: the code a signal may land in as an :class:`Interrupting` block is left
_LEAVING = Interrupting.__exit__.__code__


class OnThread(Generic[T]):
    """``work`` on a daemon thread of its own, begun at once; :meth:`result` waits for it where a
    signal can stop the wait.

    Why: some waits block in C code that a signal does not interrupt (torch's rendezvous and
    collectives, docs/distributed.md; an adapter's start, which the command prepares beside). The
    main thread waits for them in Python instead, a slice at a time, so SIGINT or SIGTERM stops the
    command where it waits (docs/harness.md, "Stopping cleanly"). A wait that is stopped leaves its
    thread behind, to end with the process (a daemon thread never holds the process open)."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], T]) -> None:
        try:
            self._value = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits, in result()
            self._error = exc

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def result(self, guard: SignalGuard | None = None) -> T:
        """``work``'s value, or what it raised, once it has returned. While it runs, a signal that
        ``guard`` remembered is raised every :data:`CHECKPOINT_S` seconds
        (:meth:`SignalGuard.checkpoint`); inside :meth:`SignalGuard.interrupting` a signal is raised
        where it lands, in the wait."""
        while self._thread.is_alive():
            self._thread.join(CHECKPOINT_S)
            if guard is not None:
                guard.checkpoint()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value] - work returned: its value, None included
