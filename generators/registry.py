"""The registry of vector families.

A family module under ``qconform.generators.families`` defines one module-level
``FAMILY = Family(...)``. Its ``build`` callable yields :class:`Group` objects
deterministically: same spec, same bytes, whatever the hash seed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Iterable

from qconform.spec.rules import check_rule_ids

#: Family modules, in corpus order. Add a family by adding its module name here.
FAMILY_MODULES: tuple[str, ...] = (
    "rng_abi",
    "allocation_dense",
    "allocation_sparse",
    "allocation_invalid",
    "categorical_sampling",
    "proposal_chain",
    "proposal_batch",
    "verification_round",
    "distribution",
    "admission",
    "wire_frames",
    "wire_sessions",
    "sharding",
    "target_only",
)

RESULTS = ("valid", "invalid", "acceptable")

#: The group that holds a family's committed fuzz findings (``<family>/fuzz/<name>``):
#: ``qconform generate`` builds it from ``generators/found/<family>.json``
#: (:mod:`qconform.generators.findings`); a family's own ``build`` never yields it.
FUZZ_GROUP = "fuzz"


@dataclass(frozen=True)
class Note:
    """Why a flagged case exists (Wycheproof's notes entry)."""

    bug_type: str
    description: str
    effect: str = ""

    def to_json(self) -> dict:
        out = {"bugType": self.bug_type, "description": self.description}
        if self.effect:
            out["effect"] = self.effect
        return out


@dataclass
class Case:
    """One test: ``input`` goes to the implementation, ``expected`` stays with the harness."""

    name: str
    comment: str
    rules: tuple[str, ...]
    input: dict
    expected: dict
    flags: tuple[str, ...] = ()
    result: str = "valid"


@dataclass
class Group:
    name: str
    description: str
    rules: tuple[str, ...]
    tests: list[Case] = field(default_factory=list)


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    rules: tuple[str, ...]
    notes: dict[str, Note]
    build: Callable[[], Iterable[Group]]
    #: JSON Schema fragments for a case's ``input`` and ``expected`` objects. They may
    #: use ``{"$ref": "#/$defs/<name>"}`` for the shared definitions of
    #: ``qconform.generators.schemas.COMMON_DEFS`` (blob, rational, word32, u64,
    #: f32, qRow, pRows); the full strict file schema is built from them.
    input_schema: dict = field(default_factory=dict)
    expected_schema: dict = field(default_factory=dict)
    #: ``solve(input) -> expected``: the spec's answer for one case input, decoded
    #: from and encoded to the vector JSON. The generator builds inputs and calls it;
    #: the ``reference`` adapter calls the very same function, so the spec is
    #: consulted in exactly one way. Invalid inputs give ``{"error": CODE}``.
    solve: Callable[[dict], dict] | None = None
    #: names of ``expected`` fields that describe the case rather than answer it
    #: (tie gaps, decision margins): an adapter may omit them, the harness reads them
    #: to classify a divergence as ``precision`` and never compares them.
    margins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_rule_ids(self.rules)


def load_family(name: str) -> Family:
    """Import and return the family ``name``; KeyError for an unknown name."""
    if name not in FAMILY_MODULES:
        raise KeyError(name)
    module = importlib.import_module(f"qconform.generators.families.{name}")
    family = module.FAMILY
    if family.name != name:
        raise RuntimeError(f"family module {name} declares FAMILY.name={family.name!r}")
    return family


def all_families() -> list[Family]:
    return [load_family(name) for name in FAMILY_MODULES]
