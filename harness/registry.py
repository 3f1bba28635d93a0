"""The adapters the harness can run, by name.

Built-in adapters are listed in :data:`BUILTIN_ADAPTERS` and imported only when
used (so naming ``reference`` never imports torch). Third-party adapters register
under the entry-point group ``qconform.adapters`` (docs/adapters.md); the entry
point's value is an :class:`Adapter` subclass or a factory ``(device) -> Adapter``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable

from qconform.harness.adapter import ENTRY_POINT_GROUP, Adapter
from qconform.harness.shim_protocol import AdapterStartError


@dataclass(frozen=True)
class BuiltinAdapter:
    """A built-in adapter: ``target`` is ``module:attribute``, called as
    ``attribute(device=..., **kwargs)``."""

    target: str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Callable[..., Adapter]:
        module, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module), attribute)


#: Modes of the deliberately broken ``faulty:<mode>`` adapters (adapters/faulty.py).
FAULTY_MODES: dict[str, str] = {
    "raise": "run_batch raises on the affected cases",
    "hang": "sleeps forever on a batch holding an affected case",
    "wrong_shape": "affected outputs carry a blob whose shape does not match its bytes",
    "wrong_dtype": "affected outputs carry a blob of an unknown dtype",
    "wrong_length": "answers one output fewer than the batch has inputs",
    "nan": "affected outputs hold a NaN, which JSON does not allow",
    "exit": "os._exit(3) on a batch holding an affected case",
    "kill": "killed by SIGKILL on a batch holding an affected case",
    "garbage": "writes a non-JSON line to the protocol stream",
}

BUILTIN_ADAPTERS: dict[str, BuiltinAdapter] = {
    "reference": BuiltinAdapter(
        "qconform.adapters.reference:ReferenceAdapter",
        "the executable spec itself (passes every vector by construction)",
    ),
    "torch": BuiltinAdapter(
        "qconform.adapters.torch_adapter:TorchAdapter",
        "the independent torch candidate (FP64 allocation; CPU, or CUDA with --device cuda)",
    ),
    "noop": BuiltinAdapter(
        "qconform.adapters.noop:NoopAdapter",
        "refuses every case with error code NOOP: well-formed, never an error; measures harness overhead",
    ),
    **{
        f"faulty:{mode}": BuiltinAdapter(
            "qconform.adapters.faulty:FaultyAdapter", f"deliberately broken: {text}", {"mode": mode}
        )
        for mode, text in FAULTY_MODES.items()
    },
}


class UnknownAdapter(AdapterStartError, LookupError):
    """No adapter is registered under the name; the message lists those that are."""

    def __init__(self, name: str, available: list[str]) -> None:
        self.name = name
        self.available = available
        super().__init__(f"unknown adapter {name!r}; available adapters: {', '.join(available)}")


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_adapters() -> dict[str, str]:
    """Adapter name -> one-line description, built-ins first, then entry points."""
    names = {name: builtin.description for name, builtin in BUILTIN_ADAPTERS.items()}
    for name, ep in _entry_points().items():
        names.setdefault(name, f"entry point {ep.value}")
    return names


def load_adapter(name: str, device: str = "cpu") -> Adapter:
    """Construct the adapter ``name`` for ``device`` (in this process).

    Raises :class:`UnknownAdapter` for a name that is neither built in nor
    registered under the ``qconform.adapters`` entry-point group.
    """
    if name in BUILTIN_ADAPTERS:
        builtin = BUILTIN_ADAPTERS[name]
        adapter = builtin.load()(device=device, **builtin.kwargs)
    else:
        found = _entry_points()
        if name not in found:
            raise UnknownAdapter(name, list(available_adapters()))
        adapter = found[name].load()(device)
    if not isinstance(adapter, Adapter):
        raise TypeError(f"adapter {name!r} factory returned {type(adapter).__name__}, not an Adapter")
    return adapter
