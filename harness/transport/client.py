"""Drive an implementation under test through the shim protocol, robustly.

:func:`open_adapter` starts the adapter as a child process (a registered adapter
through ``python -m qconform.harness.transport.host``, or any ``shim:<command line>``) and
returns an :class:`AdapterClient`. Whatever the child does (crash, hang,
``os._exit``, a signal, garbage on stdout, a wrong reply) becomes an
:class:`AdapterError` for the cases in flight; the child is then restarted for the
next request. Only a child that cannot start, or whose ``get_config`` fails,
raises :class:`AdapterStartError`.
"""

from __future__ import annotations

import os
import queue
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from qconform.harness.adapter import AdapterConfig, AdapterError, AdapterStartError, Outcome, Unimplemented
from qconform.harness.transport.arena import BlobArena, anonymous_file
from qconform.harness.transport.shim_protocol import (
    BINARY_PAYLOAD,
    JSON_PAYLOAD,
    PAYLOADS,
    PIPELINE_DEPTH,
    ProtocolError,
    binary_parts,
    check_output,
    check_sample_output,
    decode_line,
    encode_message,
    entry_to_outcome,
    join_sections,
    parse_arena,
    parse_config,
    parse_payload,
    parse_pipeline,
    quote,
    section_sizes,
)
from qconform.harness.transport.window import BlockWindow, WindowError, window_range

__all__ = ["AdapterClient", "AdapterStartError", "PendingReply", "open_adapter", "host_command"]

SHIM_PREFIX = "shim:"
#: Prefix of a network endpoint under test, ``tcp://HOST:PORT`` (docs/endpoint.md): not a
#: registered name but a URL, served by :class:`qconform.harness.transport.tcp_adapter.TcpAdapter`.
TCP_PREFIX = "tcp://"
#: bytes of the child's stderr kept for diagnostics, and how much a message quotes
STDERR_KEEP = 64 * 1024
STDERR_QUOTE = 1500
#: seconds a child gets to exit after EOF on stdout, or after ``shutdown``
EXIT_GRACE_S = 5.0
_EOF = object()


#: seconds one request may take, unless the caller says otherwise (``--timeout``)
TIMEOUT_S = 60.0
#: the least time a start (the answer to ``get_config``) is given, unless the caller says
#: otherwise (``--start-timeout``): a short batch timeout must not cut an import of torch
START_TIMEOUT_S = 60.0
#: what a start that timed out had not done, in its message
START_WAIT = " waiting for the answer to get_config (a slow start: --start-timeout S)"


class ChildFailure(Exception):
    """The child misbehaved during one request; the text becomes the cases' AdapterError."""


@dataclass
class InFlight:
    """A request written to the child whose reply is not read yet (docs/shim-protocol.md, "Pipelined
    requests"). ``finish`` turns its reply, or the :class:`ChildFailure` that ended it, into the
    caller's result, as the reply is read, by whichever caller reads it; ``span``: the window bytes
    its block and answer range hold until then."""

    request_id: int
    timeout_s: float
    sent_at: float
    finish: Callable[[Any], Any]
    waiting_for: str = ""
    raw_blobs: bool | None = None
    span: tuple[int, int] | None = None
    done: bool = False
    result: Any = None


class PendingReply:
    """The reply to a request sent ahead (:meth:`AdapterClient.send_block`): :meth:`result` waits for
    it, reading first the replies of the requests sent before it, in order."""

    def __init__(self, client: AdapterClient | None, entry: InFlight) -> None:
        self._client, self._entry = client, entry

    @classmethod
    def ready(cls, result: Any) -> PendingReply:
        """A result known without a request (a family not declared, a block that could not be sent)."""
        return cls(None, InFlight(0, 0.0, 0.0, lambda reply: reply, done=True, result=result))

    def result(self) -> Any:
        entry, client = self._entry, self._client
        if not entry.done and client is not None:
            with client._lock:
                client._await(entry)
        return entry.result


def host_command(name: str, device: str) -> list[str]:
    """The command that serves the registered adapter ``name`` over the protocol."""
    return [sys.executable, "-m", "qconform.harness.transport.host", "--adapter", name, "--device", device]


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "closed its stdout but is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with status {returncode}"


def _kill_group(proc: subprocess.Popen, kept: bool = False) -> None:
    """End the child and everything it started. A ``kept`` child is the keeper of its tree
    (harness/transport/subreaper.py): SIGTERM makes it SIGKILL every descendant, then exit;
    otherwise, or if the keeper does not end in time, SIGKILL the child's whole process group
    (the child leads its own session)."""
    if proc.poll() is None and kept:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=EXIT_GRACE_S)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        pass


#: the keeper of an adapter's process tree, run as a script (standard library only)
SUBREAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "subreaper.py")
#: seconds the keeper may take to report that it started the command
KEEPER_START_S = 30.0
#: seconds of a dead child's output still read after it ended, before its end is reported
EXITED_DRAIN_S = 0.3
#: how often a wait for a reply checks whether the child is still alive
ALIVE_POLL_S = 0.1


def kept_command(command: Sequence[str], status_fd: int) -> list[str]:
    """``command`` run under the keeper of its process tree, which writes its pid to ``status_fd``."""
    return [sys.executable, "-S", SUBREAPER, str(status_fd), "--", *command]


#: prctl(2) option that delivers a signal to a process when its parent dies (Linux)
PR_SET_PDEATHSIG = 1


#: bytes a pipe to or from a child holds (Linux ``F_SETPIPE_SZ``; the unprivileged maximum by
#: default): a reply of many megabytes of sections crosses in 16 times fewer wake-ups than with 64 KiB
PIPE_BYTES = 1 << 20


