"""The corpus's blobs decoded once, at load, into one read-only shared memory arena.

A vector file holds every typed blob in base64 (docs/vector-format.md): that is the
corpus's data format, which a run parses when it loads its cases, like the JSON around
it. :meth:`BlobArena.build` decodes every blob of the loaded cases (inputs and expected
values) once, into one anonymous memory file, and indexes each blob by its base64 string
(corpus strings live as long as the cases; their hash is computed once). Then:

* the client sends an adapter child that attached the arena (docs/shim-protocol.md,
  "Shared arena") a range of it for each such blob instead of its bytes: the child maps
  the file read-only and reads the bytes in place, nothing is copied through the pipe;
* the judge reads an expected blob's bytes from it (:func:`arena_bytes`), with no base64
  decode per judgement.

The file has no name: ``memfd_create`` (Linux), else a temporary file unlinked at once,
before any byte is written, so nothing is left behind whoever is killed, even with
``kill -9``. It is sealed read-only where the system allows. Where no such file can be made
(no ``memfd_create`` and no writable temporary directory), :meth:`BlobArena.build`
returns None and every blob travels inline, as a section, as before: no error.
"""

from __future__ import annotations

import base64
import mmap
import os
import tempfile
import weakref
from typing import Any, Iterable, Iterator

#: the arenas alive in this process, for :func:`arena_bytes`: weak references by ``id``, each dropped
#: by its callback when its arena is collected, or by :meth:`BlobArena.close` (a plain dict: it is read
#: for every blob judged, and iterating a ``WeakSet`` cost more than the blob's lookup)
_LIVE: dict[int, weakref.ref[BlobArena]] = {}


def case_blobs(cases: Iterable[dict]) -> Iterator[str]:
    """The base64 strings of every typed blob in the ``input`` and ``expected`` of ``cases``."""
    stack: list[Any] = []
    for case in cases:
        stack += [case.get("input"), case.get("expected")]
        while stack:
            value = stack.pop()
            if isinstance(value, dict):
                b64 = value.get("b64")
                if isinstance(b64, str):
                    yield b64
                else:
                    stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)


