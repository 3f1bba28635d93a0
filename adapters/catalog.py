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

from qconform.adapters.stat_mutants import STAT_MUTANTS
from qconform.adapters.stat_mutants import (
    TILT as TILT,  # re-exported: the harness computes the stat mutants' exact laws
)
from qconform.adapters.tp_emulator.mutants import TP_MUTANTS
from qconform.harness.adapter import ENTRY_POINT_GROUP, Adapter, AdapterStartError


@dataclass(frozen=True)
class BuiltinAdapter:
    """A built-in adapter: ``target`` is ``module:attribute``, called as
    ``attribute(device=..., **kwargs)``."""

    target: str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: the pyproject extra whose packages it imports (named in the error when they are missing)
    extra: str = ""

    def load(self) -> Callable[..., Adapter]:
        module, _, attribute = self.target.partition(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except ImportError as exc:
            if not self.extra:
                raise
            raise MissingExtra(self.extra, exc) from None


class MissingExtra(ImportError):
    """A built-in adapter's optional dependencies are not installed: the message names the extra."""

    def __init__(self, extra: str, cause: ImportError) -> None:
        self.extra = extra
        super().__init__(
            f"it needs the {extra} extra, which is not installed: pip install 'qconform[{extra}]' "
            f"({type(cause).__name__}: {cause})"
        )


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

#: Seeded-bug variants of the torch candidate, ``torch-mutant:<name>`` (adapters/torch_mutants.py,
#: docs/mutants.md): name -> the bug, in one line. ``qconform mutants`` proves the corpus kills each.
TORCH_MUTANTS: dict[str, str] = {
    "correction-reuses-accept-draw": "the correction/bonus draw reuses the ACCEPT draw of its position (noise reuse)",
    "correction-from-proposal-domain": "the correction/bonus draw is read from the PROPOSAL domain (noise reuse)",
    "accept-le": "acceptance uses <=: u32 * q(x) <= p(x) * 2^32, so the boundary (and p(x) = 0 at u32 = 0) accepts",
    "alloc-ties-highest-id": "largest-remainder ties go to the highest token ID instead of the lowest",
    "cumulative-ge": "categorical sampling takes the first cumulative count >= the draw instead of >",
    "q-renormalized-on-target": "the verifier renormalizes q over the target's support instead of using the counts sent",
    "q-point-mass": "the acceptance test treats q as a point mass on the draft (q(x) = 1)",
    "residual-drafted-token-only": "the residual subtracts only the drafted token's q from p",
    "residual-support-only": "the residual ignores tokens outside the sparse q support",
    "rng-keyed-by-batch-row": "every request draws under the batch's first seed, told apart by its batch row",
    "counter-position-off-by-one": "counter word 0 holds position + 1",
    "bonus-from-previous-row": "the bonus is drawn from p_K instead of p_{K+1}",
    "emits-extra-token": "the last emitted token is emitted twice: more than K + 1 tokens after a full acceptance",
    "topk-selected-after-allocation": "sparse top-k normalizes and allocates over the full row, then selects by counts",
    "residual-pad-token": "the residual sampler never refuses: a zero-mass row or an FP32 uniform rounded to 1.0 yields token V",
    "u24-low-bits": "the proposal draw takes the low 24 bits of word 0 instead of the top 24",
    "domain-codes-swapped": "the ACCEPT and CORRECTION domain codes are swapped in counter word 3",
    "key-words-swapped": "key word 0 holds the seed's high 32 bits and key word 1 its low 32 bits",
    "accept-position-off-by-one": "the acceptance test of x_i draws at anchor + i instead of anchor + i - 1",
    "correction-position-off-by-one": "the correction after j accepts draws at anchor + j + 1 instead of anchor + j",
    "budget-off-by-one": "the output budget is read as budget + 1",
    "stop-token-ignored": "stop tokens never end emission",
    "sampled-from-bf16-q": "the draft is sampled from its q rounded to bf16, while the exact q is the one sent",
    "draft-temperature-ignored": "the draft temperature is not applied (T = 1): it went to the other side",
    "request-zero-parameters": "request 0's stop tokens and output budget are applied to every request of the batch",
    "request-zero-temperature": "request 0's draft temperature is applied to every request of a proposal batch",
    "markov-bias-fma": "the Markov bias's multiply-add is contracted into one rounding (an FMA)",
    "unseeded-default-seed": "every request without a seed is keyed by seed 0 instead of its request ID's seed",
}

BUILTIN_ADAPTERS: dict[str, BuiltinAdapter] = {
    "reference": BuiltinAdapter(
        "qconform.adapters.reference:ReferenceAdapter",
        "the executable spec itself (passes every vector by construction)",
    ),
    "torch": BuiltinAdapter(
        "qconform.adapters.torch_adapter:TorchAdapter",
        "the independent torch candidate (FP64 allocation; CPU, or CUDA with --device cuda)",
        extra="torch",
    ),
    "triton": BuiltinAdapter(
        "qconform.adapters.triton_adapter:TritonAdapter",
        "the independent Triton candidate (FP64 allocation; CPU under TRITON_INTERPRET=1, or CUDA with --device cuda)",
        extra="triton",
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
    **{
        f"torch-mutant:{name}": BuiltinAdapter(
            "qconform.adapters.torch_mutants:MutantTorchAdapter",
            f"torch candidate with a seeded bug: {text}",
            {"mutant": name},
            extra="torch",
        )
        for name, text in TORCH_MUTANTS.items()
    },
    **{
        f"torch-tp{shards}": BuiltinAdapter(
            "qconform.adapters.torch_tp:TorchTPAdapter",
            f"the torch candidate sharded over {shards} ranks with torch.distributed (gloo on CPU, NCCL on CUDA)",
            {"shards": shards},
            extra="torch",
        )
        for shards in (2, 4)
    },
    **{
        f"torch-tp2-mutant:{name}": BuiltinAdapter(
            "qconform.adapters.torch_tp:TorchTPAdapter",
            f"TP2 emulator with a seeded bug: {text}",
            {"shards": 2, "mutant": name},
            extra="torch",
        )
        for name, text in TP_MUTANTS.items()
    },
    "torch-partial": BuiltinAdapter(
        "qconform.adapters.torch_partial:TorchPartialAdapter",
        "the torch candidate taking only its ACCEPT draws injected, drawing corrections and bonuses itself "
        "(partial injection)",
    ),
    "torch-partial-mutant:correction-from-p": BuiltinAdapter(
        "qconform.adapters.torch_partial:TorchPartialAdapter",
        "partial-injection torch candidate with a seeded bug: the correction drawn from p, not the residual",
        {"mutant": "correction-from-p"},
    ),
    "torch-native-rng": BuiltinAdapter(
        "qconform.adapters.torch_native:TorchNativeAdapter",
        "the torch candidate drawing from its own torch.Generator (no injected draws): statistical mode",
        extra="torch",
    ),
    **{
        f"torch-native-mutant:{name}": BuiltinAdapter(
            "qconform.adapters.torch_native:TorchNativeAdapter",
            f"native-RNG torch candidate with a seeded bug: {text}",
            {"mutant": name},
            extra="torch",
        )
        for name, text in STAT_MUTANTS.items()
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


#: adapters that are programs of their own, driven as shims in their own environments
#: (docs/engines/README.md); each is the module ``qconform.adapters.<name>``
SHIM_ADAPTERS: dict[str, str] = {
    "vllm": "vLLM's rejection sampler in its own environment (docs/engines/vllm.md); vllm:patch-expand, vllm:triton",
    "transformers": "Hugging Face transformers' _speculative_sampling in its own environment "
    "(docs/engines/transformers.md); transformers:strict-accept",
}


def shim_adapter(spec: str) -> str | None:
    """The :data:`SHIM_ADAPTERS` name that ``spec`` selects (``vllm`` for ``vllm:triton``), if any."""
    base = spec.split(":", 1)[0]
    return base if base in SHIM_ADAPTERS else None


def _shim_module(spec: str) -> Any:
    name = shim_adapter(spec)
    if name is None:
        raise UnknownAdapter(spec, sorted(SHIM_ADAPTERS))
    return importlib.import_module(f"qconform.adapters.{name}")


def shim_adapter_command(spec: str, device: str = "cpu") -> list[str]:
    """The command line of the shim program that serves ``spec`` (a :data:`SHIM_ADAPTERS` name
    with its options); :class:`AdapterStartError` in one line when it cannot be built (an
    unknown option, a missing environment)."""
    from qconform.adapters.engine_env import EngineSetupError

    try:
        return _shim_module(spec).shim_command(spec, device)
    except EngineSetupError as exc:
        raise AdapterStartError(str(exc)) from None


def shim_adapter_start_s(spec: str) -> float:
    """Seconds the shim program that serves ``spec`` may take to start (its answer to
    ``get_config``), as its adapter declares; a start is never given less than the batch timeout."""
    return _shim_module(spec).START_TIMEOUT_S


def available_adapters() -> dict[str, str]:
    """Adapter name -> one-line description, built-ins first, then entry points."""
    names = {name: builtin.description for name, builtin in BUILTIN_ADAPTERS.items()}
    names.update(SHIM_ADAPTERS)
    for name, ep in _entry_points().items():
        names.setdefault(name, f"entry point {ep.value}")
    return names


def load_adapter(name: str, device: str = "cpu") -> Adapter:
    """Construct the adapter ``name`` for ``device`` (in this process).

    Raises :class:`UnknownAdapter` for a name that is neither built in nor
    registered under the ``qconform.adapters`` entry-point group. (A ``tcp://HOST:PORT``
    endpoint is not an adapter of this catalog: the harness's transport serves it,
    :func:`qconform.harness.transport.host.construct_adapter`.)
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
