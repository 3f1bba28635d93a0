"""The ``reference`` adapter reproduces every committed vector, and ``noop`` fails them all cleanly.

Both run through the real path: a host child process, the shim protocol, the
client's output checks. A reference mismatch is a harness or corpus bug.
"""

from __future__ import annotations

import pytest

from qconform.adapters.noop import NOOP_CODE
from qconform.adapters.reference import solvers
from qconform.generators.corpus import default_vectors_dir
from qconform.generators.registry import family_names, load_family
from qconform.generators.validation import iter_cases
from qconform.harness.adapter import Capabilities, PrecisionProfile
from qconform.harness.transport.client import open_adapter

VECTORS = default_vectors_dir()
COMMITTED = [name for name in family_names() if (VECTORS / f"{name}.json").is_file()]
BATCH = 64


def family_param(name: str):
    try:
        rules = load_family(name).rules
    except ModuleNotFoundError:
        rules = ()
    return pytest.param(name, id=name, marks=pytest.mark.rules(*rules))


def committed_cases(name: str) -> list:
    return list(iter_cases(VECTORS, [name]))


@pytest.fixture(scope="module")
def reference():
    with open_adapter("reference") as client:
        yield client


@pytest.mark.rules()
def test_reference_declares_every_family_with_a_solver_exact_on_cpu(reference):
    config = reference.config
    assert config.name == "reference"
    assert config.capabilities == Capabilities(tuple(solvers()), injected_draws=True, devices=("cpu",))
    assert set(config.capabilities.families) <= set(family_names())
    exact = PrecisionProfile()
    assert (
        config.precision.fp64_allocation,
        config.precision.exp_ulp,
        config.precision.ratio_margin,
        config.precision.residual_margin,
    ) == (exact.fp64_allocation, exact.exp_ulp, exact.ratio_margin, exact.residual_margin)


@pytest.mark.parametrize("family", [family_param(name) for name in COMMITTED])
def test_every_committed_family_has_a_solver(family):
    assert load_family(family).solve is not None, (
        f"family {family} has vectors but no solve(input): the reference adapter cannot run it"
    )


@pytest.mark.parametrize("family", [family_param(name) for name in COMMITTED])
def test_reference_reproduces_every_committed_case(reference, family):
    if family not in reference.config.capabilities.families:
        pytest.skip(f"{family} has no solve yet (see test_every_committed_family_has_a_solver)")
    cases = committed_cases(family)
    mismatches = []
    for start in range(0, len(cases), BATCH):
        chunk = cases[start : start + BATCH]
        outcomes = reference.run_batch(family, [case.input for case in chunk])
        mismatches += [(case.id, outcome) for case, outcome in zip(chunk, outcomes) if outcome != case.expected]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} cases differ; first: {mismatches[0]}"
    assert reference.restarts == 0


@pytest.mark.parametrize("family", [family_param(name) for name in family_names() if name in solvers()])
def test_reference_reproduces_the_generators_cases(reference, family):
    """Also without a committed corpus: the family's own build() against the adapter."""
    cases = [case for group in load_family(family).build() for case in group.tests]
    outcomes = reference.run_batch(family, [case.input for case in cases])
    assert [(c.name, o) for c, o in zip(cases, outcomes)] == [(c.name, c.expected) for c in cases]


@pytest.mark.rules()
def test_noop_refuses_every_case_well_formed():
    families = [name for name in family_names() if (VECTORS / f"{name}.json").is_file()]
    with open_adapter("noop") as client:
        assert client.config.capabilities.families == family_names()
        outcomes = client.run_batch(family_names()[0], [{"anything": 1}, {}])
        for family in families:
            outcomes += client.run_batch(family, [case.input for case in committed_cases(family)][:BATCH])
    assert outcomes and all(outcome == {"error": NOOP_CODE} for outcome in outcomes)
