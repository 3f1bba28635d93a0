"""The keeper of one adapter's process tree: every process the adapter starts ends with it (Linux).

The harness does not start an adapter's command itself but this script (with the standard
library only, ``python -S subreaper.py STATUS_FD -- COMMAND...``), which:

1. makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): a helper the command
   starts, and any grandchild that leaves its process group or session (``setsid``, a
   double fork), is re-parented here when its parent dies, never to PID 1, so it stays
   findable as a descendant of this process;
2. starts the command (stdin, stdout, stderr and the arena fd inherited as they are, no
   copying), with ``PR_SET_PDEATHSIG`` = SIGKILL, and writes its pid to ``STATUS_FD``, or
   ``!`` and why it could not be run;
3. waits (on pidfds, so neither a thread's exit nor an inherited pipe misleads it) for the
   first of: the command ends; the harness process ends (whatever killed it, SIGKILL
   included); SIGTERM, SIGINT or SIGHUP (the harness stopping the adapter);
4. then SIGKILLs every descendant, however deep, until none is left (processes that ignore
   SIGTERM or fork meanwhile included), reaps them, and exits with the command's own status:
   the same exit code, or death by the same signal, so the harness reports the command's end.

docs/shim-protocol.md ("Process tree") and docs/harness.md ("Stopping cleanly") describe
the guarantee; tests/robustness/test_process_tree.py holds it for each way a run ends.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import subprocess
import sys
import time

#: prctl(2) options (linux/prctl.h)
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: signals that tell the keeper to end the tree (what the harness sends to stop an adapter)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: seconds between two scans while waiting without a pidfd, and the most a kill of the tree waits
POLL_S = 0.2
KILL_WAIT_S = 10.0


def prctl(option: int, value: int) -> int:
    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def descendants(root: int) -> list[int]:
    """Every live or zombie descendant of ``root``, read from /proc (parents before children)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def reap() -> list[int]:
    """Collect every child that has ended (orphans re-parented here included); their pids."""
    reaped: list[int] = []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append(pid)


def kill_tree() -> None:
    """SIGKILL every descendant until none is left (or :data:`KILL_WAIT_S` passed)."""
    deadline = time.monotonic() + KILL_WAIT_S
    me = os.getpid()
    while time.monotonic() < deadline:
        pids = descendants(me)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
        reap()


def end_like(returncode: int) -> None:
    """Exit as the command did: its exit status, or death by its signal (without a core file)."""
    if returncode < 0:
        signum = -returncode
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if signum != signal.SIGKILL:  # SIGKILL has no disposition to set, and always takes
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
            os.kill(os.getpid(), signum)
        os.kill(os.getpid(), signal.SIGKILL)  # a signal whose death did not take: end for certain
    os._exit(returncode & 0xFF)


def pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def main(argv: list[str]) -> None:
    status_fd = int(argv[1])
    command = argv[3:]
    os.set_inheritable(status_fd, False)
    parent = os.getppid()
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    parent_fd = pidfd(parent)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: None)

    def die_with_keeper() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    try:
        proc = subprocess.Popen(command, close_fds=False, preexec_fn=die_with_keeper)
    except OSError as exc:
        os.write(status_fd, f"!{exc}\n".encode("utf-8", "replace"))
        os._exit(127)
    os.write(status_fd, f"{proc.pid}\n".encode())
    os.close(status_fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the command's pipes are its own: their EOF is the command's, not ours
        os.dup2(devnull, fd)
    command_fd = pidfd(proc.pid)
    watched = [fd for fd in (parent_fd, command_fd, wake_r) if fd is not None]
    while proc.poll() is None:
        ready, _, _ = select.select(watched, [], [], POLL_S)
        if wake_r in ready or os.getppid() != parent or (parent_fd is not None and parent_fd in ready):
            proc.kill()  # stopped by the harness, or the harness is gone: end everything now
            proc.wait()
            break
    kill_tree()
    end_like(proc.returncode)


if __name__ == "__main__":
    main(sys.argv)
