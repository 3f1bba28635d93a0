"""Vector family ``categorical_sampling``: the proposal rule over dyadic24 q rows (R03, R04, R07, R08).

Each case hands a q row and a list of 24-bit draws; the expected tokens are the
first (global) IDs whose cumulative count is strictly greater than each draw.
Draws sit at 0, M - 1 and on both sides of every cumulative boundary. Also home
of the qRow codec (docs/vector-format.md, "Rows") used by the other families.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Iterator

from qconform.generators import precedence
from qconform.generators.encoding import EncodingError, decode_blob, encode_blob
from qconform.generators.registry import Case, Family, FuzzHooks, Group, Labels, Note
from qconform.generators.schemas import closed_object as closed
from qconform.spec.constants import VOCAB, M
from qconform.spec.errors import SpecError
from qconform.spec.qrow import QRow, RawRow, check_q_rows
from qconform.spec.sampling import sample_qrow

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy


def encode_qrow(row: QRow) -> dict:
    """The JSON object of a q row: dense counts, or sparse ids and counts."""
    if row.ids is None:
        return {"representation": "dense", "counts": encode_blob("u32", row.counts)}
    return {"representation": "sparse", "ids": encode_blob("i32", row.ids), "counts": encode_blob("u32", row.counts)}


def raw_qrow(obj: dict) -> RawRow:
    """(sparse IDs or None, counts) of a q row's JSON object, unchecked."""
    counts, _ = decode_blob(obj["counts"], "u32")
    if obj.get("representation") == "dense":
        return None, counts
    if obj.get("representation") == "sparse":
        return decode_blob(obj["ids"], "i32")[0], counts
    raise EncodingError(f"q row representation {obj.get('representation')!r} is not dense or sparse")


def decode_qrow(obj: dict, vocab: int) -> QRow:
    """The q row of a JSON object over ``vocab`` tokens; SpecError if the row is not legal."""
    ids, counts = raw_qrow(obj)
    check_q_rows(vocab, [(ids, counts)])
    return QRow.dense(counts) if ids is None else QRow.sparse(vocab, ids, counts)


NOTES = {
    "EXTREME_DRAW": Note(
        "EDGE_CASE",
        "The draws 0 and M - 1 = 2^24 - 1.",
        "Catches an off-by-one at either end of the draw range.",
    ),
    "CUMULATIVE_BOUNDARY": Note(
        "EDGE_CASE",
        "Draws C_v - 1 and C_v for every cumulative count C_v < M: the token changes exactly there.",
        "Catches '>=' instead of '>' (the draw C_v must pick the next token) and inclusive prefix-sum off-by-ones.",
    ),
    "ZERO_COUNT": Note(
        "EDGE_CASE",
        "Tokens with zero count, including first and last; they own no draw and are never chosen (R04).",
        "Catches a sampler that can land on a zero-count token at a boundary.",
    ),
    "SPARSE_GLOBAL_ID": Note(
        "FUNCTIONALITY",
        "A sparse row: the answer is the global token ID, not the index within the support (R07).",
        "Catches returning the support index.",
    ),
    "SINGLE_SUPPORT": Note(
        "EDGE_CASE",
        "All M counts on one token: every draw picks it.",
        "Catches degenerate-row handling.",
    ),
    "PRODUCTION_VOCAB": Note(
        "FUNCTIONALITY",
        "A row over the production vocabulary V = 129280.",
        "Catches index width and prefix-sum precision problems that small rows hide.",
    ),
    "RANDOM_ROW": Note(
        "BASIC",
        "A random row and random draws from a fixed generator seed.",
        "General agreement with the rule.",
    ),
    "INVALID_ROW": Note(
        "MALFORMED_INPUT",
        "A row that is not a legal dyadic24 row; it must be refused before sampling (R03, R19).",
        "Catches a sampler that samples from a row with the wrong total or a noncanonical support.",
    ),
    precedence.FLAG: precedence.NOTE,
}

RULES = ("R03", "R04", "R07", "R08")


def boundary_draws(counts: list[int]) -> list[int]:
    """0, M - 1, and C_v - 1, C_v for every cumulative count C_v in (0, M)."""
    draws = {0, M - 1}
    for cumulative in accumulate(counts):
        if 0 < cumulative < M:
            draws.update((cumulative - 1, cumulative))
    return sorted(draws)


def solve(case_input: dict) -> dict:
    """The spec's answer to one input: the token each draw picks, or the row's refusal."""
    try:
        row = decode_qrow(case_input["row"], case_input["vocab"])
        return {"tokens": [sample_qrow(row, u) for u in case_input["draws"]]}
    except SpecError as error:
        return {"error": error.code}


