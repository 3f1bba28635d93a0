"""Whether a built C extension is current: the digest of its sources, written into it at build time.

qconform's optional C extensions (``generators/_accumulated_stream``,
``generators/_verification_engine``, ``adapters/endpoint/_dense_row``) each have a
NumPy path that gives the same results. A module built from older sources than
the ones beside it (new code pulled, not rebuilt) would be called with the new
code's arguments: ``TypeError: function takes exactly 18 arguments (19 given)``,
or a missing function. So the build (:mod:`qconform.native_build`) passes each
extension the digest of its sources and headers, and their names, as macros,
which the module exposes as ``source_digest`` and ``source_files``; the loader
(:func:`native_extension`) compares the digest with that of the files beside the
module and treats a stale module as an absent one: the NumPy path runs, after one
line on stderr that names the module and how to rebuild it (:data:`STALE_LINE`;
docs/architecture.md, "Native extensions"). Where the sources are not there (an
installed wheel) nothing is compared. Standard library only: the build loads
this file by its path.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: the macros the build defines: the sources' digest (lowercase SHA-256 hex) and their names, relative
#: to the module's own folder, separated by spaces (both C string literals)
DIGEST_MACRO, FILES_MACRO = "QCONFORM_SOURCE_DIGEST", "QCONFORM_SOURCE_FILES"
#: the one line a stale module gets on stderr (docs/architecture.md, "Native extensions")
STALE_LINE = (
    "qconform: stale C extension {module} ({why}): its NumPy path runs instead (same results, slower); "
    "rebuild it: pip install -e . (or, in the checkout: "
    'python -c "from setuptools import setup; setup()" build_ext --inplace)'
)
#: ``why``: built from other sources than the files beside it, or built without a digest (before qconform
#: recorded one, or by other means than its build command)
OTHER_SOURCES, NO_DIGEST = "built from other sources than {files}", "built without a source digest"

#: qualified module name -> the module, or None where it is stale (checked once a process)
checked: dict[str, ModuleType | None] = {}


def sources_digest(directory: Path, names: Sequence[str]) -> str:
    """SHA-256 over each file ``directory / name`` in order: its name, its length, its bytes."""
    digest = hashlib.sha256()
    for name in names:
        data = (directory / name).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def stale_reason(module: ModuleType) -> str | None:
    """Why ``module`` is stale (a ``why`` of :data:`STALE_LINE`), or None: current, or its sources are not
    beside it (an installed wheel), so there is nothing to compare."""
    digest, files = getattr(module, "source_digest", ""), getattr(module, "source_files", "")
    if not digest or not files or module.__file__ is None:
        return NO_DIGEST
    directory, names = Path(module.__file__).resolve().parent, files.split()
    if not all((directory / name).is_file() for name in names):
        return None
    if sources_digest(directory, names) != digest:
        return OTHER_SOURCES.format(files=", ".join(names))
    return None


def native_extension(name: str, switch: str) -> ModuleType | None:
    """The C extension ``name`` (qualified), or None: switched off by the environment variable ``switch``
    set to ``0``, not built (no C compiler where it was installed), or stale (:func:`stale_reason`: one
    :data:`STALE_LINE` on stderr, the first time in the process)."""
    if os.environ.get(switch, "1") == "0":
        return None
    if name not in checked:
        try:
            module = importlib.import_module(name)
        except ImportError:
            return None
        why = stale_reason(module)
        if why is not None:
            print(STALE_LINE.format(module=name, why=why), file=sys.stderr)
        checked[name] = None if why is not None else module
    return checked[name]
