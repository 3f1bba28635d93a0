"""A link the fault proxy lost is freed at once, not by the cyclic garbage collector (issue #25).

asyncio's StreamReader stores the error its connection was lost with and raises
that same object on every read; a raised exception keeps the frames it passed
through, the reading pump's among them, which refer to the reader: a reference
cycle (reader -> error -> traceback -> frames -> reader) that CPython frees only
in the collector's rare full passes, with the link and the frames it held. The
proxy's own ``disconnect`` and ``truncate`` faults end a link by raising, with the
same effect (a cycle through the handler's frame). In the 10^4-round dense soak
the target's process, which runs the proxy, rose by about 13 MB, a rise not traced
to this (bench/RESULTS.md, "The faulted worker's climb"). As
``test_endpoint_stream.py`` does for the endpoint's FrameReader, these tests end
a link with the collector off and require the link and both its readers freed
once its handler ended (docs/endpoint.md, "The bound").
"""

from __future__ import annotations

import asyncio
import gc
import socket
import struct
import weakref

import pytest

from qconform.adapters import fault_proxy
from qconform.adapters.endpoint import codec, layout
from qconform.adapters.fault_proxy import Fault, FaultProxy

RUN_S = 10.0


def reply_frame(round_id: int) -> bytes:
    """A REPLY of slot 0, generation 1 (its fields zero but the round: the proxy reads no more)."""
    spec = layout.FIELDS[layout.REPLY]
    fields = {n: bytes(32) if k in ("text", "digest") else 0 for n, k in zip(spec.names, spec.kinds)}
    return codec.encode(layout.REPLY, {**fields, "generation": 1, "round": round_id})


async def lost_link(how: str, monkeypatch) -> list[weakref.ref]:
    """One link through the proxy, ended ``how``: ``reset`` (the target resets its connection while the
    proxy reads it) or ``disconnect`` (the proxy's fault on the worker's REPLY). Weak references to the
    link and to the proxy's two readers, once the link's handler ended."""
    refs: list[weakref.ref] = []

    class Watched(fault_proxy.Link):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            refs.append(weakref.ref(self))

    opened = asyncio.open_connection

    async def watched_open(*args, **kwargs):
        reader, writer = await opened(*args, **kwargs)
        refs.append(weakref.ref(reader))
        return reader, writer

    monkeypatch.setattr(fault_proxy, "Link", Watched)
    monkeypatch.setattr(fault_proxy.asyncio, "open_connection", watched_open)

    async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if how == "disconnect":
            writer.write(reply_frame(1))
        with_error = await reader.read()  # until the proxy ends the upstream connection
        del with_error
        writer.close()

    upstream = await asyncio.start_server(worker, "127.0.0.1", 0)
    faults = [Fault("disconnect", 1, 0)] if how == "disconnect" else []
    proxy = FaultProxy("127.0.0.1", upstream.sockets[0].getsockname()[1], faults)
    client_readers: list[asyncio.StreamReader] = []
    original = proxy.connection

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        refs.append(weakref.ref(reader))
        client_readers.append(reader)  # dropped below, before the check
        await original(reader, writer)

    proxy.connection = connection  # type: ignore[method-assign]  # start() serves self.connection
    port = await proxy.start()
    target = socket.create_connection(("127.0.0.1", port))
    deadline = asyncio.get_running_loop().time() + RUN_S
    while len(refs) < 3 and asyncio.get_running_loop().time() < deadline:  # the link and both readers
        await asyncio.sleep(0.005)
    assert len(refs) == 3, "the link was not made"
    if how == "reset":
        target.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    target.close()  # a reset; after a disconnect fault, the proxy already closed its side
    deadline = asyncio.get_running_loop().time() + RUN_S
    while proxy.tasks and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)
    assert not proxy.tasks, "the link's handler did not end"
    client_readers.clear()
    await asyncio.sleep(0.01)
    await proxy.close()
    upstream.close()
    await upstream.wait_closed()
    if how == "disconnect":
        assert proxy.counts["disconnect"] == 1
    return refs


@pytest.mark.parametrize("how", ["reset", "disconnect"])
def test_a_lost_link_is_freed_without_the_collector(how, monkeypatch):
    gc.collect()
    gc.disable()
    try:
        refs = asyncio.run(lost_link(how, monkeypatch))
        alive = [type(ref()).__name__ for ref in refs if ref() is not None]
        assert alive == [], f"a lost link's {alive} wait for the garbage collector"
    finally:
        gc.enable()