def sampling_case(name: str, comment: str, flags: tuple[str, ...], row: QRow, draws: list[int]) -> Case:
    case_input = {"vocab": row.vocab, "row": encode_qrow(row), "draws": draws}
    return Case(name=name, comment=comment, rules=RULES, flags=flags, input=case_input, expected=solve(case_input))


def random_counts(rng: random.Random, size: int, zeros: int) -> list[int]:
    """``size`` counts summing to M with ``zeros`` random zero entries."""
    live = sorted(rng.sample(range(size), size - zeros))
    cuts = sorted(rng.sample(range(1, M), len(live) - 1))
    parts = [b - a for a, b in zip([0] + cuts, cuts + [M])]
    counts = [0] * size
    for token, part in zip(live, parts):
        counts[token] = part
    return counts


def boundary_cases() -> Iterator[Case]:
    rows = {
        "dense-v4": ([M // 4, M // 2, 0, M // 4], "Dense V = 4 with a zero-count token in the middle."),
        "dense-v5-zero-ends": ([0, 3, M - 10, 7, 0], "Dense V = 5, zero counts at both ends, tiny neighbours."),
        "dense-v3-count-1": ([1, M - 2, 1], "Counts of 1 at both ends: each owns exactly one draw."),
        "dense-v2-halves": ([M // 2, M // 2], "Two halves: the draw M/2 picks token 1."),
    }
    for name, (counts, comment) in rows.items():
        row = QRow.dense(counts)
        flags = ("EXTREME_DRAW", "CUMULATIVE_BOUNDARY") + (("ZERO_COUNT",) if 0 in counts else ())
        yield sampling_case(name, comment, flags, row, boundary_draws(counts))


def sparse_cases() -> Iterator[Case]:
    row = QRow.sparse(16, [2, 7, 15], [M // 8, M // 2, 3 * M // 8])
    yield sampling_case(
        "sparse-v16-k3",
        "Sparse support {2, 7, 15} over V = 16.",
        ("SPARSE_GLOBAL_ID", "CUMULATIVE_BOUNDARY", "EXTREME_DRAW"),
        row,
        boundary_draws(list(row.counts)),
    )
    row = QRow.sparse(VOCAB, [0, 64639, 64640, VOCAB - 1], [5, M // 2, M // 2 - 10, 5])
    yield sampling_case(
        "sparse-v129280-edges",
        "Sparse support at the first, last and TP2 shard-edge IDs.",
        ("SPARSE_GLOBAL_ID", "PRODUCTION_VOCAB", "CUMULATIVE_BOUNDARY", "EXTREME_DRAW"),
        row,
        boundary_draws(list(row.counts)),
    )
    rng = random.Random(0x5A3B1E)
    ids = sorted(rng.sample(range(VOCAB), 32))
    row = QRow.sparse(VOCAB, ids, random_counts(rng, 32, 0))
    yield sampling_case(
        "sparse-v129280-k32",
        "Sparse k = 32 (the initial candidate, R29) over V = 129280.",
        ("SPARSE_GLOBAL_ID", "PRODUCTION_VOCAB", "CUMULATIVE_BOUNDARY", "EXTREME_DRAW"),
        row,
        boundary_draws(list(row.counts)),
    )


def single_support_cases() -> Iterator[Case]:
    draws = [0, 1, M // 2, M - 1]
    yield sampling_case(
        "sparse-support-1",
        "Sparse row with the single ID 9 of V = 10.",
        ("SINGLE_SUPPORT", "SPARSE_GLOBAL_ID", "EXTREME_DRAW"),
        QRow.sparse(10, [9], [M]),
        draws,
    )
    yield sampling_case(
        "dense-support-1-last",
        "Dense V = 6 with all mass on the last token.",
        ("SINGLE_SUPPORT", "ZERO_COUNT", "EXTREME_DRAW"),
        QRow.dense([0] * 5 + [M]),
        draws,
    )
    yield sampling_case(
        "dense-support-1-first",
        "Dense V = 6 with all mass on token 0.",
        ("SINGLE_SUPPORT", "ZERO_COUNT", "EXTREME_DRAW"),
        QRow.dense([M] + [0] * 5),
        draws,
    )


def production_dense_case() -> Case:
    """A dense V = 129280 row: a few hundred live tokens spread over the vocabulary."""
    rng = random.Random(0xD0C5)
    counts = [0] * VOCAB
    live = sorted(rng.sample(range(1, VOCAB - 1), 300)) + [VOCAB - 1]
    for token, count in zip(live, random_counts(rng, len(live), 0)):
        counts[token] = count
    row = QRow.dense(counts)
    boundaries = boundary_draws(counts)
    draws = sorted(set(boundaries[:40] + boundaries[-40:] + [rng.randrange(M) for _ in range(40)]))
    return sampling_case(
        "dense-v129280",
        "Dense V = 129280 row, zero counts on token 0 and most tokens.",
        ("PRODUCTION_VOCAB", "ZERO_COUNT", "CUMULATIVE_BOUNDARY", "EXTREME_DRAW"),
        row,
        draws,
    )


def random_cases() -> Iterator[Case]:
    rng = random.Random(0xCA7E6)
    for index, (size, zeros) in enumerate([(8, 0), (8, 3), (64, 20), (64, 0), (33, 16)]):
        row = QRow.dense(random_counts(rng, size, zeros))
        draws = sorted(rng.randrange(M) for _ in range(16))
        flags = ("RANDOM_ROW",) + (("ZERO_COUNT",) if zeros else ())
        yield sampling_case(
            f"random-v{size}-{index}", f"Random dense row, V = {size}, {zeros} zero counts.", flags, row, draws
        )


def invalid_case(name: str, comment: str, vocab: int, row: dict, draws: tuple[int, ...] = (0,)) -> Case:
    case_input = {"vocab": vocab, "row": row, "draws": list(draws)}
    expected = solve(case_input)
    assert "error" in expected, f"invalid case {name} was accepted by the spec"
    return Case(
        name=name,
        comment=comment,
        rules=("R03", "R07", "R19"),
        flags=("INVALID_ROW",),
        result="invalid",
        input=case_input,
        expected=expected,
    )


def invalid_cases() -> Iterator[Case]:
    def dense(counts: list[int]) -> dict:
        return {"representation": "dense", "counts": encode_blob("u32", counts)}

    def sparse(ids: list[int], counts: list[int]) -> dict:
        return {"representation": "sparse", "ids": encode_blob("i32", ids), "counts": encode_blob("u32", counts)}

    yield invalid_case("dense-sum-m-minus-1", "Counts sum to M - 1.", 3, dense([M // 2, M // 2 - 1, 0]))
    yield invalid_case("dense-sum-m-plus-1", "Counts sum to M + 1.", 3, dense([M // 2, M // 2, 1]))
    yield invalid_case("sparse-unsorted", "Sparse IDs not ascending.", 8, sparse([5, 2], [M // 2, M // 2]))
    yield invalid_case("sparse-duplicate-id", "A duplicated sparse ID.", 8, sparse([2, 2], [M // 2, M // 2]))
    yield invalid_case(
        "sparse-duplicate-zero", "A duplicated sparse ID whose second count is zero.", 8, sparse([2, 2], [M, 0])
    )
    yield invalid_case(
        "sparse-zero-count", "A sparse entry with count zero (noncanonical support).", 8, sparse([1, 2], [M, 0])
    )
    yield invalid_case(
        "sparse-id-out-of-range", "A sparse ID equal to the vocabulary size.", 8, sparse([3, 8], [M // 2, M // 2])
    )
    yield invalid_case("sparse-negative-id", "A negative sparse ID.", 8, sparse([-1, 3], [M // 2, M // 2]))
    yield invalid_case(
        "sparse-length-mismatch",
        "Two sparse IDs and three counts (the counts alone sum to M), and no draws: the row is refused "
        "(BAD_SHAPE) when it is read, whether or not anything is drawn from it.",
        8,
        sparse([1, 3], [M // 2, M // 4, M // 4]),
        draws=(),
    )


@dataclass
class RowDraft:
    """A q row being broken: its vocabulary, representation, IDs (sparse) and counts."""

    vocab: int
    sparse: bool
    ids: list[int]
    counts: list[int]


def row_draft(rows: frozenset[int]) -> RowDraft:
    """A valid row to break: dense (V = 4) for the dense-only row 1, else sparse (V = 8)."""
    if 1 in rows:
        return RowDraft(4, False, [], [M // 2, M // 4, M // 8, M // 8])
    return RowDraft(8, True, [1, 3, 5, 6], [M // 2, M // 4, M // 8, M // 8])


def encode_draft(draft: RowDraft) -> dict:
    if draft.sparse:
        row = {
            "representation": "sparse",
            "ids": encode_blob("i32", draft.ids),
            "counts": encode_blob("u32", draft.counts),
        }
    else:
        row = {"representation": "dense", "counts": encode_blob("u32", draft.counts)}
    return {"vocab": draft.vocab, "row": row, "draws": [0]}


def move_count(draft: RowDraft) -> None:
    """A zero count at index 1, its count moved to index 0 (the sum stays M)."""
    draft.counts[0] += draft.counts[1]
    draft.counts[1] = 0


#: Faults of ``refusal_order.QROW_REFUSALS``: an out-of-range ID goes last (the order stays ascending),
#: an extra ID after it (one more ID than counts, still ascending), two IDs swapped, a count moved.
ROW_BREAKS = precedence.Breaks[RowDraft](
    family="categorical_sampling",
    base=row_draft,
    faults={
        1: lambda d: d.counts.append(0),
        2: lambda d: d.ids.append(d.ids[-1] + 1),
        3: lambda d: d.ids.__setitem__(-1, d.vocab),
        4: lambda d: d.ids.__setitem__(slice(1, 3), d.ids[2:0:-1]),
        5: move_count,
        6: lambda d: d.counts.__setitem__(0, d.counts[0] - 1),
    },
    encode=encode_draft,
    exclusive=precedence.exclusive_between({1}, {2, 3, 4, 5}),
    why="row 1 holds for a dense row only, rows 2-5 for a sparse row only",
)


def build() -> Iterator[Group]:
    yield Group("boundaries", "Small dense rows with every cumulative boundary drawn.", RULES, list(boundary_cases()))
    yield Group("sparse_rows", "Sparse rows: global IDs returned.", RULES, list(sparse_cases()))
    yield Group("single_support", "Rows whose whole mass is on one token.", RULES, list(single_support_cases()))
    yield Group("production_vocab", "A dense row over V = 129280.", RULES, [production_dense_case()])
    yield Group("random_rows", "Random rows and draws.", RULES, list(random_cases()))
    yield Group("invalid_rows", "Illegal rows, refused before any draw.", ("R03", "R07", "R19"), list(invalid_cases()))
    yield Group(
        "precedence",
        "Every refusal row alone and every pair that can fail together: the earlier row's code.",
        ("R03", "R07", "R19"),
        list(precedence.precedence_cases(ROW_BREAKS, solve, ("R03", "R07", "R19"))),
    )


ROW_ERRORS = ["WRONG_TOTAL_MASS", "BAD_SPARSE_SUPPORT", "TOKEN_OUT_OF_RANGE", "BAD_SHAPE", "NOT_DYADIC24"]
DRAWS = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": M - 1}}


# --- fuzzing ------------------------------------------------------------------------------------


def fuzz_strategy() -> SearchStrategy[dict]:
    from qconform.generators import fuzz_inputs

    return fuzz_inputs.categorical_inputs()


def fuzz_labels(case_input: dict, expected: dict) -> Labels:
    """RANDOM_ROW, and the edges the case shows: draws 0 or M - 1, a draw on a cumulative
    boundary, zero-count tokens, a sparse row."""
    flags: tuple[str, ...] = ("RANDOM_ROW",)
    if "error" not in expected:
        draws = set(case_input["draws"])
        counts = decode_qrow(case_input["row"], case_input["vocab"]).dense_counts()
        boundaries = {d for c in accumulate(counts) if 0 < c < M for d in (c - 1, c)}
        flags += ("EXTREME_DRAW",) if draws & {0, M - 1} else ()
        flags += ("CUMULATIVE_BOUNDARY",) if draws & boundaries else ()
        flags += ("ZERO_COUNT",) if 0 in counts else ()
    sparse = case_input["row"]["representation"] == "sparse"
    return RULES, flags + (("SPARSE_GLOBAL_ID",) if sparse else ())


FAMILY = Family(
    name="categorical_sampling",
    description="The proposal rule (R08): first token whose cumulative count exceeds the 24-bit draw.",
    rules=("R03", "R04", "R07", "R08", "R19"),
    notes=NOTES,
    build=build,
    solve=solve,
    input_schema=closed({"vocab": {"type": "integer", "minimum": 1}, "row": {"$ref": "#/$defs/qRow"}, "draws": DRAWS}),
    expected_schema={
        "oneOf": [
            closed({"tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}}}),
            closed({"error": {"enum": ROW_ERRORS}}),
        ]
    },
    fuzz=FuzzHooks(inputs=fuzz_strategy, labels=fuzz_labels),
    precedence=ROW_BREAKS,
)
