"""qconform: conformance kit for sampled-draft ("q") speculative decoding.

``qconform.__version__`` is read from the installed package's metadata on first use, not at
import: ``importlib.metadata`` is a third of the package's import time, and every command and
every adapter child imports this package before it starts anything (issue #24, start-up).
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'qconform' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("qconform")
    except PackageNotFoundError:  # running from a source tree without install
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
