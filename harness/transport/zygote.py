"""The adapter zygote: one import of an adapter's modules for all the ranks of a command (Linux).

``qconform accumulate --ranks W`` starts, before it forks its ranks, one zygote for its adapter
(:func:`start_zygote`): ``python -m qconform.harness.transport.zygote --adapter NAME --device D``,
under a keeper of its own (subreaper.py), which imports what the adapter host and the adapter's
module import (torch: 1.3 to 1.45 s of CPU) and then waits on a socket that only this command's
processes know. Each rank starts its adapter as it always does, through the client
(:class:`~qconform.harness.transport.client.Child`) and its own keeper; where the zygote serves that
very command, the keeper runs ``zygote_stub.py`` in its place, which hands the zygote its pipes and
the zygote forks the adapter from its imported state. docs/distributed.md, "One torch import for all
ranks (the adapter zygote)", has the rules; in short:

* **The rank owns its adapter's life.** Each start is a pair of forks: a keeper (this module's
  :func:`keep`), a child subreaper that dies with the zygote, and under it the adapter host. The keeper
  watches the stub's connection: when the stub ends (the rank stopped or restarted its adapter, or
  the rank died and its keeper killed the stub), the keeper kills the adapter and every process it
  started. When the adapter ends, the keeper kills what it left, then sends the stub the adapter's
  exit status, which the stub ends with: the rank sees its adapter's status and, the adapter having
  written to the rank's own stderr pipe, its stderr, as with today's start.
* **No orphan.** The zygote dies with its keeper (``PR_SET_PDEATHSIG``), which ends the zygote's
  whole tree when the command ends or rank 0 dies; each adapter and adapter keeper dies with its
  parent; the zygote is a child subreaper too, and kills any process re-parented to it (what an
  adapter keeper killed by a signal left).
* **Each adapter keeper leads a session of its own**, as today's keeper does: the scheduler shares
  the cores between sessions, so the ranks' adapters must not share the zygote's.
* **A fork only while the zygote runs one thread**, and only for the command, environment and
  working directory the zygote was started with; any other start is refused, and the stub runs the
  command itself. Every adapter the zygote does not serve (``shim:``, ``tcp://``, a bundled shim)
  starts as today.
* **The zygote imports, it never runs**: no adapter is constructed in it, so no device is touched
  before a fork (CUDA cannot be forked once initialised); and if an import initialised the CUDA
  driver (the triton adapter asks ``torch.cuda.is_available()`` at import), the zygote ends at once
  and every rank starts its adapter as today. A driver only mapped (a CUDA build of torch maps it at
  import) is asked whether it was initialised, and answers without initialising.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import fcntl
import json
import os
import secrets
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Sequence

#: what the zygote sends first on a connection it took, and the most descriptors a start hands over
#: (the stub's constants: harness/transport/zygote_stub.py)
HELLO = b"hello\n"
MAX_FDS = 16
#: the stub, run by a rank's keeper in place of a command the zygote serves
STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote_stub.py")
#: the variable that names a file the zygote appends its decisions to (docs/distributed.md, rule 7)
TRACE_ENV = "QCONFORM_ZYGOTE_TRACE"
#: seconds a connected stub may take to send its request before the zygote drops it
REQUEST_S = 10.0
#: seconds between two looks of an adapter keeper without a pidfd
POLL_S = 0.2


# -- the command's side ------------------------------------------------------------------


@dataclass
class Zygote:
    """A started zygote, as the command (rank 0) holds it: its socket's name, the adapter command it
    serves, and its keeper's process."""

    name: str
    command: list[str]
    keeper: subprocess.Popen
    status_r: int
    _pid: int | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        """The zygote's own pid (its keeper's report; None if it could not start)."""
        if self._pid is None and self.status_r >= 0:
            ready, _, _ = select.select([self.status_r], [], [], 30.0)
            text = os.read(self.status_r, 4096).decode("utf-8", "replace").strip() if ready else ""
            os.close(self.status_r)
            self.status_r = -1
            self._pid = int(text) if text.isdigit() else None
        return self._pid

    def close(self) -> None:
        """End the zygote and every adapter forked from it (its keeper kills the whole tree)."""
        from qconform.harness.transport.client import _kill_group

        global _serving
        if _serving is self:
            _serving = None
        _kill_group(self.keeper, kept=True)
        if self.status_r >= 0:
            os.close(self.status_r)
            self.status_r = -1


