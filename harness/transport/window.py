"""The block window: one writable shared file through which ``run_block``'s arrays travel both ways.

A block of accumulated cases is megabytes of arrays (``verification_round``: 400 bytes a case,
6.5 MB a block of 16384) and its records a few more. Through the pipe each byte is copied into
the kernel by the harness and out of it by the child, then the records the other way, with a
wake-up per pipe-full: about a fifth of the harness's time per case. Through the **window**
(docs/shim-protocol.md, "Block window") the harness copies the block's arrays once into a
shared file the child has mapped, names their ranges in the request line, and the child writes
its records into a range the request gives it; only the two short lines cross the pipe.

The file is made like the shared arena's (:func:`~qconform.harness.transport.arena.anonymous_file`):
``memfd_create``, else a temporary file unlinked before any byte is written, so no name ever
reaches it and nothing is left behind (``/dev/shm`` or the temporary directory), whoever is
killed and however. It is passed to each child as an inherited descriptor, grown by the harness
as blocks need (never shrunk), and reused for every block: the harness writes a block's ranges only
where no request in flight has its own (with pipelined requests two blocks are in the file at
once, side by side), and copies the records out as their reply arrives.

:class:`BlockWindow` is the harness's side; :class:`WindowMap` the child's (the Python adapter
host's). Where no such file can be made, :meth:`BlockWindow.create` returns None and every block
travels as sections, as before.
"""

from __future__ import annotations

import mmap
import os
import stat
import weakref
from typing import TYPE_CHECKING, Any, Sequence

from qconform.harness.transport.arena import anonymous_file

if TYPE_CHECKING:  # NumPy is imported where a block is placed: the child imports this module without it
    import numpy as np

#: every range of the window starts at a multiple of this many bytes (a cache line: the child's
#: arrays are aligned for any dtype and for vector loads)
ALIGN = 64
#: the window grows by at least this many bytes, and to at least twice its size, at a time
GROWTH = 1 << 20


class WindowError(ValueError):
    """A window range that is not ``[offset, length]`` inside the window; the text says how."""


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def window_range(span: Any, size: int, what: str = "a blob") -> tuple[int, int]:
    """``(start, stop)`` of a ``"window": [offset, length]`` inside a window of ``size`` bytes, or
    :class:`WindowError` (``size`` < 0: no window is attached)."""
    if not (type(span) is list and len(span) == 2 and all(type(n) is int and n >= 0 for n in span)):
        raise WindowError(f"{what} names window range {span!r}: not [offset, length] in bytes")
    start, stop = span[0], span[0] + span[1]
    if size < 0:
        raise WindowError(f"{what} names window bytes [{start}, {stop}), but no window is attached")
    if stop > size:
        raise WindowError(f"{what} names window bytes [{start}, {stop}), outside the {size}-byte window")
    return start, stop


def clear_of(busy: Sequence[tuple[int, int]], size: int) -> int:
    """The lowest aligned offset at which ``size`` bytes touch none of the ``busy`` spans."""
    start = 0
    for low, high in sorted(busy):
        if start + size <= low:
            break
        start = max(start, aligned(high))
    return start


