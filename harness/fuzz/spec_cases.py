"""The spec's answer to one input, as a case of the corpus: :func:`spec_case`.

The fuzzer (:mod:`qconform.harness.fuzz.driver`) files what it finds in this form, and
``qconform accumulate`` judges a divergent case of a stream in it
(:func:`qconform.harness.run.accumulate.case_vector`). It imports no hypothesis: a run
that judges a few cases does not pay the fuzzer's start-up.

A found vector names the rules it exercises and the family notes its answer shows (the
family's ``fuzz.labels``); the lead may add more flags before committing it.
"""

from __future__ import annotations

import hashlib

from qconform.generators.encoding import canonical_json
from qconform.generators.registry import FUZZ_GROUP, FuzzHooks, load_family


def fuzz_hooks(name: str) -> FuzzHooks:
    """The fuzzing hooks of family ``name``; ValueError if it has none."""
    hooks = load_family(name).fuzz
    if hooks is None:
        raise ValueError(f"family {name} has no fuzzing hooks")
    return hooks


def spec_case(family: str, case_input: dict) -> dict:
    """The spec's case object (id, family, comment, flags, rules, result, input, expected)
    for one fuzzed input: ``expected`` is ``load_family(family).solve(input)``."""
    solve = load_family(family).solve
    assert solve is not None, f"family {family} has no solve"
    expected = solve(case_input)
    rules, flags = fuzz_hooks(family).labels(case_input, expected)
    digest = hashlib.sha256(canonical_json(case_input).encode("ascii")).hexdigest()[:12]
    return {
        "id": f"{family}/{FUZZ_GROUP}/found-{digest}",
        "family": family,
        "comment": "",
        "flags": list(flags),
        "rules": list(rules),
        "result": "invalid" if "error" in expected else "valid",
        "input": case_input,
        "expected": expected,
    }