#: the zygote this process's adapter starts go through, if any (inherited by the forked ranks)
_serving: Zygote | None = None


def zygote_for(command: Sequence[str]) -> str | None:
    """The socket name of the zygote that serves ``command``, or None: start it as today."""
    zygote = _serving
    return zygote.name if zygote is not None and list(command) == zygote.command else None


def stub_command(name: str, command: Sequence[str], pass_fds: Sequence[int]) -> list[str]:
    """``command`` started through the zygote ``name``, handing it ``pass_fds`` (run under the keeper)."""
    return [sys.executable, "-S", STUB, name, ",".join(str(fd) for fd in pass_fds), "--", *command]


def start_zygote(adapter: str, device: str) -> Zygote | None:
    """Start a zygote for the registered adapter ``adapter`` on ``device`` and route this process's
    (and its forks') starts of it there (:meth:`Zygote.close` ends it). It is not waited for: a rank's
    stub waits for it at its first start, while the command goes on. None, and nothing started, for
    an adapter the host does not serve (``shim:``, ``tcp://``, a bundled shim) or off Linux: those
    start as today."""
    global _serving
    from qconform.adapters.catalog import BUILTIN_ADAPTERS, shim_adapter
    from qconform.harness.transport.client import TCP_PREFIX, host_command, kept_command

    served = adapter in BUILTIN_ADAPTERS or not (adapter.startswith(("shim:", TCP_PREFIX)) or shim_adapter(adapter))
    if not served or not sys.platform.startswith("linux") or not hasattr(socket, "send_fds"):
        return None
    name = f"qconform-zygote-{os.getpid()}-{secrets.token_hex(8)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    status_r, status_w = os.pipe()
    try:
        listener.bind("\0" + name)
        listener.listen(64)
        command = [sys.executable, "-m", __name__, "--adapter", adapter, "--device", device]
        command += ["--listen-fd", str(listener.fileno())]
        keeper = subprocess.Popen(
            kept_command(command, status_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=(listener.fileno(), status_w),
        )
    except OSError:
        os.close(status_r)
        return None
    finally:
        listener.close()  # the zygote's alone: once it ends, a stub's connect fails and it starts as today
        os.close(status_w)
    _serving = Zygote(name, host_command(adapter, device), keeper, status_r)
    return _serving


# -- the zygote's side -------------------------------------------------------------------


def prctl(option: int, value: int) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def die_with_parent(parent: int) -> None:
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def trace(decision: str) -> None:
    """Append ``decision`` (one line: ready, not serving, forked, refused) to the file that
    :data:`TRACE_ENV` names, if any, with the wall-clock time and this zygote's pid; a file that
    cannot be written loses the line, never the start."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{time.time():.3f} zygote {os.getpid()}: {decision}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, as a trace line quotes an exception."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def threads() -> int:
    """The threads this process runs (the kernel's count, not only Python's)."""
    return len(os.listdir("/proc/self/task"))


def refusal(request: object, served: list[str], environ: dict[str, str], cwd: str, running: int) -> str | None:
    """Why the zygote does not fork for ``request`` (the stub then starts the command itself), or None."""
    if not isinstance(request, dict):
        return "the request is not an object"
    if request.get("argv") != served:
        return "it serves another command"
    if request.get("env") != environ:
        return "the environment differs from the zygote's"
    if request.get("cwd") != cwd:
        return "the working directory differs from the zygote's"
    fds = request.get("fds")
    if not isinstance(fds, list) or not all(isinstance(fd, int) and fd >= 0 for fd in fds) or fds[:3] != [0, 1, 2]:
        return "the descriptors are not stdin, stdout, stderr and more"
    if running != 1:
        return f"the zygote runs {running} threads (a fork needs one)"
    return None


def read_request(conn: socket.socket) -> tuple[object, list[int]]:
    """The stub's request line and the descriptors that came with it."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, MAX_FDS)
    while data and not data.endswith(b"\n"):
        more = conn.recv(1 << 16)
        if not more:
            break
        data += more
    try:
        return json.loads(data), fds
    except ValueError:
        return None, fds


def become_adapter(conn: socket.socket, fds: list[int], targets: list[int], argv: list[str], keeper: int) -> None:
    """In the adapter's fork: die with its keeper, take the rank's descriptors at the numbers the rank
    gave them, and serve as ``python -m qconform.harness.transport.host`` would; never returns."""
    die_with_parent(keeper)
    status = 1
    try:
        conn.close()
        floor = max([*targets, *fds]) + 1  # above every number in play, so no dup2 closes one of them
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, floor) for fd in fds]
        for fd in fds:
            os.close(fd)
        for fd, target in zip(moved, targets):
            os.dup2(fd, target)
            os.close(fd)
        from qconform.harness.transport import host

        sys.argv = [host.__file__, *argv]
        status = host.main(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends a fresh host: traceback, status 1
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()  # what a fresh host runs at its exit, once, in this process
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status & 0xFF)


