"""The ``reference`` adapter: the executable spec itself, as an implementation under test.

For each case it calls ``load_family(family).solve(input)``, the very function the
generator used to write ``expected``; so it passes every vector by construction,
which makes it the harness's own end-to-end check (a reference that does not pass
is a harness or corpus bug, never a kernel bug).
"""

from __future__ import annotations

from typing import Callable, Sequence

from qconform.generators.registry import family_names, load_family
from qconform.harness.adapter import Adapter, AdapterError, Capabilities, Outcome, PrecisionProfile


def solvers() -> dict[str, Callable[[dict], dict]]:
    """family name -> ``solve`` for every registered family that has one.

    A family whose module is not written yet is left out; a module that exists
    but fails to import raises (a broken spec must not look like a missing one).
    """
    found: dict[str, Callable[[dict], dict]] = {}
    for name in family_names():
        try:
            family = load_family(name)
        except ModuleNotFoundError as exc:
            if exc.name != f"qconform.generators.families.{name}":
                raise
            continue
        if family.solve is not None:
            found[name] = family.solve
    return found


class ReferenceAdapter(Adapter):
    """Answers every case with the spec's own ``solve``: exact, on CPU, injected draws."""

    name = "reference"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self._solvers: dict[str, Callable[[dict], dict]] | None = None

    def load_solvers(self) -> dict[str, Callable[[dict], dict]]:
        return solvers()

    @property
    def solvers(self) -> dict[str, Callable[[dict], dict]]:
        if self._solvers is None:
            self._solvers = self.load_solvers()
        return self._solvers

    def capabilities(self) -> Capabilities:
        return Capabilities(families=tuple(self.solvers), injected_draws=True, devices=("cpu",))

    def precision(self) -> PrecisionProfile:
        return PrecisionProfile(notes="the executable spec: exact integers and rationals, no margins")

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        solve = self.solvers[family]
        return [solve_one(solve, case_input) for case_input in inputs]


def solve_one(solve: Callable[[dict], dict], case_input: dict) -> Outcome:
    """The spec's answer for one case; an exception (malformed input) is that case's error."""
    try:
        return solve(case_input)
    except Exception as exc:  # noqa: BLE001 - reported per case
        return AdapterError(f"spec could not solve this input: {type(exc).__name__}: {exc}")
