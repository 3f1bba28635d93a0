"""Vector family ``allocation_sparse``: exact top-k dyadic24 rows (R06, R07, R29).

Each case hands one row (weights, or logits plus a temperature) and k. The
implementation selects the global top-k support on the weights (ties to the
lowest ID), normalizes within it, allocates M counts on it by the exact
largest-remainder rule and drops zero counts (R07). Expected: the positive
entries (ids, counts), the selected support, the ticket count, the tie and
selection gaps, and the FP64 near-tie bound over the support.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import TYPE_CHECKING, Iterator

from qconform.generators.encoding import decode_blob, decode_rational, encode_blob, encode_rational, f32_bits
from qconform.generators.families.allocation_dense import (
    COUNT,
    FP64_FIELDS,
    LOGIT_FIELDS,
    PRODUCTION_SEED,
    ROW_INPUTS,
    RowSource,
    allocation_flags,
    exact_f32,
    expected_weight_bits,
    fp64_flip_rows,
    log_uniform,
    numeric_flags,
    production_row,
    resolve,
    row_source,
    run_fp64,
    uniform_logits,
)
from qconform.generators.families.allocation_dense import (
    NOTES as DENSE_NOTES,
)
from qconform.generators.registry import Case, Family, FuzzHooks, Group, Labels, Note
from qconform.generators.schemas import blob_schema
from qconform.generators.schemas import closed_object as closed
from qconform.spec.allocation import allocate_sparse
from qconform.spec.allocation_fp64 import allocate_dense_fp64, fp64_row_error_bound, fp64_sparse_may_differ
from qconform.spec.errors import SpecError
from qconform.spec.floats import F32_NEG_INF
from qconform.spec.sparse_support import CANDIDATE_K, SCREEN_KS

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

RULES = ("R04", "R05", "R06", "R07")

SHARED_NOTES = ("EXACT_TIE", "FP64_DIFFERS", "MASKED_LOGITS", "LOGIT_PIPELINE", "PRODUCTION_VOCAB", "RANDOM_ROW")

NOTES = {
    **{name: DENSE_NOTES[name] for name in SHARED_NOTES},
    "K_ONE": Note(
        "EDGE_CASE",
        "k = 1: the single heaviest token (lowest ID among equals) gets all M counts.",
        "Catches an off-by-one in the selection size.",
    ),
    "K_EQUALS_V": Note(
        "EDGE_CASE",
        "k = V: the sparse row equals the dense allocation, zero counts dropped.",
        "Catches a selection that drops a token when nothing is excluded.",
    ),
    "SELECTION_TIE": Note(
        "EDGE_CASE",
        "Equal weights straddle the k-th place (selection_gap = 0): the lowest IDs are selected (R07, R30).",
        "Catches top-k tie breaking by highest ID, by sort instability or by shard order.",
    ),
    "SUPPORT_FLOORS_TO_ZERO": Note(
        "EDGE_CASE",
        "A selected token's quota within the support floors to zero and gets no ticket: it is dropped from the row (R07).",
        "Catches sparse rows that keep zero counts (noncanonical) or force them to 1.",
    ),
    "ZERO_WEIGHT_SELECTED": Note(
        "EDGE_CASE",
        "Fewer than k weights are positive: zero-weight tokens fill the support (lowest IDs) and are dropped.",
        "Catches rows that list zero-weight tokens or refuse k above the positive count.",
    ),
    "SUPPORT_NORMALIZATION": Note(
        "FUNCTIONALITY",
        "The excluded mass is large, so normalizing within the support differs visibly from global normalization (R07).",
        "Catches allocation of M * w / W_global on the support (the counts would not sum to M) or renormalization of "
        "rounded global probabilities.",
    ),
    "R29_SUPPORT": Note(
        "FUNCTIONALITY",
        "k = 16, 32 or 64 at V = 129280: the development screens and the initial sparse candidate (R29).",
        "Catches selection or allocation that only works at small V or small k.",
    ),
}


def sparse_answer(source: RowSource, k: int) -> dict:
    """The expected object of a top-k row: the sparse entries, the support and its margins
    (the FP64 fields over the support's weights), and a logits row's fields."""
    row = resolve(source)
    alloc = allocate_sparse(row.weights, k)
    return {
        "ids": encode_blob("i32", alloc.ids),
        "counts": encode_blob("u32", alloc.counts),
        "support": encode_blob("i32", alloc.support),
        "remaining": alloc.remaining,
        "tie_gap": encode_rational(alloc.tie_gap),
        "selection_gap": encode_rational(alloc.selection_gap),
        "fp64_error_bound": encode_rational(fp64_row_error_bound([row.weights[v] for v in alloc.support])),
        "fp64_may_differ": fp64_sparse_may_differ(row.weight_bits, row.weight_dtype, row.weights, alloc),
        **row.logit_fields,
    }


def solve(case_input: dict) -> dict:
    """The spec's answer to one row and k: its exact sparse row, or the refusal code."""
    try:
        return sparse_answer(row_source(case_input), case_input["k"])
    except SpecError as error:
        return {"error": error.code}


def sparse_case(name: str, comment: str, flags: tuple[str, ...], source: RowSource, k: int) -> Case:
    """A case whose expected answer is :func:`solve` of its input. The FP64 recipe
    selects the same support (weights compare exactly), so the numeric flags come
    from running it on the support's weights."""
    case_input = {**source.input_json(), "k": k}
    expected = solve(case_input)
    assert "error" not in expected, (name, expected)
    bits, dtype = expected_weight_bits(source, expected)
    support = decode_blob(expected["support"], "i32")[0]
    entries = dict(zip(decode_blob(expected["ids"], "i32")[0], decode_blob(expected["counts"], "u32")[0]))
    fp64_counts = run_fp64(allocate_dense_fp64, [bits[v] for v in support], dtype)
    flags = numeric_flags(flags, expected, fp64_counts, [entries.get(v, 0) for v in support])
    if decode_rational(expected["selection_gap"]) == 0:
        flags += ("SELECTION_TIE",)
    rules = RULES + (("R29",) if "R29_SUPPORT" in flags else ())
    return Case(name=name, comment=comment, rules=rules, flags=flags, input=case_input, expected=expected)


def size_cases() -> Iterator[Case]:
    rng = random.Random(0x5BA5E)
    row = RowSource.f32(log_uniform(rng, 16, 9))
    yield sparse_case("k1-v16", "k = 1 over 16 random weights.", ("K_ONE", "RANDOM_ROW"), row, 1)
    yield sparse_case("k16-v16", "k = V = 16.", ("K_EQUALS_V", "RANDOM_ROW"), row, 16)
    yield sparse_case(
        "k8-v64",
        "k = 8 over 64 random weights.",
        ("RANDOM_ROW", "SUPPORT_NORMALIZATION"),
        RowSource.f32(log_uniform(rng, 64, 3)),
        8,
    )
    yield sparse_case(
        "k40-v300", "k = 40 over 300 random weights.", ("RANDOM_ROW",), RowSource.f32(log_uniform(rng, 300, 14)), 40
    )


def tie_cases() -> Iterator[Case]:
    yield sparse_case(
        "selection-tie",
        "Weights 5, 3, 3, 3, 1, 3 with k = 2: of the four 3s, ID 1 is selected.",
        (),
        RowSource.f32([5.0, 3.0, 3.0, 3.0, 1.0, 3.0]),
        2,
    )
    yield sparse_case(
        "selection-tie-high-first",
        "Ties at the k-th place where the tied IDs straddle a heavier token.",
        (),
        RowSource.f32([0.5, 2.0, 0.5, 4.0, 0.5, 0.5]),
        3,
    )
    yield sparse_case(
        "allocation-tie-in-support",
        "Three equal weights in a k = 3 support: the ticket goes to the lowest ID.",
        (),
        RowSource.f32([0.1, 2.0, 0.2, 2.0, 2.0, 0.3]),
        3,
    )


def drop_cases() -> Iterator[Case]:
    yield sparse_case(
        "support-floors-to-zero",
        "A support member of weight 2^-40 beside weight 1 gets count 0.",
        ("SUPPORT_FLOORS_TO_ZERO",),
        RowSource.f32([2.0**-40, 1.0, 2.0**-45, 0.5, 2.0**-41]),
        3,
    )
    yield sparse_case(
        "zero-weights-selected",
        "Two positive weights, k = 4: zero-weight IDs 0 and 2 fill the support.",
        ("ZERO_WEIGHT_SELECTED",),
        RowSource.f32([0.0, 2.0, 0.0, 1.0, 0.0]),
        4,
    )
    yield sparse_case(
        "support-count-one",
        "Weights 1, 3 * 2^-25, 2^-30 with k = 2: the second support member's quota is just below 1.5, so it "
        "keeps count 1 (kept, not dropped) and token 0 the other M - 1.",
        (),
        RowSource.f32([1.0, 3 * 2.0**-25, 2.0**-30]),
        2,
    )


def logit_cases() -> Iterator[Case]:
    rng = random.Random(0x70C)
    logits = uniform_logits(rng, 64, 4)
    for v in (1, 2, 40, 63):
        logits[v] = float("-inf")
    yield sparse_case(
        "logits-masked-k8",
        "k = 8 from 64 logits with four masks at T = 0.8.",
        ("LOGIT_PIPELINE", "MASKED_LOGITS"),
        RowSource.logits(logits, 0.8),
        8,
    )
    yield sparse_case(
        "logits-k-above-unmasked",
        "k = 5 but only 3 logits are unmasked: masked IDs fill the support.",
        ("LOGIT_PIPELINE", "MASKED_LOGITS", "ZERO_WEIGHT_SELECTED"),
        RowSource(
            "logits",
            [F32_NEG_INF, f32_bits(1.0), F32_NEG_INF, f32_bits(2.0), f32_bits(1.0)] + [F32_NEG_INF] * 3,
            f32_bits(1.0),
        ),
        5,
    )
    yield sparse_case(
        "logits-equal-at-k",
        "Equal logits at the k-th place.",
        ("LOGIT_PIPELINE",),
        RowSource.logits([0.5, 3.0, 0.5, 0.5, 2.0, 0.5], 1.0),
        3,
    )


def fp64_cases() -> Iterator[Case]:
    bits = fp64_flip_rows(0x5F64, 1, larger_first=True)[0]
    extra = [exact_f32(Fraction(1, 1 << 100))] * 3
    yield sparse_case(
        "fp64-flip-in-support",
        "An FP64 near-tie row as the support, three tiny weights excluded.",
        (),
        RowSource("f32", extra[:1] + bits + extra[1:]),
        len(bits),
    )


def production_cases() -> Iterator[Case]:
    source = RowSource("f32", production_row(PRODUCTION_SEED))
    for k in sorted((CANDIDATE_K, *SCREEN_KS)):
        yield sparse_case(
            f"v129280-k{k}",
            f"Top-{k} of a softmax-like row over V = 129280.",
            ("PRODUCTION_VOCAB", "R29_SUPPORT"),
            source,
            k,
        )


def build() -> Iterator[Group]:
    yield Group("support_size", "k = 1, k < V and k = V.", RULES, list(size_cases()))
    yield Group("ties", "Selection and allocation ties, decided by the lowest ID.", RULES, list(tie_cases()))
    yield Group("dropped_entries", "Support members that end with count 0 are dropped.", RULES, list(drop_cases()))
    yield Group("logits", "Top-k rows from logits (R05).", RULES, list(logit_cases()))
    yield Group("fp64_near_ties", "An FP64 near-tie inside the support.", RULES, list(fp64_cases()))
    yield Group("production_vocab", "k = 16, 32, 64 at V = 129280 (R29).", RULES + ("R29",), list(production_cases()))


SPARSE_FIELDS = {
    "ids": blob_schema("i32"),
    "counts": blob_schema("u32"),
    "support": blob_schema("i32"),
    "remaining": COUNT,
    "tie_gap": {"$ref": "#/$defs/rational"},
    "selection_gap": {"$ref": "#/$defs/rational"},
    **FP64_FIELDS,
}
K = {"type": "integer", "minimum": 1}


# --- fuzzing ------------------------------------------------------------------------------------


def fuzz_strategy() -> SearchStrategy[dict]:
    from qconform.generators import fuzz_inputs

    return fuzz_inputs.allocation_sparse_inputs()


def fuzz_labels(case_input: dict, expected: dict) -> Labels:
    return RULES, allocation_flags(expected)


FAMILY = Family(
    name="allocation_sparse",
    description="Exact sparse top-k dyadic24 allocation (R07): select the global support, normalize within it, "
    "allocate M, drop zero counts.",
    rules=RULES + ("R29",),
    notes=NOTES,
    margins=("remaining", "tie_gap", "selection_gap", "fp64_error_bound", "fp64_may_differ", "exp_margin_ulp"),
    build=build,
    solve=solve,
    input_schema={"oneOf": [closed({**fields, "k": K}) for fields in ROW_INPUTS]},
    expected_schema={"oneOf": [closed(SPARSE_FIELDS), closed({**SPARSE_FIELDS, **LOGIT_FIELDS})]},
    comparator="allocation",
    fuzz=FuzzHooks(inputs=fuzz_strategy, labels=fuzz_labels),
)
