"""The adapter interface: how an implementation under test plugs into qconform.

An adapter is handed batches of case ``input`` objects of one vector family (never
``expected``) and answers, per case, an output encoded exactly like the family's
``expected`` object (docs/formats/<family>.md), an ``{"error": CODE}`` refusal, or
an "unimplemented" status. Every adapter, in-process or not, is driven through the
same JSON-lines shim protocol (docs/shim-protocol.md) from a child process, so a
crash, hang or ``os._exit`` in the implementation cannot take the harness down.

Third-party adapters register a factory under the entry-point group
``qconform.adapters`` (see docs/adapters.md).
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

__all__ = [
    "ECHO_FAMILY",
    "ENTRY_POINT_GROUP",
    "Adapter",
    "AdapterConfig",
    "AdapterError",
    "AdapterStartError",
    "Capabilities",
    "Outcome",
    "PrecisionProfile",
    "Unimplemented",
    "blob_bytes",
    "owned_blobs",
]

ENTRY_POINT_GROUP = "qconform.adapters"
#: the self-test family of the protocol (docs/adapters.md, ``faulty:<mode>``): no vectors, the right
#: answer is ``{"echo": input}``. A harness knows it, so an adapter that declares it still starts.
ECHO_FAMILY = "echo"
#: the keys of a typed blob (docs/vector-format.md) in the JSON form, its bytes in base64,
#: and in the raw form, its little-endian bytes as they are (docs/adapters.md, "Raw blobs")
B64_BLOB_KEYS = frozenset({"dtype", "shape", "b64"})
RAW_BLOB_KEYS = frozenset({"dtype", "shape", "raw"})


def blob_bytes(blob: dict) -> bytes | memoryview:
    """The bytes of a typed blob in either form: ``raw`` as it is, ``b64`` decoded
    (a ``ValueError`` when it is not base64)."""
    raw = blob.get("raw")
    return raw if raw is not None else base64.b64decode(blob["b64"], validate=True)


def owned_blobs(value: Any) -> Any:
    """``value`` with every raw blob's bytes as ``bytes`` of its own: a raw blob from the shared
    arena (docs/shim-protocol.md, "Shared arena") is a read-only ``memoryview`` into it, which
    cannot be pickled or hashed; an adapter that sends its inputs to other processes, or keeps
    them, calls this first (a copy of those blobs; the rest is shared, not copied)."""
    if isinstance(value, dict):
        raw = value.get("raw")
        if isinstance(raw, memoryview):
            return value | {"raw": raw.tobytes()}
        return {key: owned_blobs(item) for key, item in value.items()}
    if isinstance(value, list):
        return [owned_blobs(item) for item in value]
    return value


@dataclass(frozen=True)
class Capabilities:
    """What an adapter can do.

    ``families``: vector families it runs (others are ``unsupported``);
    ``injected_draws``: whether it takes its random draws from the RNG ABI
    (docs/rng-abi.md), which is what makes draw-for-draw checks possible;
    ``devices``: devices it runs on (``cpu``, ``cuda``...);
    ``sampling``: families whose inputs it samples with its own RNG through
    :meth:`Adapter.sample_batch` (statistical mode, docs/stat-mode.md);
    ``injected_domains``: partial injection (docs/harness.md, "Partial injection"):
    per family, the RNG ABI domains whose draws it takes injected, as
    ``((family, (domain, ...)), ...)``. The family's other domains are drawn by the
    implementation itself: their tokens are checked for support only, and their law
    is left to ``qconform stat``. A family not listed takes every domain injected.
    """

    families: tuple[str, ...]
    injected_draws: bool = True
    devices: tuple[str, ...] = ("cpu",)
    sampling: tuple[str, ...] = ()
    injected_domains: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def domains_of(self, family: str) -> tuple[str, ...] | None:
        """The domains declared injected for ``family``; None when all of them are."""
        return dict(self.injected_domains).get(family)

    def to_json(self) -> dict:
        out = {
            "families": list(self.families),
            "injected_draws": self.injected_draws,
            "devices": list(self.devices),
            "sampling": list(self.sampling),
        }
        if self.injected_domains:
            out["injected_domains"] = {family: list(domains) for family, domains in self.injected_domains}
        return out


@dataclass(frozen=True)
class PrecisionProfile:
    """Declared numerical margins. A divergence is ``precision`` only when it lies
    inside the case's own recorded margin AND inside this profile; otherwise ``fail``.

    * ``fp64_allocation``: allocates counts in FP64 (design's recommendation, R06);
      may differ from the exact allocation where the case says ``fp64_may_differ``.
    * ``exp_ulp``: its exp may misround weights from logits; divergence allowed where
      the case's ``exp_margin_ulp`` is below this many ulps (0 = exact exp required).
    * ``ratio_margin``: acceptance decisions computed approximately; divergence
      allowed where the case's acceptance margin |u/2^32 - p/q| is below it.
    * ``residual_margin``: correction/bonus draws computed approximately; allowed
      where the case's draw margin is below it.
    * ``sum_rel``: the exact sums of the ``sharding`` family (shifted, support,
      remainder and target sums) reduced in floating point (e.g. an FP64
      all-reduce); an answered sum may differ from the exact one by at most this
      relative amount. Every decision (counts, tickets, support, draws) stays exact.
    Margins are strings holding exact rationals ("num/den"), never floats.
    """

    fp64_allocation: bool = False
    exp_ulp: str = "0/1"
    ratio_margin: str = "0/1"
    residual_margin: str = "0/1"
    sum_rel: str = "0/1"
    notes: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Unimplemented:
    """The adapter declares it lacks this operation (BoGo's exit 89)."""

    reason: str = ""


@dataclass(frozen=True)
class AdapterError:
    """The adapter failed on this case (crash, garbage); becomes ``error``."""

    message: str


Outcome = dict | Unimplemented | AdapterError


@dataclass
class AdapterConfig:
    name: str
    capabilities: Capabilities
    precision: PrecisionProfile
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)


class Adapter(ABC):
    """Base class of in-process adapters."""

    #: registry name, e.g. ``torch``
    name: str = "abstract"
    #: True for an adapter that takes its inputs' typed blobs in the raw form
    #: ``{"dtype", "shape", "raw": bytes-like}`` and may answer blobs in it (docs/adapters.md,
    #: "Raw blobs"): the host then hands it the binary payload's sections without base64
    #: round trips. False (the default): every blob in and out is ``{"dtype", "shape", "b64"}``.
    raw_blobs: bool = False

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    @abstractmethod
    def capabilities(self) -> Capabilities: ...

    @abstractmethod
    def precision(self) -> PrecisionProfile: ...

    @abstractmethod
    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        """Run one batch of case inputs of ``family``; one outcome per input, in order."""

    def sample_batch(self, family: str, inputs: Sequence[dict], samples: int, seed: int) -> list[Outcome]:
        """Sample ``samples`` independent rounds of each input of ``family`` with the adapter's
        own RNG; one outcome per input, in order: a histogram of the rounds' outcomes
        (docs/stat-mode.md), a refusal ``{"error": CODE}``, Unimplemented or AdapterError.

        ``seed`` (a 64-bit integer, never repeated within a harness run) should seed the
        draws, so that a run can be reproduced; distinct ``(seed, input index)`` pairs must
        give independent streams. Adapters that do not sample leave this default.
        """
        return [Unimplemented(f"{self.name} does not sample {family}")] * len(inputs)

    def run_block(self, family: str, block: dict[str, Any]) -> Any:
        """Answer a **block** of accumulated cases (docs/accumulated.md, "Blocks"): ``block`` maps
        each of the family's block fields to a NumPy array whose first axis is the case; the
        answer is the cases' records, a NumPy ``uint32`` array ``[cases, record words]``, with
        every word of a case the adapter refuses set to ``0xffffffff``. Adapters without a block
        path leave this default, and the harness sends them the same cases one input object each.
        """
        return Unimplemented(f"{self.name} does not answer blocks of {family}")

    def config(self) -> AdapterConfig:
        return AdapterConfig(self.name, self.capabilities(), self.precision(), self.device)


class AdapterStartError(RuntimeError):
    """The adapter could not be started or its ``get_config`` failed.

    This is a configuration problem of the user (wrong name, wrong command, a
    shim that does not speak the protocol), so it is the one failure that the
    harness raises instead of recording as a per-case ``error``.
    """