def status_line(wait_status: int) -> bytes:
    code = os.waitstatus_to_exitcode(wait_status)
    return f"signal {-code}\n".encode() if code < 0 else f"exit {code}\n".encode()


def keep(conn: socket.socket, fds: list[int], targets: list[int], argv: list[str], zygote: int) -> None:
    """In the first fork: the keeper of one adapter's tree; never returns (docs/distributed.md)."""
    from qconform.harness.transport.subreaper import kill_tree

    die_with_parent(zygote)
    # a session of its own, as today's start gives each adapter's keeper: the scheduler's autogroups
    # are per session, so the ranks' adapters must not share the zygote's one share of the cores
    os.setsid()
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    me = os.getpid()
    adapter = os.fork()
    if adapter == 0:
        become_adapter(conn, fds, targets, argv, me)
    for fd in fds:  # the adapter's now: their end of file is the adapter's
        os.close(fd)
    try:
        adapter_fd: int | None = os.pidfd_open(adapter)
    except (AttributeError, OSError):
        adapter_fd = None
    watched = [conn.fileno()] + ([adapter_fd] if adapter_fd is not None else [])
    wait_status: int | None = None
    while wait_status is None:
        ready, _, _ = select.select(watched, [], [], POLL_S)
        pid, status = os.waitpid(adapter, os.WNOHANG)
        if pid:
            wait_status = status
        elif conn.fileno() in ready:  # the stub is gone: its rank stopped the adapter, or died
            os.kill(adapter, signal.SIGKILL)
            os.waitpid(adapter, 0)
            kill_tree()
            os._exit(0)
    kill_tree()  # what the adapter started, before its status reaches the rank
    try:
        conn.sendall(status_line(wait_status))
    except OSError:
        pass
    os._exit(0)


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of ``conn`` (``SO_PEERCRED``: pid, uid, gid)."""
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


def serve_one(
    conn: socket.socket,
    served: list[str],
    environ: dict[str, str],
    cwd: str,
    keepers: set[int],
    own: Sequence[socket.socket | int],
) -> None:
    """Answer one stub: fork its adapter (with its keeper), or refuse. ``own``: the zygote's listener and
    wake-up pipe, which no fork keeps."""
    fds: list[int] = []
    try:
        if peer_uid(conn) != os.getuid():  # the socket's name is abstract: only this user's processes are served
            return
        conn.settimeout(REQUEST_S)
        conn.sendall(HELLO)
        request, fds = read_request(conn)
        why = refusal(request, served, environ, cwd, threads())
        targets = request.get("fds", []) if isinstance(request, dict) else []
        if why is None and len(targets) != len(fds):
            why = f"{len(fds)} descriptors came for {len(targets)} named"
        if why is not None:
            trace(f"refused: {why}")
            conn.sendall(f"refused {why}\n".encode())
            return
        conn.settimeout(None)
        pid = os.fork()
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for mine in own:
                    mine.close() if isinstance(mine, socket.socket) else os.close(mine)
                keep(conn, fds, targets, served[3:], os.getppid())
            finally:
                os._exit(1)  # a fork never returns into the zygote's loop
        keepers.add(pid)
        trace(f"forked {pid}")
        conn.sendall(f"forked {pid}\n".encode())
    except OSError:
        pass
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()


def sweep(keepers: set[int]) -> None:
    """Reap the adapter keepers that ended, and kill every process re-parented to the zygote that is
    not one of its keepers (what a keeper killed by a signal left), with all it started."""
    from qconform.harness.transport.subreaper import descendants, reap

    keepers.difference_update(reap())
    me = os.getpid()
    for pid in descendants(me):
        if pid not in keepers and parent_of(pid) == me:  # re-parented here; what it started comes next
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def preload(adapter: str) -> None:
    """Import what the host and ``adapter``'s module import; construct nothing."""
    from qconform.adapters.catalog import BUILTIN_ADAPTERS, _entry_points
    from qconform.harness.transport import host  # noqa: F401 - imported for the forks

    if adapter in BUILTIN_ADAPTERS:
        BUILTIN_ADAPTERS[adapter].load()
    elif adapter in (found := _entry_points()):
        found[adapter].load()


