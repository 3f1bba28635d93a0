"""The optional C extensions of ``generators/`` (built by ``pip install``, pyproject.toml's
ext-modules): the verification_round input stream (``_accumulated_stream.c``) and the exact engine
with its Philox floor (``_verification_engine.c``). Each has a NumPy path that defines the same
arrays, so a missing extension changes no hash, only the speed (docs/accumulated.md)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def optional_extension(name: str, switch: str) -> ModuleType | None:
    """``qconform.generators.<name>``, or None: not built (no C compiler where it was installed),
    or switched off by the environment variable ``switch`` set to ``0``."""
    if os.environ.get(switch, "1") == "0":
        return None
    try:
        return importlib.import_module(f"qconform.generators.{name}")
    except ImportError:
        return None
