"""The fast paths measured as candidates (issue #21): mutated, with the committed corpus as oracle.

A fast path is spec code that no ``solve`` calls but that claims to compute exactly what
the spec computes, faster (``spec/allocation_certified.py``: the integer-unit and the
certified FP64 evaluations of the dense allocation). It is not normative, so a mutant
of it changes no committed answer of the spec; but as an implementation it must pass
the corpus, and the corpus must be able to tell a wrong one. So ``qconform adequacy``
judges its mutants as it judges a candidate: each committed case that the fast path
takes is answered by it, and the fields it answers are compared with ``expected``; the
first difference (or exception) kills the mutant (docs/adequacy.md, "Fast paths").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from qconform.generators.adequacy.oracle import (
    CRASH,
    DETAIL_LIMIT,
    DRIFT,
    SURVIVED,
    CommittedCase,
    Outcome,
    first_difference,
    module_name,
)
from qconform.generators.encoding import canonical_json, decode_blob, encode_blob, encode_rational


@dataclass(frozen=True)
class FastPath:
    """A fast path: its spec module, the functions of it that answer, and the families whose
    committed cases are their oracle."""

    module: str
    functions: tuple[str, ...]
    families: tuple[str, ...]


#: every fast path of the spec
FAST_PATHS: dict[str, FastPath] = {
    "allocation_certified": FastPath(
        "allocation_certified",
        ("allocate_dense_f32_bits", "allocate_dense_f32_certified"),
        ("allocation_dense", "allocation_invalid"),
    ),
}


def f32_row(case: CommittedCase) -> list[int] | None:
    """The FP32 weight bits a dense-allocation fast path is given for ``case``: its input's f32
    weights, or the FP32 weights a logits row's answer carries; None for a row it does not take
    (sparse, FP64 weights, a logits row refused before its weights exist)."""
    inp = case.input
    if "k" in inp:
        return None
    if "weights" in inp:
        blob = inp["weights"]
        return decode_blob(blob, "f32")[0] if isinstance(blob, dict) and blob.get("dtype") == "f32" else None
    if "weights" in case.expected:
        return decode_blob(case.expected["weights"], "f32")[0]
    return None


def allocation_answer(allocate: Callable, bits: Sequence[int]) -> dict:
    """The fields a dense allocation answers: counts, remaining tickets, tie gap; or the refusal."""
    from qconform.spec.errors import SpecError

    try:
        alloc = allocate(bits)
    except SpecError as error:
        return {"error": error.code}
    return {
        "counts": encode_blob("u32", [int(c) for c in alloc.counts]),
        "remaining": int(alloc.remaining),
        "tie_gap": encode_rational(alloc.tie_gap),
    }


def solve_fast_path(name: str, cases: Mapping[str, Sequence[CommittedCase]]) -> Outcome:
    """Answer every committed case the fast path ``name`` takes, with each of its functions; stop
    at the first answer that differs from ``expected`` (on the fields it answers) or raises."""
    path = FAST_PATHS[name]
    try:
        module = importlib.import_module(module_name(path.module))
        functions = [(f, getattr(module, f)) for f in path.functions]
    except Exception as error:  # noqa: BLE001 - a mutant that breaks the import is killed by a crash
        return Outcome(CRASH, None, f"importing {path.module}: {type(error).__name__}: {error}"[:DETAIL_LIMIT])
    solved = 0
    for family in path.families:
        for case in cases[family]:
            bits = f32_row(case)
            if bits is None:
                continue
            want = case.expected if "error" in case.expected else None
            for function_name, allocate in functions:
                try:
                    got = allocation_answer(allocate, bits)
                except Exception as error:  # noqa: BLE001 - any exception of the fast path kills it
                    detail = f"{function_name}: {type(error).__name__}: {error}"
                    return Outcome(CRASH, case.id, detail[:DETAIL_LIMIT], solved)
                expected = want if want is not None else {k: case.expected[k] for k in got if k in case.expected}
                if canonical_json(got) != canonical_json(expected):
                    detail = f"{function_name}: {first_difference(expected, got)}"
                    return Outcome(DRIFT, case.id, detail[:DETAIL_LIMIT], solved)
            solved += 1
    return Outcome(SURVIVED, None, "", solved)
