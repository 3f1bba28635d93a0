"""What both endpoints share: the asyncio TCP server, connection bookkeeping, the control answers.

One log line per event on the ``qconform.endpoint`` loggers. :meth:`Endpoint.close`
stops listening, cancels every connection and waits for them, which is what a
SIGINT or SIGTERM does to ``qconform endpoint ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from . import control, stream
from .stream import FrameReader, FrameWriter, Item

log = logging.getLogger("qconform.endpoint")


class Endpoint:
    """A TCP endpoint; subclasses define :meth:`serve` (one connection), :meth:`about` and :meth:`command`."""

    role = "endpoint"

    def __init__(self, control_allowed: bool = True) -> None:
        self.control_allowed = control_allowed
        self.server: asyncio.Server | None = None
        self.connections = 0
        self.active: dict[int, asyncio.Task] = {}
        self.address: tuple[str, int] | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on ``host:port`` (0: an ephemeral port); the port listened on."""
        self.server = await stream.start_server(self._connection, host, port)
        self.address = self.server.sockets[0].getsockname()[:2]
        log.info("%s listening on %s:%d", self.role, *self.address)
        return self.address[1]

    async def _connection(self, reader: FrameReader, writer: FrameWriter) -> None:
        self.connections += 1
        number = self.connections
        self.active[number] = asyncio.current_task()
        log.info("%s conn %d from %s", self.role, number, writer.get_extra_info("peername"))
        try:
            await self.serve(reader, writer, number)
        except (ConnectionError, OSError) as exc:
            log.info("%s conn %d dropped: %s", self.role, number, exc)
        except asyncio.CancelledError:
            log.info("%s conn %d cancelled", self.role, number)  # the endpoint is closing
        except Exception:  # noqa: BLE001 - a bug ends this connection, never the endpoint
            log.exception("%s conn %d failed", self.role, number)
        finally:
            self.closed(number)
            del self.active[number]
            writer.close()
            with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
                await writer.wait_closed()
            log.info("%s conn %d closed", self.role, number)

    async def serve(self, reader: FrameReader, writer: FrameWriter, number: int) -> None:
        raise NotImplementedError

    def closed(self, number: int) -> None:
        """A connection ended (the verifier turns it into a Disconnect event)."""

    def about(self) -> dict:
        raise NotImplementedError

    async def command(self, request: dict, number: int) -> dict:
        raise control.ControlError(f"unknown op {request.get('op')!r}")

    def frame_envelope(self, item: Item, number: int) -> dict:
        raise control.ControlError(f"a {self.role} does not judge frames")

    async def answer(self, item: Item, number: int) -> bytes:
        """The ANSWER envelope to one control envelope; a malformed request gets ``{"error": ...}``."""
        try:
            if item.envelope_kind == control.COMMAND:
                request = control.json_body(item.data)
                result = self.about() if request.get("op") == "about" else await self.command(request, number)
            elif item.envelope_kind in (control.CHECK, control.APPLY):
                result = self.frame_envelope(item, number)
            else:
                raise control.ControlError(f"envelope kind {item.envelope_kind} is not a request")
        except (control.ControlError, KeyError, TypeError, ValueError) as exc:
            log.warning("%s conn %d: bad control request: %s", self.role, number, exc)
            result = {"error": f"{type(exc).__name__}: {exc}"}
        return control.json_envelope(control.ANSWER, result)

    async def close(self) -> None:
        """Stop listening, cancel every connection and wait for them to end."""
        if self.server is not None:
            self.server.close()
        tasks = [t for t in self.active.values() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.wait_closed()
        log.info("%s closed", self.role)