#: what every CUDA driver call returns before ``cuInit`` (cuda.h, ``CUDA_ERROR_NOT_INITIALIZED``)
CUDA_ERROR_NOT_INITIALIZED = 3


def cuda_driver_mapped() -> str | None:
    """The path of the CUDA driver library where it is mapped into this process, else None."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)  # address, perms, offset, device, inode[, path]
            path = fields[5].strip() if len(fields) == 6 else ""
            if "libcuda.so" in os.path.basename(path):
                return path
    return None


def cuda_driver_initialised(path: str) -> str | None:
    """Why the CUDA driver mapped from ``path`` may have been initialised (then no fork is safe), or
    None where it says it has not: ``cuDeviceGetCount`` returns ``CUDA_ERROR_NOT_INITIALIZED``
    before ``cuInit`` and initialises nothing. A CUDA build of torch may map the driver at import
    without initialising it; ``torch.cuda.is_available()`` initialises it (docs/distributed.md,
    rule 5). Any other answer, or a driver that cannot be asked, counts as initialised."""
    try:
        driver = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # the mapped copy; loads nothing
        count = ctypes.c_int(0)
        status = driver.cuDeviceGetCount(ctypes.byref(count))
    except (OSError, AttributeError) as exc:
        return f"it cannot be asked ({one_line(exc)})"
    if status != CUDA_ERROR_NOT_INITIALIZED:
        return f"cuDeviceGetCount returned {status}, not {CUDA_ERROR_NOT_INITIALIZED} (not initialised)"
    return None


def prepared(adapter: str) -> bool:
    """Import what ``adapter`` needs (:func:`preload`) and decide whether this zygote may fork from
    the state that leaves, tracing the decision (docs/distributed.md, rules 5 and 7)."""
    began = time.perf_counter()
    try:
        preload(adapter)
    except Exception as exc:  # noqa: BLE001 - no zygote: every stub starts its command itself, which says why
        trace(f"not serving: importing {adapter} failed ({one_line(exc)})")
        return False
    driver = cuda_driver_mapped()
    if driver is not None and (why := cuda_driver_initialised(driver)) is not None:
        trace(f"not serving: the imports initialised the CUDA driver: {why}")
        return False  # a module asked CUDA at import (the triton adapter does): no fork from here is safe
    mapped = "" if driver is None else ", the CUDA driver mapped, not initialised"
    trace(f"ready: imports {time.perf_counter() - began:.2f} s, {threads()} thread(s){mapped}")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--adapter", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--listen-fd", type=int, required=True)
    args = parser.parse_args(argv)
    environ, cwd = dict(os.environ), os.getcwd()  # as the command left them: a start must match
    listener = socket.socket(fileno=args.listen_fd)
    if not prepared(args.adapter):
        return 1
    from qconform.harness.transport.client import host_command

    served = host_command(args.adapter, args.device)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    keepers: set[int] = set()
    while True:
        ready, _, _ = select.select([listener, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            sweep(keepers)
        if listener in ready:
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            serve_one(conn, served, environ, cwd, keepers, (listener, wake_r, wake_w))


if __name__ == "__main__":
    sys.exit(main())
