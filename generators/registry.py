"""The registry of vector families: the one place a family registers.

A family is a module under ``qconform.generators.families`` that defines one
module-level ``FAMILY = Family(...)``; the modules are found by listing that
package, so adding a family touches its module, its comparator (if it has one)
and its doc, and nothing else (docs/adding-a-family.md). Its ``build`` callable
yields :class:`Group` objects deterministically: same spec, same bytes, whatever
the hash seed. Everything the harness needs to know about a family hangs off its
:class:`Family`: the comparator that judges it, its fuzzing hooks
(:class:`FuzzHooks`) and its statistical-mode hooks (:class:`StatHooks`).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterable

from qconform.spec.rules import check_rule_ids

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from qconform.generators.precedence import Breaks

__all__ = [
    "Case",
    "Family",
    "FuzzHooks",
    "Group",
    "Note",
    "StatHooks",
    "FAMILIES_PACKAGE",
    "FUZZ_GROUP",
    "RESULTS",
    "all_families",
    "family_names",
    "load_family",
]

#: the package whose modules are the families (one ``FAMILY`` each)
FAMILIES_PACKAGE = "qconform.generators.families"

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


#: ``(rules, flags)`` of a found vector
Labels = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class FuzzHooks:
    """What the differential fuzzer (docs/fuzzing.md) needs of a family.

    ``inputs()`` builds the hypothesis strategy of the family's valid case inputs
    (called once, on first use, so that loading a family imports no hypothesis);
    ``labels(input, expected)`` gives the rules and flags of a found vector.
    """

    inputs: Callable[[], SearchStrategy[dict]]
    labels: Callable[[dict, dict], Labels]


@dataclass(frozen=True)
class StatHooks:
    """What statistical mode (docs/stat-mode.md) needs of a family that can be sampled.

    ``per_request``: a ``sample`` answer holds one histogram per request of the case
    (``{"requests": [{"outcomes": [...]}]}``, outcomes carrying ``accepted``), else
    one histogram ``{"outcomes": [...]}`` of emitted sequences. ``laws(input)``: the
    exact law of ``(accepted, emitted)`` of each histogram, as
    :mod:`qconform.spec.outcome_law` computes it.
    """

    per_request: bool
    laws: Callable[[dict], list[dict[tuple[int, tuple[int, ...]], Fraction]]]


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
    #: the module that judges this family's outputs, under ``qconform.harness.judging``:
    #: it defines ``compare(case, output, profile) -> Verdict`` and may define
    #: ``refusal_excuse(case, code, profile) -> str | None``. None: exact equality with
    #: ``expected``, no ``precision`` class (docs/harness.md).
    comparator: str | None = None
    #: the fuzzer's hooks; None: ``qconform fuzz`` does not draw inputs for this family
    fuzz: FuzzHooks | None = None
    #: statistical mode's hooks; None: ``qconform stat`` does not sample this family
    stat: StatHooks | None = None
    #: how each row of the family's refusal precedence table is broken (``generators.precedence.Breaks``:
    #: its ``precedence`` group); None for a family that refuses nothing
    precedence: Breaks[Any] | None = None

    def __post_init__(self) -> None:
        check_rule_ids(self.rules)


@lru_cache(maxsize=None)
def family_names() -> tuple[str, ...]:
    """Every registered family, in name order: the modules of :data:`FAMILIES_PACKAGE`."""
    package = importlib.import_module(FAMILIES_PACKAGE)
    return tuple(sorted(info.name for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_")))


def load_family(name: str) -> Family:
    """Import and return the family ``name``; KeyError for an unknown name."""
    if name not in family_names():
        raise KeyError(name)
    qualified = f"{FAMILIES_PACKAGE}.{name}"
    # once imported, from sys.modules without import_module's machinery (the judge asks per case)
    module: Any = sys.modules.get(qualified) or importlib.import_module(qualified)
    family = module.FAMILY
    if family.name != name:
        raise RuntimeError(f"family module {name} declares FAMILY.name={family.name!r}")
    return family


def all_families() -> list[Family]:
    return [load_family(name) for name in family_names()]