def widen_pipe(fd: int) -> None:
    """Let the pipe ``fd`` hold :data:`PIPE_BYTES` where the system allows (else it stays as it is)."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)  # type: ignore[attr-defined]
    except (ImportError, AttributeError, OSError):
        pass


def _write_rest(fd: int, parts: list[memoryview]) -> None:
    """Write ``parts`` in order to the non-blocking ``fd`` as the reader takes them, then close ``fd``
    (a duplicate owned by this thread, so closing the child's stdin meanwhile cannot hand its
    number to another file): the tail of :meth:`Child.send`."""
    try:
        for rest in parts:
            while rest:
                select.select([], [fd], [])
                try:
                    rest = rest[os.write(fd, rest) :]
                except BlockingIOError:
                    continue
    except (OSError, ValueError):
        pass  # the child is gone; the reader sees EOF
    finally:
        os.close(fd)


def _write_after(previous: threading.Thread, fd: int, parts: list[memoryview]) -> None:
    """:func:`_write_rest` once ``previous`` (the writer of the request before) has written all of its
    request: a request sent while another is in flight never writes between that one's bytes."""
    previous.join()
    _write_rest(fd, parts)


def parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when this process dies (Linux), so a
    harness killed by SIGKILL or SIGTERM leaves no orphaned adapter; None elsewhere.

    The signal follows the thread that started the child, which is why children are
    started from the thread that drives them (the plugin's main thread).
    """
    if _prctl() is None:
        return None
    parent = os.getpid()
    return lambda: die_with_parent(parent)


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(parent: int | None = None) -> None:
    """Make this process get SIGKILL when its parent dies (Linux ``PR_SET_PDEATHSIG``; nothing
    elsewhere); exit at once if ``parent`` (the pid it was started by) is already gone. For a
    process the harness did not start with a ``preexec_fn``: an xdist worker, a forked worker."""
    prctl = _prctl()
    if prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


_forking_pid = os.getpid()


def _remember_forking_pid() -> None:
    global _forking_pid
    _forking_pid = os.getpid()


def forks_die_with_parent() -> None:
    """From now on every process this one forks (multiprocessing and process-pool workers) gets
    SIGKILL when this process dies, however it dies (``kill -9`` included), so no worker of a
    command outlives it; the adapter keepers of such a worker then end their trees."""
    if _prctl() is not None:
        os.register_at_fork(before=_remember_forking_pid, after_in_child=lambda: die_with_parent(_forking_pid))


def quoted(stderr: bytes, limit: int) -> str:
    """Stderr bytes as a message quotes them: decoded, stripped, their last ``limit`` characters."""
    text = stderr.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


class Child:
    """One running child: a reader thread per output pipe, a bounded stderr tail."""

    def __init__(self, command: Sequence[str], pass_fds: Sequence[int] = ()) -> None:
        #: on Linux the command runs under the keeper of its process tree (subreaper.py), which
        #: ends every process the command starts when the command ends or is stopped
        self.kept = sys.platform.startswith("linux")
        status_r, status_w = os.pipe() if self.kept else (-1, -1)
        launched = kept_command(self._started(command, pass_fds), status_w) if self.kept else list(command)
        try:
            self.proc = subprocess.Popen(
                launched,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=None if self.kept else parent_death_signal(),
                pass_fds=(*pass_fds, status_w) if self.kept else tuple(pass_fds),
            )
        except OSError as exc:
            if self.kept:
                os.close(status_r)
                os.close(status_w)
            raise AdapterStartError(f"cannot run {shlex.join(command)}: {exc}") from None
        #: the pid of the command itself (the keeper's child), for diagnostics and tests; for an adapter
        #: the zygote forks, its stub's, which stands for it (killing it kills the adapter)
        self.pid = self.proc.pid
        if self.kept:
            os.close(status_w)
            self.pid = self._command_pid(status_r, command)
        #: requests are written without blocking; what the pipe does not take at once is left
        #: to a thread (:meth:`send`), so a child that stops reading cannot block us
        assert self.proc.stdin is not None and self.proc.stdout is not None  # stdin=PIPE, stdout=PIPE
        self.stdin = self.proc.stdin
        os.set_blocking(self.stdin.fileno(), False)
        widen_pipe(self.stdin.fileno())
        widen_pipe(self.proc.stdout.fileno())
        self.lines: queue.Queue = queue.Queue()
        #: binary payloads negotiated (docs/shim-protocol.md): a reply line announcing
        #: ``sections`` is followed by their bytes, which the reader takes with it
        self.binary = False
        #: the shared arena, once the child attached it ("Shared arena"): requests name its ranges
        self.arena: BlobArena | None = None
        #: the block window, once the child attached it ("Block window"): blocks travel through it
        self.window: BlockWindow | None = None
        #: the most requests in flight at once the child took ("Pipelined requests"); 1 until it says more
        self.depth = 1
        #: the thread writing the rest of the last request the pipe did not take at once, if any
        self._writer: threading.Thread | None = None
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        #: every byte read from the child's stderr so far (marks count from it: :meth:`stderr_since`)
        self._stderr_total = 0
        #: the stderr pipe, read without blocking and only with the lock held, None once it ended
        self._stderr_fd: int | None = self.proc.stderr.fileno() if self.proc.stderr is not None else None
        if self._stderr_fd is not None:
            os.set_blocking(self._stderr_fd, False)
        self._stderr_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        self._finalizer = weakref.finalize(self, _kill_group, self.proc, self.kept)

    @staticmethod
    def _started(command: Sequence[str], pass_fds: Sequence[int]) -> list[str]:
        """What the keeper runs for ``command``: the command itself, or, where this command's adapter
        zygote serves it, the stub that has the zygote fork it (harness/transport/zygote.py; the stub
        runs the command itself whenever the zygote does not)."""
        from qconform.harness.transport.zygote import stub_command, zygote_for

        name = zygote_for(command)
        return list(command) if name is None else stub_command(name, command, pass_fds)

    def _command_pid(self, status_r: int, command: Sequence[str]) -> int:
        """The pid the keeper reports for the command it started; AdapterStartError when it could not."""
        try:
            ready, _, _ = select.select([status_r], [], [], KEEPER_START_S)
            text = os.read(status_r, 4096).decode("utf-8", "replace").strip() if ready else ""
        finally:
            os.close(status_r)
        if text.isdigit():
            return int(text)
        _kill_group(self.proc, kept=True)
        why = text[1:] if text.startswith("!") else f"its process keeper failed ({describe_exit(self.proc.poll())})"
        raise AdapterStartError(f"cannot run {shlex.join(command)}: {why}")

    def _read_stdout(self) -> None:
        try:
            for line in self.proc.stdout:
                self.lines.put(self._with_sections(line) if self.binary else line)
        except (OSError, ValueError):
            pass
        self.lines.put(_EOF)
        self.proc.stdout.close()

    def _read_stderr(self) -> None:
        """Keep the child's stderr as it comes: wait until the pipe holds something, then read it out
        with the lock held (:meth:`_take_stderr`), until its end of file."""
        fd = self._stderr_fd
        try:
            waiting = select.poll()  # not select(): no limit on the descriptor's number
            if fd is not None:
                waiting.register(fd, select.POLLIN)
            while fd is not None:
                waiting.poll()
                with self._stderr_lock:
                    self._take_stderr()
                    fd = self._stderr_fd
        except (OSError, ValueError):
            with self._stderr_lock:
                self._stderr_fd = None
        self.proc.stderr.close()

    def _take_stderr(self) -> None:
        """Read what the stderr pipe holds now into the kept tail (the lock held: reads happen only
        so, so that :meth:`stderr_since` can read the pipe out itself); at its end of file the pipe
        is let go (``_stderr_fd`` None; the reader thread closes it)."""
        for _ in range(STDERR_KEEP // 65536 + 1):  # a child that writes on and on cannot hold us here
            if self._stderr_fd is None:
                return
            try:
                chunk = os.read(self._stderr_fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                self._stderr_fd = None
                return
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            self._stderr_total += len(chunk)
            while self._stderr_size - len(self._stderr[0]) >= STDERR_KEEP:
                self._stderr_size -= len(self._stderr.popleft())

    def stderr_mark(self) -> int:
        """Where the child's stderr is now, for :meth:`stderr_since`."""
        with self._stderr_lock:
            return self._stderr_total

    def stderr_since(self, mark: int, limit: int = STDERR_QUOTE) -> str:
        """What the child wrote to stderr after ``mark`` (as far as the kept 64 KiB still hold it),
        its last ``limit`` characters, "" if nothing. The pipe is read out first, so everything the
        child wrote before the reply just read is in (docs/shim-protocol.md, "Errors")."""
        with self._stderr_lock:
            self._take_stderr()
            new = self._stderr_total - mark
            data = b"".join(self._stderr)[-new:] if new > 0 else b""
        return quoted(data, limit)

    def _with_sections(self, line: bytes) -> Any:
        """A binary reply read whole, as ``(decoded message, section bytes or None, line)``: None for a
        line that announces no sections (decoded once, here, not again by the caller); a line that
        does not decode, or whose ``sections`` are malformed, is passed on as it came (the caller
        names the fault)."""
        try:
            message = decode_line(line)
            sizes = section_sizes(message)
        except ProtocolError:
            return line
        stdout = self.proc.stdout
        if not sizes or stdout is None:
            return (message, None, line)
        data = stdout.read(sum(sizes))
        return (message, data, line)

    def stderr_tail(self, limit: int = STDERR_QUOTE) -> str:
        with self._stderr_lock:
            data = b"".join(self._stderr)
        return quoted(data, limit)

    def send(self, data: bytes | Sequence[bytes | memoryview]) -> None:
        """Write ``data`` (bytes, or parts written one after the other: a binary message's line and
        its sections, never joined into one copy) without blocking: what the pipe takes now at
        once (a whole request, in the usual case), the rest on a thread, so a child that stops
        reading cannot block us. The parts must not change until the child has read them. While the
        rest of the request before is still being written (a request sent with one in flight:
        docs/shim-protocol.md, "Pipelined requests"), this one is written after it, on a thread."""
        parts = [memoryview(part).cast("B") for part in ([data] if isinstance(data, bytes) else data)]
        try:
            fd = self.stdin.fileno()
            previous = self._writer
            if previous is not None and previous.is_alive():
                self._writer = threading.Thread(target=_write_after, args=(previous, os.dup(fd), parts), daemon=True)
                self._writer.start()
                return
            while parts:
                try:
                    sent = os.write(fd, parts[0])
                except BlockingIOError:
                    sent = 0
                if sent < len(parts[0]):
                    parts[0] = parts[0][sent:]
                    self._writer = threading.Thread(target=_write_rest, args=(os.dup(fd), parts), daemon=True)
                    self._writer.start()
                    break
                parts.pop(0)
        except (OSError, ValueError):
            pass  # the child is gone; the reader sees EOF

    def read_line(self, deadline: float) -> Any:
        """The next stdout line, ``_EOF``, or None when ``deadline`` passes first.

        The child's pid is watched, not only its stdout: a child that ended is ``_EOF`` once its
        last output has been read (:data:`EXITED_DRAIN_S`), even while a process it started
        still holds the pipe, so a crash is reported as one at once, never as a timeout."""
        ended_at: float | None = None
        while True:
            now = time.monotonic()
            try:
                return self.lines.get(timeout=max(0.0, min(deadline - now, ALIVE_POLL_S)))
            except queue.Empty:
                pass
            now = time.monotonic()
            if now >= deadline:
                return None
            if self.proc.poll() is not None:
                ended_at = now if ended_at is None else ended_at
                if now - ended_at >= EXITED_DRAIN_S:
                    return _EOF

    def exit_status(self) -> str:
        try:
            self.proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        return describe_exit(self.proc.poll())

    def failure(self, what: str) -> str:
        """``what``, with the tail of the child's stderr for diagnosis."""
        if self.proc.poll() is not None:
            self._threads[1].join(timeout=EXITED_DRAIN_S)  # let the last stderr bytes arrive
        tail = self.stderr_tail()
        return f"{what}; stderr: {tail}" if tail else f"{what}; stderr was empty"

    def kill(self) -> None:
        """Kill the child's process group. The reader threads close stdout/stderr
        themselves at EOF (closing them here could block on a pending read)."""
        _kill_group(self.proc, self.kept)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self._finalizer.detach()

    def close(self, shutdown_line: bytes) -> None:
        """Ask the child to shut down (request, then EOF), wait a grace period, kill the rest."""
        self.send(shutdown_line)
        try:
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


class AdapterClient:
    """A running adapter, driven over the shim protocol.

    ``config`` is the validated answer of the first ``get_config``. ``restarts``
    counts how often the child was replaced after a failure.
    """

    def __init__(
        self,
        spec: str,
        command: Sequence[str],
        device: str = "cpu",
        timeout_s: float = TIMEOUT_S,
        strict_schema: bool = False,
        binary_payload: bool = True,
        raw_blobs: bool = False,
        arena: BlobArena | None = None,
        start_timeout_s: float | None = None,
        block_window: bool = True,
        pipeline: bool = True,
        spawned: Callable[[Child], None] | None = None,
        early: EarlyStart | None = None,
    ) -> None:
        self.spec = spec
        #: told of each child as it is spawned, before its ``get_config`` is answered: a caller on
        #: another thread may kill a start that is under way (:meth:`Child.kill`; the start then
        #: fails with AdapterStartError), as ``qconform.cli.arguments.OpeningAdapter.close`` does
        self.spawned = spawned
        #: the corpus's shared arena, offered to every child that takes binary payloads
        self.arena = arena if binary_payload else None
        #: the child spawned before this client (:func:`spawn_early`) with the arena's descriptor it was
        #: handed, taken by the first start; the window it was handed is this client's
        self._early: tuple[Child, int] | None = None
        taken = early.take() if early is not None and early.command == list(command) else None
        offers_window = binary_payload and block_window
        window = None
        if taken is not None:
            child, arena_fd, window = taken
            self._early = (child, arena_fd)
            if window is not None and not offers_window:
                window.close()
                window = None
        #: the block window (docs/shim-protocol.md, "Block window"), this client's own, offered to every
        #: child that takes binary payloads: ``run_block``'s arrays travel through it, not the pipe
        self.window = BlockWindow.create() if window is None and offers_window else window
        #: offer binary payloads in ``get_config`` (a child that does not take the offer gets JSON)
        self.binary_payload = binary_payload
        #: hand the blobs of binary replies to the caller in the raw form (docs/adapters.md,
        #: "Raw blobs"), not re-encoded in base64: for a caller that reads both forms (the judge)
        self.raw_blobs = raw_blobs
        #: walk every answer through the family's full JSON Schema (``--strict-schema``)
        self.strict_schema = strict_schema
        self.command = list(command)
        self.device = device
        self.timeout_s = timeout_s
        #: seconds a child may take to answer ``get_config`` (loading an engine), at every start
        #: and restart; when not given, the longer of ``timeout_s`` and START_TIMEOUT_S
        #: (docs/shim-protocol.md, "Starting")
        self.start_timeout_s = max(timeout_s, START_TIMEOUT_S) if start_timeout_s is None else start_timeout_s
        self.restarts = 0
        #: offer pipelined requests in ``get_config`` (docs/shim-protocol.md, "Pipelined requests"): a
        #: child that takes the offer may be sent a request before the previous one is answered
        self.pipeline = pipeline
        #: the most requests that were ever in flight at once on this client (a test's and a benchmark's witness)
        self.most_in_flight = 0
        self._next_id = 1
        #: the channel's lock: every write of a request and read of a reply holds it, so requests go out
        #: and replies are read in one order, whatever thread sends or waits
        self._lock = threading.Lock()
        self._child: Child | None = None
        #: the requests written to the running child whose replies are not read yet, oldest first
        self._in_flight: deque[InFlight] = deque()
        #: when the last reply was read: the next one is due a timeout after it or its own request
        self._answered_at = 0.0
        self.config: AdapterConfig = self._start()
        self._check_device()

    # -- lifecycle --------------------------------------------------------------------

    def _start(self) -> AdapterConfig:
        """Start a child and run ``get_config``; AdapterStartError on any failure."""
        arena = self.arena if self.arena is not None and self.arena.fd >= 0 else None
        window = self.window if self.window is not None and self.window.fd >= 0 else None
        early, self._early = self._early, None
        if early is not None:
            # spawned before the arena was filled, with its descriptor reserved (the same number)
            child, arena_fd = early
            if arena is not None and arena.fd != arena_fd:
                arena = None  # built in a file of its own, which the child was not handed
        else:
            child = Child(self.command, tuple(shared.fd for shared in (arena, window) if shared is not None))
        self._child = child
        if self.spawned is not None:
            self.spawned(child)
        try:
            offer = list(PAYLOADS) if self.binary_payload else [JSON_PAYLOAD]
            request: dict[str, Any] = {"op": "get_config", "payload": offer}
            if arena is not None:
                request["arena"] = {"fd": arena.fd, "bytes": arena.size}
            if window is not None:
                request["window"] = {"fd": window.fd}
            if self.pipeline:
                request["pipeline"] = PIPELINE_DEPTH
            reply = self._exchange(request, self.start_timeout_s, START_WAIT)
        except ChildFailure as exc:
            raise AdapterStartError(f"adapter {self.spec!r} did not start: {exc}") from None
        try:
            if reply.get("status") != "ok":
                detail = reply.get("message", reply.get("reason", ""))
                raise ProtocolError(f"get_config answered status {reply.get('status')!r}: {detail}")
            config = parse_config(reply.get("config"))
        except ProtocolError as exc:
            self._discard(child)
            raise AdapterStartError(f"adapter {self.spec!r} did not start: {child.failure(str(exc))}") from None
        payload = parse_payload(reply["config"])
        if payload not in offer:
            self._discard(child)
            raise AdapterStartError(f"adapter {self.spec!r} did not start: config.payload {payload!r} was not offered")
        child.binary = payload == BINARY_PAYLOAD
        try:
            attached = {key: parse_arena(reply["config"], key) for key in ("arena", "window")}
        except ProtocolError as exc:
            self._discard(child)
            raise AdapterStartError(f"adapter {self.spec!r} did not start: {exc}") from None
        for key, offered in (("arena", arena), ("window", window)):
            if attached[key] and (offered is None or not child.binary):
                self._discard(child)
                why = f"no {key} was offered" if offered is None else 'the payload is not "binary"'
                raise AdapterStartError(f"adapter {self.spec!r} did not start: config.{key} true, but {why}")
        child.arena = arena if attached["arena"] else None
        child.window = window if attached["window"] else None
        depth = parse_pipeline(reply["config"])
        if depth > (PIPELINE_DEPTH if self.pipeline else 1):
            self._discard(child)
            offer = f"{PIPELINE_DEPTH} were offered" if self.pipeline else "none was offered"
            raise AdapterStartError(f"adapter {self.spec!r} did not start: config.pipeline {depth}, but {offer}")
        child.depth = depth
        return config

    @property
    def arena_attached(self) -> bool:
        """Whether the running child attached the shared arena (docs/shim-protocol.md, "Shared arena")."""
        return self._child is not None and self._child.arena is not None

    @property
    def window_attached(self) -> bool:
        """Whether the running child attached the block window (docs/shim-protocol.md, "Block window")."""
        return self._child is not None and self._child.window is not None

    @property
    def depth(self) -> int:
        """The most requests the running child takes in flight at once (docs/shim-protocol.md,
        "Pipelined requests"): 1, one at a time, unless it took the offer."""
        return 1 if self._child is None else self._child.depth

    @property
    def payload(self) -> str:
        """The payload form negotiated with the running child (docs/shim-protocol.md)."""
        return BINARY_PAYLOAD if self._child is not None and self._child.binary else JSON_PAYLOAD

    def _check_device(self) -> None:
        devices = self.config.capabilities.devices
        if self.device.split(":")[0] not in devices:
            self.close()
            raise AdapterStartError(
                f"adapter {self.spec!r} runs on {', '.join(devices)}, not on device {self.device!r}"
            )

    def _discard(self, child: Child) -> None:
        child.kill()
        if self._child is child:
            self._child = None

    def _fail_in_flight(self, what: str, child: Child | None = None) -> None:
        """End every request in flight with ``what`` (the oldest's failure; each later one is named
        as in flight behind it): none is answered, none is sent again."""
        entries = list(self._in_flight)
        self._in_flight.clear()
        for index, entry in enumerate(entries):
            text = what if index == 0 else f"{what} (request {entry.request_id} was in flight behind it)"
            entry.result = entry.finish(ChildFailure(child.failure(text) if child is not None else text))
            entry.done = True

    def abort(self) -> None:
        """Kill the child at once, without the shutdown request and its grace period."""
        child, self._child = self._child, None
        if child is not None:
            child.kill()
        self._fail_in_flight("the run was aborted with the request in flight")

    def close(self) -> None:
        """Shut the child down and close the block window (idempotent). Requests still in flight are
        abandoned with the child (each an AdapterError)."""
        with self._lock:
            if self._in_flight and self._child is not None:
                self._discard(self._child)
                self._fail_in_flight("the adapter was closed with the request in flight")
            if self._child is not None:
                self._child.close(encode_message({"id": self._take_id(), "op": "shutdown"}))
                self._child = None
            if self.window is not None:
                self.window.close()

    def __enter__(self) -> AdapterClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one request --------------------------------------------------------------------

    def _take_id(self) -> int:
        request_id = self._next_id
        self._next_id += 1
        return request_id

    def _exchange(self, request: dict, timeout_s: float, waiting_for: str = "", raw_blobs: bool | None = None) -> dict:
        """Send one request and return its reply; ChildFailure (child killed) otherwise.
        ``waiting_for`` says, in a timeout's message, what the child had not done in time;
        ``raw_blobs`` overrides the client's form of a binary reply's blobs for this reply.
        With the channel's lock held; requests in flight before it are answered first."""
        self._make_room()
        self._ensure_child()
        result = self._await(self._send(request, timeout_s, lambda reply: reply, waiting_for, raw_blobs))
        if isinstance(result, ChildFailure):
            raise result
        return result

    def _make_room(self) -> None:
        """Read replies, oldest first, until one more request may be in flight on the running child
        (docs/shim-protocol.md, "Pipelined requests"; with a child of depth 1: until none is)."""
        while self._in_flight and self._child is not None and len(self._in_flight) >= self._child.depth:
            self._receive()

    def _send(
        self,
        request: dict,
        timeout_s: float,
        finish: Callable[[Any], Any],
        waiting_for: str = "",
        raw_blobs: bool | None = None,
        span: tuple[int, int] | None = None,
    ) -> InFlight:
        """Write one request to the running child (room made: :meth:`_make_room`) and put it in flight."""
        child = self._child
        assert child is not None and len(self._in_flight) < child.depth
        request_id = self._take_id()
        message = {"id": request_id, **request}
        entry = InFlight(request_id, timeout_s, time.monotonic(), finish, waiting_for, raw_blobs, span)
        self._in_flight.append(entry)
        self.most_in_flight = max(self.most_in_flight, len(self._in_flight))
        child.send(binary_parts(message, child.arena) if child.binary else encode_message(message))
        return entry

    def _await(self, entry: InFlight) -> Any:
        """``entry``'s result, once its reply (and every reply before it) is read."""
        while not entry.done:
            if not self._in_flight:
                raise AssertionError(f"request {entry.request_id} is neither answered nor in flight")
            self._receive()
        return entry.result

    def _receive(self) -> None:
        """Read the reply of the oldest request in flight and finish it. A reply that does not come in
        time, a child that ended, or a reply out of step ends every request in flight
        (:meth:`_fail_in_flight`) and the child; the next request starts a fresh one."""
        child, entry = self._child, self._in_flight[0]
        assert child is not None
        # due a timeout after its own request or after the reply before it, whichever came later
        line = child.read_line(max(entry.sent_at, self._answered_at) + entry.timeout_s)
        if line is None:
            self._discard(child)
            return self._fail_in_flight(f"timed out after {entry.timeout_s:g}s{entry.waiting_for}", child)
        if line is _EOF:
            status = child.exit_status()
            self._discard(child)
            return self._fail_in_flight(f"adapter {status} before answering request {entry.request_id}", child)
        try:
            if isinstance(line, tuple):  # a binary reply: its line decoded, then its sections, if any
                message, data, line = line
                raw = self.raw_blobs if entry.raw_blobs is None else entry.raw_blobs
                reply = message if data is None else join_sections(message, data, raw)
            else:
                reply = decode_line(line)
            if reply.get("id") != entry.request_id:
                raise ProtocolError(
                    f"reply id {reply.get('id')!r} does not match request id {entry.request_id}: {quote(line)}"
                )
        except ProtocolError as exc:
            self._discard(child)  # the stream is out of step: start afresh
            return self._fail_in_flight(f"protocol violation: {exc}", child)
        self._in_flight.popleft()
        self._answered_at = time.monotonic()
        entry.result = entry.finish(reply)
        entry.done = True

    def _ensure_child(self) -> None:
        if self._child is None:
            self._start()
            self.restarts += 1

    # -- the API ----------------------------------------------------------------------

    def run_batch(
        self, family: str, inputs: Sequence[dict], timeout_s: float | None = None, schema_check: bool = True
    ) -> list[Outcome]:
        """Run case ``inputs`` of ``family``: one outcome per input, in order.

        Never raises for adapter misbehaviour: such cases come back as
        :class:`AdapterError`. A family outside the adapter's capabilities is
        answered :class:`Unimplemented` without contacting the child.
        Each output is checked for encoding (NaN, blob consistency), and walked
        through the family's JSON Schema when the client is ``strict_schema``;
        ``schema_check=False`` skips every per-output check, for callers
        that check every field they read themselves (``qconform accumulate``, whose
        canonical records refuse any malformed answer).
        """
        inputs = list(inputs)
        if inputs and family not in self.config.capabilities.families:
            return [Unimplemented(f"{self.config.name} does not declare family {family}")] * len(inputs)
        request = {"op": "run", "family": family, "inputs": inputs}
        strict = self.strict_schema
        check = (lambda output: check_output(family, output, strict)) if schema_check else (lambda output: None)
        return self._batch(request, timeout_s, check)

    def sample_batch(
        self, family: str, inputs: Sequence[dict], samples: int, seed: int, timeout_s: float | None = None
    ) -> list[Outcome]:
        """Sample ``samples`` rounds of each of ``inputs`` with the adapter's own RNG (the
        ``sample`` op, docs/stat-mode.md): one outcome per input, in order, an outcome
        histogram or a refusal. Misbehaviour becomes :class:`AdapterError` as for
        :meth:`run_batch`; a family outside the declared ``sampling`` capability is
        :class:`Unimplemented` without contacting the child.
        """
        inputs = list(inputs)
        if inputs and family not in self.config.capabilities.sampling:
            return [Unimplemented(f"{self.config.name} does not declare sampling of {family}")] * len(inputs)
        request = {"op": "sample", "family": family, "inputs": inputs, "samples": samples, "seed": str(seed)}
        return self._batch(request, timeout_s, lambda output: check_sample_output(family, output, samples))

    def run_block(self, family: str, block: dict[str, Any], timeout_s: float | None = None) -> Any:
        """Answer a block of accumulated cases (the ``run_block`` op, docs/shim-protocol.md): the
        records as a NumPy array, or :class:`Unimplemented` (no block path: ask case by case) or
        :class:`AdapterError` (the request failed; the child was restarted if it misbehaved). With
        a child that attached the block window the arrays travel through it ("Block window"), else
        as sections (or base64, with a JSON child)."""
        return self.send_block(family, block, timeout_s).result()

    def send_block(self, family: str, block: dict[str, Any], timeout_s: float | None = None) -> PendingReply:
        """Send a block as :meth:`run_block` does, without waiting for its answer: its
        :meth:`PendingReply.result` is what :meth:`run_block` returns. With a child that takes
        pipelined requests (:attr:`depth` 2, docs/shim-protocol.md, "Pipelined requests") the call
        returns as soon as the block is written, while the request before it may still be in
        flight; with any other child it first reads the reply in flight, so requests stay one at a
        time. Replies are read in the order the requests were sent, whichever caller reads them."""
        from qconform.harness.transport.blocks import BlockError, block_blobs, records_bytes
        from qconform.harness.transport.shim_protocol import to_json_blobs

        if family not in self.config.capabilities.families:
            return PendingReply.ready(Unimplemented(f"{self.config.name} does not declare family {family}"))
        with self._lock:
            try:
                self._make_room()
                self._ensure_child()
            except AdapterStartError as exc:
                return PendingReply.ready(AdapterError(f"adapter restart failed: {exc}"))
            assert self._child is not None
            window = self._child.window
            request: dict[str, Any] = {"op": "run_block", "family": family}
            answer, span = [0, 0], None  # the window's answer range, [offset, length], and the request's bytes
            try:
                if window is not None:
                    cases = len(next(iter(block.values()), ()))
                    busy = [entry.span for entry in self._in_flight if entry.span is not None]
                    request["block"], answer = window.place(block, records_bytes(family, cases), busy)
                    request["window"] = {"bytes": window.size, "answer": answer}
                    starts = [blob["window"][0] for blob in request["block"].values()]
                    span = (min([*starts, answer[0]]), answer[0] + answer[1])
                else:
                    blobs = block_blobs(block)
                    request["block"] = blobs if self.payload == BINARY_PAYLOAD else to_json_blobs(blobs)
            except (BlockError, OSError) as exc:
                return PendingReply.ready(AdapterError(f"run_block cannot send the block: {exc}"))
            # the records in the raw form: their section's bytes, never through base64
            entry = self._send(
                request,
                self.timeout_s if timeout_s is None else timeout_s,
                lambda reply: block_records(reply, window, answer),
                raw_blobs=True,
                span=span,
            )
        return PendingReply(self, entry)

    def _batch(self, request: dict, timeout_s: float | None, check: Callable[[dict], str | None]) -> list[Outcome]:
        """Send one batch request and return its per-input outcomes, each checked by ``check``."""
        count = len(request["inputs"])
        if not count:
            return []
        with self._lock:
            try:
                self._make_room()  # with pipelined requests: the replies before it are read, in order
                self._ensure_child()
            except AdapterStartError as exc:
                return [AdapterError(f"adapter restart failed: {exc}")] * count
            child = self._child
            mark = child.stderr_mark() if child is not None else 0
            try:
                reply = self._exchange(request, self.timeout_s if timeout_s is None else timeout_s)
            except ChildFailure as exc:
                return [AdapterError(str(exc))] * count
        outcomes = outcomes_of(reply, count, check)
        if child is not None and any(isinstance(outcome, AdapterError) for outcome in outcomes):
            said = child.stderr_since(mark)  # e.g. a kernel compiler's diagnostic behind a one-line error
            if said:
                outcomes = [
                    AdapterError(f"{outcome.message}; stderr: {said}") if isinstance(outcome, AdapterError) else outcome
                    for outcome in outcomes
                ]
        return outcomes


def block_records(reply: dict | ChildFailure, window: BlockWindow | None, answer: list[int]) -> Any:
    """The result of a ``run_block`` request from its reply (read as it arrives, with the channel's
    lock held): its records copied out of the window before any later block can be placed where
    they are, :class:`Unimplemented`, or :class:`AdapterError`."""
    from qconform.harness.transport.blocks import BlockError, blob_array

    if isinstance(reply, ChildFailure):
        return AdapterError(str(reply))
    status = reply.get("status")
    if status == "unimplemented":
        return Unimplemented(str(reply.get("reason", "")))
    if status != "ok":
        return AdapterError(f"run_block failed: {reply.get('message', quote(repr(reply)))}")
    try:
        records = reply.get("records")
        if window is None or not isinstance(records, dict) or "window" not in records:
            return blob_array(records, "the records")
        # in the window: only in the answer range, and copied out before the next block is placed
        low, high = window_range(records["window"], window.size, "the records")
        if low < answer[0] or high > answer[0] + answer[1]:
            raise BlockError(
                f"the records name window bytes [{low}, {high}), outside the answer range "
                f"[{answer[0]}, {answer[0] + answer[1]})"
            )
        return window.copy_out(blob_array(records, "the records", window.bytes_at(0, window.size)))
    except (BlockError, WindowError) as exc:
        return AdapterError(f"run_block answered {exc}")


def outcomes_of(reply: dict, count: int, check: Callable[[dict], str | None]) -> list[Outcome]:
    """The per-case outcomes of a ``run`` or ``sample`` reply whose id matched."""
    status = reply.get("status")
    if status == "unimplemented":
        return [Unimplemented(str(reply.get("reason", "")))] * count
    if status == "error":
        return [AdapterError(f"adapter failed the whole request: {reply.get('message', '')}")] * count
    outputs = reply.get("outputs")
    if status != "ok" or not isinstance(outputs, list):
        return [AdapterError(f"malformed reply (needs status and an outputs list): {quote(repr(reply))}")] * count
    if len(outputs) != count:
        return [AdapterError(f"adapter answered {len(outputs)} outputs for {count} inputs")] * count
    return [entry_to_outcome(entry, check) for entry in outputs]


def open_adapter(
    spec: str,
    device: str = "cpu",
    timeout_s: float = TIMEOUT_S,
    strict_schema: bool = False,
    binary_payload: bool = True,
    raw_blobs: bool = False,
    arena: BlobArena | None = None,
    start_timeout_s: float | None = None,
    block_window: bool = True,
    pipeline: bool = True,
    spawned: Callable[[Child], None] | None = None,
    early: EarlyStart | None = None,
) -> AdapterClient:
    """Start the adapter ``spec`` and return a client for it.

    ``spec`` is a registered adapter name (``reference``, ``noop``, ``faulty:<mode>``,
    an entry point) served by ``python -m qconform.harness.transport.host``, or
    ``shim:<command line>`` for a program that speaks the protocol itself, or
    ``tcp://HOST:PORT`` for a wire v2 endpoint (served by the host as ``TcpAdapter``).
    Raises :class:`AdapterStartError` (``UnknownAdapter`` for an unknown name)
    when the adapter cannot start. ``strict_schema`` walks every answer through its
    family's full JSON Schema (``qconform run --strict-schema``). ``binary_payload=False``
    keeps every message in the JSON form even with a child that could take binary payloads;
    ``raw_blobs`` hands the blobs of binary replies over in the raw form (``{"dtype", "shape",
    "raw"}``, docs/adapters.md), for a caller that reads both forms, such as the judge;
    ``arena`` (the loaded cases' :class:`~qconform.harness.transport.arena.BlobArena`) is offered
    to the child, which, if it attaches it, is sent arena ranges for the blobs it holds.
    ``start_timeout_s`` bounds each start (the answer to ``get_config``); when not given, it is
    the longest of ``timeout_s``, :data:`START_TIMEOUT_S` and the start a bundled shim adapter
    declares (vLLM's). ``block_window=False`` offers no block window: blocks cross the pipe as
    sections (docs/shim-protocol.md, "Block window"). ``pipeline=False`` offers no pipelined
    requests: every child is sent one request at a time (docs/shim-protocol.md, "Pipelined requests").
    ``spawned`` is told of each child as it is spawned (:attr:`AdapterClient.spawned`); ``early``, a
    child :func:`spawn_early` started for this adapter, is the first start's child.
    """
    command, declared_start_s = adapter_command(spec, device)
    if start_timeout_s is None and declared_start_s is not None:
        start_timeout_s = max(timeout_s, START_TIMEOUT_S, declared_start_s)
    return AdapterClient(
        spec,
        command,
        device,
        timeout_s,
        strict_schema,
        binary_payload,
        raw_blobs,
        arena,
        start_timeout_s,
        block_window,
        pipeline,
        spawned,
        early,
    )


def adapter_command(spec: str, device: str) -> tuple[list[str], float | None]:
    """The command line that starts the adapter ``spec`` (:func:`open_adapter`), and the start a
    bundled shim adapter declares (None for the others); :class:`AdapterStartError` (``UnknownAdapter``)
    for a spec that names none."""
    from qconform.adapters.catalog import shim_adapter, shim_adapter_command, shim_adapter_start_s

    if spec.startswith(SHIM_PREFIX):
        command = shlex.split(spec[len(SHIM_PREFIX) :])
        if not command:
            raise AdapterStartError("shim: needs a command line, e.g. shim:./my_shim --flag")
        return command, None
    if shim_adapter(spec) is not None:
        return shim_adapter_command(spec, device), shim_adapter_start_s(spec)
    from qconform.adapters.catalog import UnknownAdapter, available_adapters

    names = available_adapters()
    if spec not in names and not spec.startswith(TCP_PREFIX):
        raise UnknownAdapter(spec, list(names))
    return host_command(spec, device), None


@dataclass
class EarlyStart:
    """An adapter's child spawned before its client exists (:func:`spawn_early`): the command, the
    block window and the reserved descriptor of the arena it was handed, and the child, which loads
    its engine (torch's import) while the caller goes on. The first start of a client given it
    (``open_adapter(..., early=...)``) asks this child for ``get_config`` instead of spawning one."""

    command: list[str]
    window: BlockWindow | None
    #: an empty anonymous file whose descriptor the child holds: build the arena into it
    #: (:meth:`arena_file`) and the child maps it once it is told its size
    arena_fd: int
    child: Child | None
    #: the arena's descriptor is still this start's (no arena was built in it)
    owns_arena_fd: bool = True

    def arena_file(self) -> int:
        """The reserved arena file's descriptor, from now on the caller's (``BlobArena.of_cases(...,
        fd=...)`` takes it: the arena built in it closes it, or the build does when it holds nothing)."""
        self.owns_arena_fd = False
        return self.arena_fd

    def take(self) -> tuple[Child, int, BlockWindow | None] | None:
        """The child, the arena's descriptor and the window, now the taker's (None once taken or closed)."""
        child, window, self.child, self.window = self.child, self.window, None, None
        return None if child is None else (child, self.arena_fd, window)

    def close(self) -> None:
        """Kill the child if no client took it, release its window, and close the arena's descriptor
        unless :meth:`arena_file` handed it over (idempotent)."""
        taken = self.take()
        if taken is not None:
            child, _fd, window = taken
            child.kill()
            if window is not None:
                window.close()
        if self.owns_arena_fd:
            self.owns_arena_fd = False
            os.close(self.arena_fd)


def spawn_early(spec: str, device: str = "cpu") -> EarlyStart | None:
    """Spawn the adapter ``spec``'s child now, before the cases that fill its arena are known
    (``qconform run`` collects while the child imports its engine: docs/shim-protocol.md, "Starting
    early"); None where it cannot be (no anonymous file, or the command does not start): the
    client's own start then says why, as ever."""
    try:
        command, _declared = adapter_command(spec, device)
    except AdapterStartError:
        return None
    arena_fd = anonymous_file()
    if arena_fd is None:
        return None
    window = BlockWindow.create()  # a client that offers none closes it
    try:
        child = Child(command, tuple(fd for fd in (arena_fd, window.fd if window else -1) if fd >= 0))
    except (AdapterStartError, OSError):  # a program that cannot run: the start after the collection says so
        os.close(arena_fd)
        if window is not None:
            window.close()
        return None
    return EarlyStart(command, window, arena_fd, child)
