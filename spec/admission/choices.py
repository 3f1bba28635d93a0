"""Exact enumeration of a finite random procedure, by replaying its choices (R36).

The auditor never samples. A procedure receives a :class:`Choices` and asks it
for each random choice it makes, with that choice's finite law in exact
rationals. :func:`exact_law` runs the procedure once per path of choices: a run
that asks for a choice past the end of its path stops there
(:class:`Unexplored`), and the path is extended by every value of positive
probability. A completed run adds the product of its choices' probabilities to
the mass of its outcome. The procedure must be a deterministic function of the
answers it gets and make finitely many choices on every path.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Hashable, Sequence, TypeVar

from qconform.spec.rules import defines

T = TypeVar("T", bound=Hashable)
Option = tuple[Hashable, Fraction]


class Unexplored(BaseException):
    """A run asked for a choice past the end of its path.

    A ``BaseException``, so that a policy's ``except Exception`` cannot swallow it.
    """

    def __init__(self, options: tuple[Option, ...]) -> None:
        super().__init__("choice past the end of the path")
        self.options = options


class Choices:
    """The answers to one run's random choices, replayed from ``path`` in order."""

    def __init__(self, path: Sequence[Hashable] = ()) -> None:
        self.path = tuple(path)
        self.made = 0

    def choose(self, options: Sequence[Option]) -> Hashable:
        """The next answer of the path; past its end, stop the run with ``options``."""
        if self.made < len(self.path):
            value = self.path[self.made]
            self.made += 1
            return value
        raise Unexplored(tuple(options))


@defines("R36")
def categorical_options(probabilities: Sequence[Fraction]) -> list[Option]:
    """The tokens of positive probability, each with its probability."""
    return [(token, probability) for token, probability in enumerate(probabilities) if probability > 0]


@defines("R36")
def bernoulli_options(probability: Fraction) -> list[Option]:
    """``True`` with ``probability``, ``False`` otherwise (only outcomes of positive probability)."""
    return [(value, share) for value, share in ((True, probability), (False, 1 - probability)) if share > 0]


@defines("R36")
def exact_law(procedure: Callable[[Choices], T]) -> dict[T, Fraction]:
    """The exact law of ``procedure``'s outcome over all paths of its choices."""
    law: dict[T, Fraction] = {}
    pending: list[tuple[tuple[Hashable, ...], Fraction]] = [((), Fraction(1))]
    while pending:
        path, weight = pending.pop()
        try:
            outcome = procedure(Choices(path))
        except Unexplored as branch:
            for value, probability in reversed(branch.options):
                pending.append((path + (value,), weight * probability))
            continue
        law[outcome] = law.get(outcome, Fraction(0)) + weight
    return law
