"""The optional C extensions of ``generators/`` (built by ``pip install``, pyproject.toml's
ext-modules): the verification_round input stream (``_accumulated_stream.c``) and the exact engine
with its Philox floor (``_verification_engine.c``). Each has a NumPy path that defines the same
arrays, so a missing (or stale) extension changes no hash, only the speed (docs/accumulated.md;
docs/architecture.md, "Native extensions")."""

from __future__ import annotations

from types import ModuleType

from qconform.native_sources import native_extension


def optional_extension(name: str, switch: str) -> ModuleType | None:
    """``qconform.generators.<name>``, or None: not built (no C compiler where it was installed),
    switched off by the environment variable ``switch`` set to ``0``, or stale: built from other
    sources than those beside it, so never called (one line on stderr says how to rebuild it;
    :func:`qconform.native_sources.native_extension`)."""
    return native_extension(f"qconform.generators.{name}", switch)