def anonymous_file(label: str = "qconform-arena") -> int | None:
    """A read-write file descriptor of a new file that no name reaches, or None when none can be made
    (``label`` names it in ``/proc/PID/fd`` and nowhere else)."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        try:
            return memfd_create(label, os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0))
        except OSError:
            pass
    try:
        fd, path = tempfile.mkstemp(prefix=f"{label}-")
    except OSError:
        return None
    try:
        os.unlink(path)  # before any byte is written: from here on no name reaches it
    except OSError:
        os.close(fd)
        return None
    return fd


def seal(fd: int) -> None:
    """Forbid every later write, growth and shrink of a ``memfd`` (nothing where sealing is unknown)."""
    try:
        import fcntl

        seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL  # type: ignore[attr-defined]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)  # type: ignore[attr-defined]
    except (ImportError, AttributeError, OSError):
        pass


def write_all(fd: int, chunks: list[bytes]) -> None:
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


class BlobArena:
    """Decoded blobs in one read-only shared file: ``index`` maps a blob's base64 string to
    the ``(offset, length)`` of its bytes; ``fd`` is the file (for the adapter child), ``size``
    its bytes, ``view`` a read-only memoryview of its mapping."""

    def __init__(self, fd: int, size: int, index: dict[str, tuple[int, int]]) -> None:
        self.fd, self.size, self.index = fd, size, index
        self._map = read_only_map(fd, size)
        self.view = memoryview(self._map)
        #: the input objects of the cases the arena was built from, by ``id`` (held, so no other
        #: object takes their ids), and the wire form of each once it was first sent
        #: (:func:`~qconform.harness.transport.shim_protocol.encoded_inputs`)
        self.inputs: dict[int, dict] = {}
        self.wire: dict[int, bytes] = {}
        key = id(self)
        _LIVE[key] = weakref.ref(self, lambda _gone: _LIVE.pop(key, None))

    @classmethod
    def build(cls, blobs: Iterable[str], fd: int | None = None) -> BlobArena | None:
        """The arena of ``blobs`` (base64 strings; repeats stored once, one that does not decode
        left out, so that it travels inline and the checks name it), or None when there are no
        bytes to hold or no shared file can be made. ``fd``: an empty anonymous file to build it in
        (one an adapter's child was handed before the cases were known: client.spawn_early), which
        the arena then owns; it is closed when there is nothing to hold."""
        index: dict[str, tuple[int, int]] = {}
        chunks: list[bytes] = []
        size = 0
        for b64 in blobs:
            if b64 in index:
                continue
            try:
                data = base64.b64decode(b64, validate=True)
            except ValueError:
                continue
            index[b64] = (size, len(data))
            chunks.append(data)
            size += len(data)
        if not size:
            if fd is not None:
                os.close(fd)
            return None
        fd = anonymous_file() if fd is None else fd
        if fd is None:
            return None
        try:
            write_all(fd, chunks)
            seal(fd)
            return cls(fd, size, index)
        except (OSError, ValueError):
            os.close(fd)
            return None

    @classmethod
    def of_cases(cls, cases: Iterable[dict], fd: int | None = None) -> BlobArena | None:
        """The arena of every blob of ``cases`` (case objects with ``input`` and ``expected``), which
        knows their input objects: those are read-only for as long as the arena lives (the runner
        and the judge only read them), so each is encoded for the wire once. ``fd``: as for :meth:`build`."""
        cases = list(cases)
        arena = cls.build(case_blobs(cases), fd)
        if arena is not None:
            arena.inputs = {id(case["input"]): case["input"] for case in cases if isinstance(case.get("input"), dict)}
        return arena

    def bytes_of(self, b64: str) -> memoryview | None:
        """The decoded bytes of the blob whose base64 is ``b64``, in place, or None if not held."""
        span = self.index.get(b64)
        return None if span is None else self.view[span[0] : span[0] + span[1]]

    def to_raw(self, value: Any) -> Any:
        """``value`` with every blob held here in the raw form (``raw``: a memoryview of the arena),
        the others as they are: what an adapter declaring raw blobs gets from the host."""
        if isinstance(value, dict):
            b64 = value.get("b64")
            if isinstance(b64, str):
                data = self.bytes_of(b64)
                if data is None:
                    return value
                return {key: item for key, item in value.items() if key != "b64"} | {"raw": data}
            return {key: self.to_raw(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.to_raw(item) for item in value]
        return value

    def close(self) -> None:
        """Close the file and, unless a view handed out is still alive, unmap it (idempotent)."""
        _LIVE.pop(id(self), None)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            try:
                self.view.release()
                self._map.close()
            except BufferError:  # a view is still held somewhere: the mapping goes with the last one
                pass


def arena_bytes(b64: str) -> memoryview | None:
    """The decoded bytes of the blob ``b64`` from an arena alive in this process, or None."""
    for ref in tuple(_LIVE.values()):
        arena = ref()
        data = None if arena is None else arena.bytes_of(b64)
        if data is not None:
            return data
    return None


def map_arena(fd: int, size: int) -> memoryview:
    """A read-only view of ``size`` bytes of the arena file ``fd`` (the child's side); raises
    ``OSError``/``ValueError`` when it cannot be mapped (not a file, fewer bytes)."""
    if os.fstat(fd).st_size < size:
        raise ValueError(f"arena file holds {os.fstat(fd).st_size} bytes, fewer than the {size} offered")
    return memoryview(read_only_map(fd, size))


def read_only_map(fd: int, size: int) -> mmap.mmap:
    """The first ``size`` bytes of file ``fd``, mapped shared and read-only."""
    if hasattr(mmap, "PROT_READ"):
        return mmap.mmap(fd, size, prot=mmap.PROT_READ)
    return mmap.mmap(fd, size, access=mmap.ACCESS_READ)  # pragma: no cover - Windows: no PROT_READ
