"""Result classes: what one vector earned on one adapter (docs/harness.md).

The brief's five classes (``pass``, ``fail``, ``precision``, ``unsupported``,
``error``) plus the three an expectations file introduces: ``xfail`` (a listed
case did not pass, as expected), ``xpass`` (a listed case passed: the entry is
out of date) and ``disabled`` (excluded by a glob, never sent to the adapter).

A run fails exactly when some verdict is *unexpected*: ``fail``, ``error`` or
``xpass`` (BoGo's ``is_unexpected``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "CLASS_ORDER",
    "UNEXPECTED",
    "Diff",
    "Verdict",
    "VerdictClass",
    "brief",
    "errored",
    "failed",
    "passed",
    "precision",
    "unsupported",
]


class VerdictClass(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    PRECISION = "precision"
    UNSUPPORTED = "unsupported"
    ERROR = "error"
    XFAIL = "xfail"
    XPASS = "xpass"
    DISABLED = "disabled"

    def __str__(self) -> str:
        return self.value


#: Display order of the classes in tables and summaries.
CLASS_ORDER: tuple[VerdictClass, ...] = tuple(VerdictClass)

#: Classes that make a run fail.
UNEXPECTED: frozenset[VerdictClass] = frozenset({VerdictClass.FAIL, VerdictClass.ERROR, VerdictClass.XPASS})


def brief(value: object, limit: int = 40) -> str:
    """``str(value)`` for a one-line message, cut short when long (a rational can have 600 digits)."""
    text = str(value)
    return text if len(text) <= limit else f"{text[: limit - 16]}... ({len(text)} chars)"


@dataclass(frozen=True)
class Diff:
    """Where an answer first departs from ``expected``.

    ``path`` names the first divergent field, index or draw, e.g.
    ``counts[17]`` or ``requests[0].draws[2].decision``; ``expected`` and ``got``
    are the decoded values there, written for a person (exact: ints, ``num/den``).
    """

    path: str
    expected: str
    got: str

    def __str__(self) -> str:
        """One line; long values are cut short (:meth:`to_json` keeps them whole)."""
        return f"{self.path}: expected {brief(self.expected, 60)}, got {brief(self.got, 60)}"

    def to_json(self) -> dict:
        return {"path": self.path, "expected": self.expected, "got": self.got}

    @classmethod
    def from_json(cls, obj: dict) -> "Diff":
        return cls(obj["path"], obj["expected"], obj["got"])


@dataclass(frozen=True)
class Verdict:
    """The verdict on one case: class, case id, one-line message and, for
    ``fail``/``precision`` (and the ``xfail``/``xpass`` made from them), the diff."""

    cls: VerdictClass
    case_id: str
    message: str = ""
    diff: Diff | None = None
    #: seconds of adapter time attributed to this case (its share of the batch)
    duration: float = 0.0

    @property
    def unexpected(self) -> bool:
        return self.cls in UNEXPECTED

    @property
    def family(self) -> str:
        return self.case_id.split("/", 1)[0]

    def line(self) -> str:
        """One line for a person: class, id, message and diff."""
        text = f"{self.cls.value.upper()} {self.case_id}"
        if self.message:
            text += f": {self.message}"
        if self.diff is not None and str(self.diff) not in self.message:
            text += f" [{self.diff}]"
        return text

    def with_class(self, cls: VerdictClass, message: str) -> "Verdict":
        return Verdict(cls, self.case_id, message, self.diff, self.duration)

    def with_duration(self, duration: float) -> "Verdict":
        return Verdict(self.cls, self.case_id, self.message, self.diff, duration)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.case_id,
            "family": self.family,
            "class": self.cls.value,
            "message": self.message,
            "duration": round(self.duration, 6),
        }
        if self.diff is not None:
            out["diff"] = self.diff.to_json()
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "Verdict":
        diff = Diff.from_json(obj["diff"]) if obj.get("diff") else None
        return cls(VerdictClass(obj["class"]), obj["id"], obj.get("message", ""), diff, float(obj.get("duration", 0.0)))


def passed(case_id: str, message: str = "") -> Verdict:
    return Verdict(VerdictClass.PASS, case_id, message)


def failed(case_id: str, message: str, diff: Diff | None = None) -> Verdict:
    return Verdict(VerdictClass.FAIL, case_id, message, diff)


def precision(case_id: str, message: str, diff: Diff) -> Verdict:
    return Verdict(VerdictClass.PRECISION, case_id, message, diff)


def errored(case_id: str, message: str) -> Verdict:
    return Verdict(VerdictClass.ERROR, case_id, message)


def unsupported(case_id: str, message: str) -> Verdict:
    return Verdict(VerdictClass.UNSUPPORTED, case_id, message)
