"""An adapter's command as a fork of the adapter zygote, or as itself where the zygote does not serve it.

The harness runs this script (standard library only, ``python -S zygote_stub.py NAME FDS -- COMMAND...``)
under the keeper of the adapter's tree (subreaper.py) in place of ``COMMAND``, when a zygote named
``NAME`` serves that command (harness/transport/zygote.py; docs/distributed.md, "One torch import for
all ranks"). It:

1. connects to the zygote's socket and waits for its ``hello`` (the zygote took the connection). No
   socket, or no ``hello`` (the zygote ended): nothing was handed over, so it runs ``COMMAND`` itself
   (``execvp``), today's start;
2. sends the command, its environment and working directory, with its standard input, output and error
   and the descriptors ``FDS`` (the arena, the block window) attached. ``refused``: it runs ``COMMAND``
   itself. ``forked``: the adapter holds the pipes now, and this process lets go of its copies of
   stdin and stdout, so their end of file is the adapter's;
3. waits for the adapter's status, which the adapter's keeper in the zygote sends when the adapter has
   ended and every process it started is gone, and ends the same way (exit code, or death by the same
   signal), so the harness's keeper reports it as the command's. A connection that ends without a
   status (the zygote or that keeper was killed, and with it the adapter) ends this process by SIGKILL,
   as the adapter ended.

When this process ends for any other reason (the keeper SIGKILLs it: the rank stopped its adapter, or
the rank died), its end of the connection closes and the adapter's keeper in the zygote kills the
adapter's tree at once: the rank owns its adapter's life.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from subreaper import end_like

#: the first line the zygote sends on a connection it took
HELLO = b"hello"
#: the most descriptors one start hands over (stdin, stdout, stderr, arena, window, and room)
MAX_FDS = 16


def run_itself(command: list[str]) -> None:
    """Today's start: become ``command`` (the keeper started this process in its place)."""
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"cannot run {command[0]}: {exc}\n")
        os._exit(127)


def status_of(line: bytes) -> int:
    """The returncode (negative: killed by that signal) in the keeper's ``exit N`` / ``signal N`` line."""
    kind, _, number = line.decode("ascii", "replace").strip().partition(" ")
    if number.isdigit() and kind in ("exit", "signal"):
        return int(number) if kind == "exit" else -int(number)
    return -signal.SIGKILL


def main(argv: list[str]) -> None:
    name, fds = argv[1], [int(fd) for fd in argv[2].split(",") if fd]
    command = argv[4:]
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect("\0" + name)
        reader = conn.makefile("rb")
        hello = reader.readline().strip()
    except OSError:
        hello = b""
    if hello != HELLO:
        run_itself(command)
    request = {"argv": command, "fds": [0, 1, 2, *fds], "env": dict(os.environ), "cwd": os.getcwd()}
    try:
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2, *fds])
        answer = reader.readline().strip()
    except OSError:
        answer = b""
    if answer.startswith(b"refused"):
        conn.close()
        run_itself(command)
    if not answer.startswith(b"forked"):
        sys.stderr.write("qconform: the adapter zygote ended before it started the adapter\n")
        os._exit(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the adapter's pipes now: their end of file is the adapter's, not ours
        os.dup2(devnull, fd)
    for fd in fds:
        os.close(fd)
    try:
        line = reader.readline()
    except OSError:
        line = b""
    if not line:
        sys.stderr.write("qconform: the adapter's keeper in the zygote ended without its status\n")
    end_like(status_of(line))


if __name__ == "__main__":
    main(sys.argv)