class BlockWindow:
    """The harness's side: the file ``fd`` (passed to every child), mapped read-write, ``size`` bytes."""

    def __init__(self, fd: int) -> None:
        self.fd, self.size = fd, 0
        self._map: mmap.mmap | None = None
        self._finalizer = weakref.finalize(self, os.close, fd)
        self._pool: Any = None  # the records' copies (:meth:`copy_out`)

    @classmethod
    def create(cls) -> BlockWindow | None:
        """An empty window, or None where no shared file can be made (blocks then travel as sections)."""
        fd = anonymous_file("qconform-window")
        return None if fd is None else cls(fd)

    def reserve(self, size: int) -> None:
        """Grow the file and its mapping to hold at least ``size`` bytes (``OSError`` if it cannot)."""
        if size <= self.size:
            return
        new = max(aligned(size), 2 * self.size, GROWTH)
        os.ftruncate(self.fd, new)
        self._map = mmap.mmap(self.fd, new)  # the old mapping goes with its last view
        self.size = new

    def place(
        self, block: dict[str, np.ndarray], answer_bytes: int, busy: Sequence[tuple[int, int]] = ()
    ) -> tuple[dict[str, dict], list[int]]:
        """Copy ``block``'s arrays into the window (each at an aligned offset, one after the other)
        and set aside ``answer_bytes`` after them for the reply: the ``block`` object of the request
        (blobs naming their ``window`` ranges) and the ``[offset, length]`` of the answer range.
        ``busy``: the spans ``(start, stop)`` of the requests still in flight (docs/shim-protocol.md,
        "Pipelined requests"), which the block and its answer range must not touch: they go to the
        lowest aligned offset clear of them. ``OSError`` if the window cannot grow to hold them."""
        import numpy as np

        from qconform.harness.transport.blocks import BLOB_DTYPES, BlockError

        arrays = {name: np.ascontiguousarray(array) for name, array in block.items()}
        offsets, extent = {}, 0
        for name, array in arrays.items():
            if array.dtype not in BLOB_DTYPES:
                raise BlockError(f"no blob dtype holds {array.dtype}")
            offsets[name] = extent
            extent = aligned(extent + array.nbytes)
        base = clear_of(busy, extent + answer_bytes)
        offsets = {name: base + offset for name, offset in offsets.items()}
        end = base + extent
        self.reserve(end + answer_bytes)
        target = self.bytes_at(0, self.size)
        blobs = {}
        for name, array in arrays.items():
            if array.nbytes:
                np.copyto(np.frombuffer(target, array.dtype, array.size, offsets[name]).reshape(array.shape), array)
            blobs[name] = {
                "dtype": BLOB_DTYPES[array.dtype],
                "shape": list(array.shape),
                "window": [offsets[name], array.nbytes],
            }
        return blobs, [end, answer_bytes]

    def copy_out(self, array: np.ndarray) -> np.ndarray:
        """A copy of ``array`` (read from the window) that the next block cannot overwrite, in memory
        reused once no array of it is alive: a fresh 2.5 MB copy of ``verification_round``'s records
        per block cost the kernel a zeroed page for each of its pages, more than the copy itself."""
        import numpy as np

        if self._pool is None:
            from qconform.generators.accumulated import MemoryPool

            # the harness holds at most four batches' records at once (judged, answered, and with
            # pipelined requests the next one's, read by a request behind it; one spare)
            self._pool = MemoryPool(keep=5)
        out = self._pool.take(array.nbytes).view(array.dtype).reshape(array.shape)
        np.copyto(out, array)
        return out

    def bytes_at(self, start: int, stop: int) -> memoryview:
        """Bytes ``[start, stop)`` of the window, in place (valid until the next request is placed)."""
        if self._map is None:
            return memoryview(b"")[start:stop]
        return memoryview(self._map)[start:stop]

    def close(self) -> None:
        """Close the file (idempotent); the mapping goes with its last view."""
        self._finalizer()
        self.fd, self.size, self._map = -1, 0, None


class WindowMap:
    """The child's side: the harness's window file ``fd``, mapped shared and read-write, re-mapped
    whenever a request says it grew."""

    def __init__(self, fd: int) -> None:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"descriptor {fd} is not a file")
        self.fd = fd
        self._map: mmap.mmap | None = None
        self.size = 0

    def view(self, size: Any) -> memoryview:
        """A read-write view of the window's first ``size`` bytes (the request's ``window.bytes``);
        :class:`WindowError` when ``size`` is not a byte count or the file holds fewer bytes."""
        if type(size) is not int or size < 0:
            raise WindowError(f"window.bytes must be a byte count, got {size!r}")
        if size > self.size:
            held = os.fstat(self.fd).st_size
            if held < size:
                raise WindowError(f"the window file holds {held} bytes, fewer than the {size} announced")
            self._map, self.size = mmap.mmap(self.fd, size), size  # the old mapping goes with its last view
        return memoryview(self._map if self._map is not None else b"")[:size]
