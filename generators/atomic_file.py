"""The one way qconform writes a file: complete or not at all, readable by all.

Every file qconform writes (vector corpus, schemas, index, run and stat reports,
JUnit XML, plots, the last-failures record) goes through :func:`write_files`:

* the parent directories are created;
* each file is first written to a temporary sibling ``.<name>.<pid>.<random>.tmp``
  (same directory, so the rename cannot cross a file system), flushed and
  ``fsync``-ed, given mode 0644, and only then renamed over the target, so a
  reader sees the old file or the new one, never half of one;
* on failure every temporary file of the call is removed and :class:`WriteError`
  names the path that failed and why (a read-only directory, a directory in the
  way, a full disk), in one line.

A process killed with SIGKILL cannot remove its temporaries; the pid in their
name lets :func:`remove_stale_temporaries` (run before every corpus generation)
tell them from those of a writer that is still alive. A temporary without a pid
(the name older versions used) is always stale.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Iterable, Mapping

#: mode of every file qconform writes (rw-r--r--)
FILE_MODE = 0o644
#: ``.<name>.<pid>.<random>.tmp``, or ``.<name>.<random>.tmp`` (tempfile.mkstemp, older versions)
TEMPORARY = re.compile(r"^\.(?P<name>.+?)\.(?:(?P<pid>\d+)\.)?(?P<random>[A-Za-z0-9_]{8,})\.tmp$")


class WriteError(OSError):
    """A file could not be written; the message is one line naming the path."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot write {path}: {reason}")

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.reason}"


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def temporary_name(target: Path) -> Path:
    """The temporary sibling used while ``target`` is being written."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def _file_in_the_way(directory: Path) -> Path | None:
    """The nearest existing ancestor of ``directory`` (itself included) when it is not a directory."""
    for ancestor in (directory, *directory.parents):
        if ancestor.exists() or ancestor.is_symlink():
            return None if ancestor.is_dir() else ancestor
    return None


def _stage(path: Path, data: bytes) -> Path:
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory")
    blocker = _file_in_the_way(path.parent)
    if blocker is not None:  # mkdir would say "File exists", which names neither the file nor the fault
        raise NotADirectoryError(20, f"{blocker} is a file, not a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)  # whatever the umask
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not every platform opens directories
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_files(files: Mapping[Path, bytes], skip_unchanged: bool = False) -> list[Path]:
    """Write every file atomically (module docstring); return the paths actually written.

    All files are staged before the first rename, so a failure while staging
    leaves every target untouched. With ``skip_unchanged`` a file whose bytes are
    already right is left alone (and not returned).
    """
    staged: list[tuple[Path, Path]] = []
    current: Path | None = None
    try:
        for path, data in files.items():
            current = Path(path)
            if skip_unchanged and current.is_file() and current.read_bytes() == data:
                continue
            staged.append((_stage(current, data), current))
        for tmp, path in staged:
            current = path
            os.replace(tmp, path)
        for directory in {path.parent for _, path in staged}:
            _fsync_directory(directory)
    except OSError as exc:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise WriteError(current if current is not None else "?", _reason(exc)) from None
    return [path for _, path in staged]


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write one file atomically."""
    write_files({Path(path): data})


def write_text(path: Path | str, text: str) -> None:
    """Write one UTF-8 text file atomically."""
    write_bytes(path, text.encode("utf-8"))


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` (the writer named in a temporary's name) still runs."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_temporaries(directories: Iterable[Path]) -> list[Path]:
    """Temporaries left in ``directories`` by a writer that is no longer running."""
    found = []
    for directory in directories:
        if not Path(directory).is_dir():
            continue
        for path in sorted(Path(directory).iterdir()):
            match = TEMPORARY.match(path.name)
            if match and path.is_file() and not (match["pid"] and process_alive(int(match["pid"]))):
                found.append(path)
    return found


def remove_stale_temporaries(directories: Iterable[Path]) -> list[Path]:
    """Remove :func:`stale_temporaries` (best effort); return those removed."""
    removed = []
    for path in stale_temporaries(directories):
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed
