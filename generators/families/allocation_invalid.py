"""Vector family ``allocation_invalid``: rows the allocation must refuse (R05, R07).

One case per refusal of R05 (NaN, +inf and negative weights, -inf weights,
zero mass, an empty row, NaN and +inf logits, every logit masked, a draft
temperature that is not finite positive) and of R07 (k outside 1..V). The
expected output is only the stable error code; branch on ``result`` first.
When a row has several problems the code is decided by class priority, not by
token ID (see :mod:`qconform.spec.weights`); two cases pin that order.

The inputs are ``allocation_dense`` rows, or ``allocation_sparse`` rows when
they carry ``k``, so :func:`solve` is those families' solve: the spec decides
the code, the generator only checks that it refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from qconform.generators import precedence
from qconform.generators.encoding import f32_bits
from qconform.generators.families import allocation_dense, allocation_sparse
from qconform.generators.families.allocation_dense import ROW_INPUTS, RowSource
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import closed_object as closed
from qconform.spec.errors import ERROR_CODES
from qconform.spec.floats import F32_NEG_INF, F32_POS_INF, F32_QUIET_NAN, F32_SIGN

NAN = float("nan")
INF = float("inf")
F64_NAN = 0x7FF8000000000000
F64_NEG_INF = 0xFFF0000000000000

NOTES = {
    "NON_FINITE_WEIGHT": Note(
        "MALFORMED_INPUT",
        "A NaN or +inf weight (R05).",
        "Catches an allocation that propagates NaN into counts or lets +inf take all the mass.",
    ),
    "NEGATIVE_WEIGHT": Note(
        "MALFORMED_INPUT",
        "A negative weight, or -inf given as a weight (not a logit mask) (R05).",
        "Catches clipping negative weights to zero instead of refusing them.",
    ),
    "ZERO_MASS": Note(
        "MALFORMED_INPUT",
        "No positive weight, including a row of -0.0 (R05).",
        "Catches a division by a zero total (NaN counts, or a recovered token outside the vocabulary).",
    ),
    "EMPTY_ROW": Note("MALFORMED_INPUT", "A row with no entries.", "Catches out-of-bounds reads on an empty row."),
    "BAD_LOGIT": Note(
        "MALFORMED_INPUT",
        "A NaN or +inf logit, or one whose FP32 quotient by T overflows to +inf (R05). Only -inf is a mask.",
        "Catches a softmax that silently turns NaN / +inf into a mask or a point mass.",
    ),
    "ALL_MASKED": Note(
        "MALFORMED_INPUT",
        "Every scaled logit s_v = f32(z_v / T) is -inf: masked, or a finite logit whose FP32 quotient overflows "
        "to -inf in the stated order (R05); nothing can be proposed.",
        "Catches NaN from -inf - (-inf) and a uniform fallback that invents mass.",
    ),
    "BAD_TEMPERATURE": Note(
        "MALFORMED_INPUT",
        "A draft temperature that is zero, negative, NaN or infinite.",
        "Catches a division by zero that turns logits into +-inf or NaN, or a silent greedy fallback.",
    ),
    "BAD_K": Note(
        "MALFORMED_INPUT",
        "A top-k support size outside 1..V (R07).",
        "Catches an empty support or reads past the vocabulary.",
    ),
    "REFUSAL_PRIORITY": Note(
        "EDGE_CASE",
        "Several problems in one row: the code is chosen by class (NaN, then +inf, then negative), not by lowest ID.",
        "Pins the code a parallel implementation reports; a different code here is an error-mapping difference.",
    ),
    precedence.FLAG: precedence.NOTE,
}


def solve(case_input: dict) -> dict:
    """The spec's answer to one row: ``allocation_sparse``'s when the input has ``k``, else
    ``allocation_dense``'s; for the rows of this family, ``{"error": code}``."""
    if "k" in case_input:
        return allocation_sparse.solve(case_input)
    return allocation_dense.solve(case_input)


def invalid_case(name: str, comment: str, flags: tuple[str, ...], source: RowSource, k: int | None = None) -> Case:
    """A refused row; the expected code is :func:`solve` of its input (it must be a refusal)."""
    case_input = source.input_json() if k is None else {**source.input_json(), "k": k}
    expected = solve(case_input)
    assert set(expected) == {"error"}, f"invalid case {name} was accepted by the spec"
    return Case(
        name=name,
        comment=comment,
        rules=(ERROR_CODES[expected["error"]][0],),
        flags=flags,
        input=case_input,
        expected=expected,
        result="invalid",
    )


def weight_cases() -> Iterator[Case]:
    yield invalid_case(
        "nan-weight-f32", "A NaN among FP32 weights.", ("NON_FINITE_WEIGHT",), RowSource.f32([1.0, NAN, 2.0])
    )
    yield invalid_case(
        "nan-weight-f64",
        "A NaN among FP64 weights.",
        ("NON_FINITE_WEIGHT",),
        RowSource("f64", [0x3FF0000000000000, F64_NAN]),
    )
    yield invalid_case("pos-inf-weight", "A +inf weight.", ("NON_FINITE_WEIGHT",), RowSource.f32([1.0, 2.0, INF]))
    yield invalid_case("negative-weight", "A weight of -1.", ("NEGATIVE_WEIGHT",), RowSource.f32([1.0, -1.0, 2.0]))
    yield invalid_case(
        "negative-subnormal-weight",
        "The negative subnormal -2^-149.",
        ("NEGATIVE_WEIGHT",),
        RowSource("f32", [0x3F800000, F32_SIGN | 1]),
    )
    yield invalid_case(
        "neg-inf-weight-f32",
        "-inf given as a weight (masks are logits only).",
        ("NEGATIVE_WEIGHT",),
        RowSource("f32", [0x3F800000, F32_NEG_INF]),
    )
    yield invalid_case(
        "neg-inf-weight-f64",
        "-inf given as an FP64 weight.",
        ("NEGATIVE_WEIGHT",),
        RowSource("f64", [F64_NEG_INF, 0x3FF0000000000000]),
    )
    yield invalid_case("zero-mass", "All weights +0.0.", ("ZERO_MASS",), RowSource.f32([0.0] * 5))
    yield invalid_case(
        "zero-mass-negative-zeros", "All weights -0.0.", ("ZERO_MASS",), RowSource("f32", [F32_SIGN] * 3)
    )
    yield invalid_case("empty-row", "No weights at all.", ("EMPTY_ROW",), RowSource("f32", []))
    yield invalid_case(
        "priority-negative-before-nan",
        "A negative weight at ID 0 and a NaN at ID 2: NAN_WEIGHT.",
        ("REFUSAL_PRIORITY", "NON_FINITE_WEIGHT", "NEGATIVE_WEIGHT"),
        RowSource.f32([-1.0, 1.0, NAN]),
    )
    yield invalid_case(
        "priority-negative-before-inf",
        "A negative weight at ID 0 and +inf at ID 1: POS_INF_WEIGHT.",
        ("REFUSAL_PRIORITY", "NON_FINITE_WEIGHT", "NEGATIVE_WEIGHT"),
        RowSource.f32([-2.0, INF]),
    )


def logit_cases() -> Iterator[Case]:
    yield invalid_case("nan-logit", "A NaN logit.", ("BAD_LOGIT",), RowSource.logits([0.0, NAN, 1.0], 1.0))
    yield invalid_case("pos-inf-logit", "A +inf logit.", ("BAD_LOGIT",), RowSource.logits([0.0, INF, 1.0], 1.0))
    yield invalid_case(
        "logit-overflow-pos-inf",
        "3e38 / 0.5 overflows FP32 to +inf.",
        ("BAD_LOGIT",),
        RowSource.logits([3.0e38, 1.0], 0.5),
    )
    yield invalid_case(
        "all-masked", "Every logit is -inf.", ("ALL_MASKED",), RowSource("logits", [F32_NEG_INF] * 4, f32_bits(1.0))
    )
    yield invalid_case(
        "all-overflow-to-neg-inf",
        "-3e38 / 0.5 overflows FP32 to -inf for both tokens: ALL_MASKED in "
        "the stated FP32 order, though the exact softmax is uniform.",
        ("ALL_MASKED",),
        RowSource.logits([-3.0e38, -3.0e38], 0.5),
    )
    yield invalid_case("empty-logits", "No logits at all.", ("EMPTY_ROW",), RowSource("logits", [], f32_bits(1.0)))
    yield invalid_case(
        "priority-nan-before-inf",
        "+inf logit at ID 0, NaN at ID 1: NAN_LOGIT.",
        ("REFUSAL_PRIORITY", "BAD_LOGIT"),
        RowSource("logits", [F32_POS_INF, F32_QUIET_NAN], f32_bits(1.0)),
    )


def temperature_cases() -> Iterator[Case]:
    logits = [0.5, -1.0, 2.0]
    for name, bits in (
        ("zero", f32_bits(0.0)),
        ("negative-zero", F32_SIGN),
        ("negative", f32_bits(-0.7)),
        ("nan", F32_QUIET_NAN),
        ("pos-inf", F32_POS_INF),
        ("neg-inf", F32_NEG_INF),
    ):
        source = RowSource("logits", [f32_bits(x) for x in logits], bits)
        yield invalid_case(f"temperature-{name}", f"Draft temperature {name}.", ("BAD_TEMPERATURE",), source)


def support_size_cases() -> Iterator[Case]:
    row = RowSource.f32([1.0, 2.0, 3.0, 4.0])
    yield invalid_case("k-zero", "k = 0.", ("BAD_K",), row, 0)
    yield invalid_case("k-above-v", "k = V + 1 = 5.", ("BAD_K",), row, 5)
    yield invalid_case("k-negative", "k = -1.", ("BAD_K",), row, -1)
    yield invalid_case("k-zero-logits", "k = 0 on a logits row.", ("BAD_K",), RowSource.logits([1.0, 0.0], 1.0), 0)


@dataclass
class AllocationDraft:
    """A proposal row being broken: FP32 weights, or FP32 logits and a temperature; ``k`` for top-k."""

    dtype: str
    bits: list[int]
    temperature: int | None = None
    k: int | None = None

    def input_json(self) -> dict:
        source = RowSource(self.dtype, self.bits, self.temperature).input_json()
        return source if self.k is None else {**source, "k": self.k}


#: Rows of ``refusal_order.ALLOCATION_REFUSALS`` that hold for a weights row only, and for a logits row only.
WEIGHT_ROWS, LOGIT_ROWS = {3, 4, 5, 8}, {2, 6, 7, 9}


def allocation_draft(rows: frozenset[int]) -> AllocationDraft:
    """A valid row to break: logits at T = 1 for a logits row, else FP32 weights; k = 2 when row 10 is broken."""
    k = 2 if 10 in rows else None
    if rows & LOGIT_ROWS:
        return AllocationDraft("logits", [f32_bits(x) for x in (1.0, 2.0, -1.0, 0.5)], f32_bits(1.0), k)
    return AllocationDraft("f32", [f32_bits(x) for x in (1.0, 2.0, 0.5, 3.0)], None, k)


def set_bits(index: int, bits: int):
    return lambda d: d.bits.__setitem__(index, bits)


def zero_weights(d: AllocationDraft) -> None:
    d.bits[:] = [0] * len(d.bits)


def mask_logits(d: AllocationDraft) -> None:
    d.bits[:] = [F32_NEG_INF] * len(d.bits)


def empty_row(d: AllocationDraft) -> None:
    d.bits.clear()


def bad_k(d: AllocationDraft) -> None:
    d.k = len(d.bits) + 1


#: Faults of ``refusal_order.ALLOCATION_REFUSALS``, each on its own entry (T = -1 keeps every s_v finite).
ALLOCATION_FAULTS = {
    1: empty_row,
    2: lambda d: setattr(d, "temperature", f32_bits(-1.0)),
    3: set_bits(1, F32_QUIET_NAN),
    4: set_bits(2, F32_POS_INF),
    5: set_bits(3, f32_bits(-1.0)),
    6: set_bits(1, F32_QUIET_NAN),
    7: set_bits(2, F32_POS_INF),
    8: zero_weights,
    9: mask_logits,
    10: bad_k,
}
ALLOCATION_EXCLUSIVE = (
    precedence.exclusive_between(WEIGHT_ROWS, LOGIT_ROWS)
    | precedence.exclusive_between({1}, {3, 4, 5, 6, 7})
    | {frozenset({4, 8}), frozenset({6, 9}), frozenset({7, 9})}
)
ALLOCATION_WHY = (
    "a row is weights or logits; an empty row has no entry to be NaN, +inf or negative; a +inf weight is "
    "positive, so the row has mass; a NaN or +inf s_v is not -inf, so the row is not all masked"
)

ALLOCATION_BREAKS = precedence.Breaks[AllocationDraft](
    family="allocation_invalid",
    base=allocation_draft,
    faults=ALLOCATION_FAULTS,
    encode=AllocationDraft.input_json,
    exclusive=frozenset(ALLOCATION_EXCLUSIVE),
    why=ALLOCATION_WHY,
)


def build() -> Iterator[Group]:
    yield Group("weights", "Weight rows refused by R05.", ("R05",), list(weight_cases()))
    yield Group("logits", "Logit rows refused by R05.", ("R05",), list(logit_cases()))
    yield Group("temperature", "Draft temperatures that are not finite positive.", ("R05",), list(temperature_cases()))
    yield Group("support_size", "Top-k sizes outside 1..V.", ("R07",), list(support_size_cases()))
    yield Group(
        "precedence",
        "Every refusal row alone and every pair that can fail together: the earlier row's code.",
        ("R05", "R07"),
        list(precedence.precedence_cases(ALLOCATION_BREAKS, solve, ("R05", "R07"))),
    )


CODES = sorted(
    {
        "NAN_WEIGHT",
        "POS_INF_WEIGHT",
        "NEGATIVE_WEIGHT",
        "ZERO_MASS",
        "EMPTY_ROW",
        "NAN_LOGIT",
        "POS_INF_LOGIT",
        "ALL_MASKED",
        "BAD_TEMPERATURE",
        "BAD_SUPPORT_SIZE",
    }
)
K = {"type": "integer"}

FAMILY = Family(
    name="allocation_invalid",
    description="Rows the allocation refuses (R05, R07), each with its stable error code.",
    rules=("R05", "R07"),
    notes=NOTES,
    build=build,
    solve=solve,
    input_schema={"oneOf": [closed({**fields, "k": K}, required=sorted(fields)) for fields in ROW_INPUTS]},
    expected_schema=closed({"error": {"enum": CODES}}),
    precedence=ALLOCATION_BREAKS,
)
