"""Vector family ``outcome_law``: the exact law of one round's outcome, which ``qconform stat`` tests
samples against (docs/stat-mode.md, R09, R11).

An outcome is ``(accepted, emitted)``. Two modes, as statistical mode samples them:

* ``round``: one ``verification_round`` request (its drafts given): draft ``x_i`` is
  accepted with ``ceil(2^32 p_i(x_i) / q_i(x_i)) / 2^32``; at the first rejection a
  correction from the full-vocabulary residual by the 32-bit mass rule; after K
  acceptances the bonus from ``p_{K+1}``; emission ends at a stop token or the budget
  (:func:`qconform.spec.outcome_law.request_outcome_law`).
* ``chain``: a ``distribution`` table (the drafts sampled too):
  :func:`qconform.spec.outcome_law.chain_outcome_law`, ``accepted = len(emitted) - 1``.

The expected answer lists every outcome of positive probability, as exact rationals,
sorted by ``accepted`` then ``emitted``; the probabilities sum to 1. Until this family,
the law that ``stat`` compares with was pinned by unit tests only (issue #21).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterator

from qconform.generators import precedence
from qconform.generators.encoding import encode_rational, encode_u64
from qconform.generators.families import distribution, verification_round
from qconform.generators.families.categorical_sampling import encode_qrow
from qconform.generators.families.distribution import TABLE_BREAKS, TableDraft, table_draft
from qconform.generators.families.verification_round import (
    VERIFICATION_BREAKS,
    BatchDraft,
    batch_draft,
    decode_request,
    dense_q,
    p_row,
    q_as_p,
    sparse_q,
)
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import closed_object as closed
from qconform.spec.constants import M
from qconform.spec.errors import SpecError
from qconform.spec.outcome_law import Law, chain_outcome_law, request_outcome_law
from qconform.spec.qrow import QRow
from qconform.spec.refusal_order import OUTCOME_LAW_REFUSALS

RULES = ("R09", "R11")
#: the rules its refusals cite (the precedence group): verification_round's and distribution's
REFUSAL_RULES = ("R10", "R11", "R19", "R24", "R27")
VOCAB = 4

NOTES = {
    precedence.FLAG: precedence.NOTE,
    "FULL_ACCEPTANCE": Note(
        "BASIC", "q = p at every draft: every draft is accepted, the law is the bonus row's.", "Baseline."
    ),
    "NON_DYADIC_TARGET": Note(
        "EDGE_CASE",
        "p is not dyadic: the acceptance share is ceil(2^32 p / q) / 2^32 and the correction and bonus shares "
        "are the 32-bit mass rule's, not p / q and p.",
        "Catches a law with real-uniform shares, or a floor for the ceiling.",
    ),
    "ZERO_TARGET": Note(
        "EDGE_CASE",
        "p(x_i) = 0: the draft is never accepted, and nothing after it has positive probability.",
        "Catches a law that lists outcomes of probability 0, or continues past a certain rejection.",
    ),
    "SPARSE_Q": Note(
        "EDGE_CASE",
        "A sparse q row: tokens outside its support keep their whole target mass in the residual (R04).",
        "Catches a residual over the support only.",
    ),
    "STOP_TOKEN": Note("FUNCTIONALITY", "A stop token among the drafts ends the emission there (R11).", ""),
    "OUTPUT_BUDGET": Note("FUNCTIONALITY", "The output budget ends the emission (R11).", ""),
    "CHAIN": Note(
        "FUNCTIONALITY",
        "The drafts are sampled too (the distribution family's table): accepted = len(emitted) - 1.",
        "Catches an accepted count that counts the correction or bonus token.",
    ),
}


# --- the answer --------------------------------------------------------------------------------


def encode_law(law: Law) -> dict:
    """``{"outcomes": [...]}``: every outcome of the law, sorted by accepted, then emitted."""
    return {
        "outcomes": [
            {"accepted": accepted, "emitted": list(emitted), "probability": encode_rational(probability)}
            for (accepted, emitted), probability in sorted(law.items())
        ]
    }


def solve(case_input: dict) -> dict:
    """The spec's exact law of one round's outcome, or the refusal code."""
    try:
        if case_input["mode"] == "chain":
            return encode_law(chain_outcome_law(*distribution.decode_law_input(case_input)))
        return encode_law(request_outcome_law(decode_request(case_input["request"], case_input["vocab"])))
    except SpecError as error:
        return {"error": error.code}


# --- cases -------------------------------------------------------------------------------------


def round_case(
    name: str,
    comment: str,
    flags: tuple[str, ...],
    drafts: list[int],
    q_rows: list[QRow],
    p_rows: list[list[Fraction]],
    *,
    stop_tokens: tuple[int, ...] = (),
    budget: int | None = None,
    result: str = "valid",
) -> Case:
    request: dict = {
        "seed": encode_u64(0x0C0E + len(name)),
        "generation": 1,
        "round": 1,
        "anchor": 100,
        "draft_tokens": drafts,
        "q_rows": [encode_qrow(row) for row in q_rows],
        "p_rows": verification_round.encode_p_probabilities(p_rows),
    }
    if stop_tokens:
        request["stop_tokens"] = list(stop_tokens)
    if budget is not None:
        request["budget"] = budget
    case_input = {"mode": "round", "vocab": q_rows[0].vocab, "request": request}
    expected = solve(case_input)
    assert ("error" in expected) == (result == "invalid"), (name, expected)
    return Case(name, comment, RULES, case_input, expected, flags, result)


def quarters(*shares: int) -> dict[int, Fraction]:
    return {v: Fraction(s, 4) for v, s in enumerate(shares) if s}


HALVES = dense_q({0: Fraction(1, 2), 1: Fraction(1, 2)}, VOCAB)
SKEWED = dense_q(quarters(1, 1, 2), VOCAB)
BONUS = p_row({2: Fraction(1, 3), 3: Fraction(2, 3)}, VOCAB)
THIRDS = p_row({0: Fraction(1, 3), 1: Fraction(1, 3), 2: Fraction(1, 3)}, VOCAB)


def round_cases() -> Iterator[Case]:
    yield round_case(
        "q-equals-p-depth1",
        "q = p = (1/2, 1/2, 0, 0), draft 0 always accepted; bonus (0, 0, 1/3, 2/3) by the 32-bit mass rule.",
        ("FULL_ACCEPTANCE", "NON_DYADIC_TARGET"),
        [0],
        [HALVES],
        [q_as_p(HALVES), BONUS],
    )
    yield round_case(
        "q-equals-p-depth3",
        "Three drafts with q = p, all accepted: one outcome per bonus token, accepted = 3.",
        ("FULL_ACCEPTANCE",),
        [2, 0, 1],
        [SKEWED] * 3,
        [q_as_p(SKEWED)] * 3 + [p_row(quarters(0, 0, 1, 3), VOCAB)],
    )
    yield round_case(
        "thirds-depth2",
        "p = (1/3, 1/3, 1/3, 0) under q = (1/2, 1/2, 0, 0): x_1 = 0 accepted with ceil(2^33 / 3) / 2^32; "
        "the correction from the residual (0, 0, 1/3, 0); x_2 = 1 likewise; bonus in thirds.",
        ("NON_DYADIC_TARGET",),
        [0, 1],
        [HALVES, HALVES],
        [THIRDS, THIRDS, BONUS],
    )
    yield round_case(
        "residual-several-tokens",
        "q = (1/4, 1/4, 1/2, 0), p = (1/2, 1/6, 1/6, 1/6): x_1 = 2 accepted with 1/3; "
        "the residual (1/4, 0, 0, 1/6) spreads the correction over two tokens.",
        ("NON_DYADIC_TARGET",),
        [2, 0],
        [SKEWED, SKEWED],
        [
            p_row({0: Fraction(1, 2), 1: Fraction(1, 6), 2: Fraction(1, 6), 3: Fraction(1, 6)}, VOCAB),
            THIRDS,
            BONUS,
        ],
    )
    yield round_case(
        "q-rows-differ-by-position",
        "q_1 = (1/2, 1/2, 0, 0) and q_2 = (1/4, 1/4, 1/2, 0): each draft is tested against its own q row.",
        ("NON_DYADIC_TARGET",),
        [0, 2],
        [HALVES, SKEWED],
        [THIRDS, THIRDS, BONUS],
    )
    yield round_case(
        "sparse-q-residual",
        "A sparse q on {1, 3}: tokens 0 and 2 keep their whole target mass in the residual.",
        ("SPARSE_Q", "NON_DYADIC_TARGET"),
        [3],
        [sparse_q({1: Fraction(1, 2), 3: Fraction(1, 2)}, VOCAB)],
        [THIRDS[::-1], BONUS],
    )
    yield round_case(
        "zero-target-at-x1",
        "p_1(x_1) = 0: x_1 is never accepted; the law is the correction's alone, and no later draft appears.",
        ("ZERO_TARGET",),
        [1, 0],
        [HALVES, HALVES],
        [p_row(quarters(2, 0, 1, 1), VOCAB), q_as_p(HALVES), BONUS],
    )
    yield round_case(
        "zero-target-at-x2",
        "x_1 always accepted, p_2(x_2) = 0: the correction after one acceptance carries the whole law.",
        ("ZERO_TARGET", "FULL_ACCEPTANCE"),
        [0, 1],
        [HALVES, HALVES],
        [q_as_p(HALVES), p_row(quarters(1, 0, 3), VOCAB), BONUS],
    )
    yield round_case(
        "stop-token-at-x2",
        "Three drafts, all accepted; x_2 = 0 is a stop token: one outcome, (2, [1, 0]).",
        ("STOP_TOKEN", "FULL_ACCEPTANCE"),
        [1, 0, 1],
        [HALVES] * 3,
        [q_as_p(HALVES)] * 3 + [BONUS],
        stop_tokens=(0,),
    )
    yield round_case(
        "stop-token-rejected-draft",
        "x_1 = 0 is a stop token accepted with probability 2/3: emission ends there, or at the correction.",
        ("STOP_TOKEN", "NON_DYADIC_TARGET"),
        [0, 1],
        [HALVES, HALVES],
        [THIRDS, q_as_p(HALVES), BONUS],
        stop_tokens=(0,),
    )
    for budget in (1, 2, 3):
        yield round_case(
            f"budget-{budget}-of-depth2",
            f"Two drafts, each accepted with 2/3; budget {budget}.",
            ("OUTPUT_BUDGET", "NON_DYADIC_TARGET"),
            [0, 1],
            [HALVES, HALVES],
            [THIRDS, THIRDS, BONUS],
            budget=budget,
        )


def invalid_round_cases() -> Iterator[Case]:
    def invalid(name: str, comment: str, drafts: list[int], q_rows: list[QRow], p_rows: list[list[Fraction]]) -> Case:
        return round_case(name, comment, (), drafts, q_rows, p_rows, result="invalid")

    yield invalid("zero-q-at-draft", "q_1(x_1) = 0: ZERO_Q_AT_TOKEN.", [2], [HALVES], [THIRDS, BONUS])
    yield invalid("draft-out-of-range", "x_1 = V: TOKEN_OUT_OF_RANGE.", [VOCAB], [HALVES], [THIRDS, BONUS])
    yield invalid(
        "target-row-sums-below-one",
        "p_1 sums to 3/4: BAD_TARGET_ROW.",
        [0],
        [HALVES],
        [[Fraction(1, 4), Fraction(1, 4), Fraction(1, 4), Fraction(0)], BONUS],
    )
    yield invalid("missing-bonus-row", "One draft, one target row: BAD_SHAPE.", [0], [HALVES], [THIRDS])


def chain_case(name: str, comment: str, vocab: int, depth: int, q, p, result: str = "valid") -> Case:
    prefixes = distribution.prefixes(vocab, max(depth, 1))
    case_input = {
        "mode": "chain",
        "vocab": vocab,
        "depth": depth,
        "q": {distribution.prefix_key(k): encode_qrow(q(k)) for k in prefixes if len(k) < max(depth, 1)},
        "p": {distribution.prefix_key(k): distribution.rationals(p(k)) for k in prefixes if len(k) <= depth},
    }
    expected = solve(case_input)
    assert ("error" in expected) == (result == "invalid"), (name, expected)
    return Case(name, comment, RULES, case_input, expected, ("CHAIN",), result)


def chain_cases() -> Iterator[Case]:
    halves = QRow.dense([M // 2, M // 2])
    skew = QRow.dense([M // 4, 3 * M // 4, 0])
    yield chain_case(
        "chain-q-equals-p-v2-depth1",
        "q = p = (1/2, 1/2), depth 1: four outcomes (1, [a, b]) of 1/4.",
        2,
        1,
        lambda _: halves,
        lambda _: distribution.fractions("1/2", "1/2"),
    )
    yield chain_case(
        "chain-poor-q-v3-depth2",
        "q = (1/4, 3/4, 0) at every prefix, p = (1/3, 1/6, 1/2): rejections at either draft, "
        "corrections onto token 2 that q never proposes.",
        3,
        2,
        lambda _: skew,
        lambda _: distribution.fractions("1/3", "1/6", "1/2"),
    )
    yield chain_case(
        "chain-depth0",
        "Depth 0: BAD_SHAPE (a round has at least one draft).",
        2,
        0,
        lambda _: halves,
        lambda _: distribution.fractions("1/2", "1/2"),
        result="invalid",
    )


# --- refusal precedence ------------------------------------------------------------------------

#: ``refusal_order.OUTCOME_LAW_REFUSALS`` rows 1-14 are ``VERIFICATION_REFUSALS`` rows 4-17 (one request),
#: rows 15-24 are ``DISTRIBUTION_REFUSALS`` rows 1-10 (a chain's table).
ROUND_ROW_OFFSET, CHAIN_ROW_OFFSET = 3, -14
ROUND_ROWS, CHAIN_ROWS = set(range(1, 15)), set(range(15, 25))


@dataclass
class LawDraft:
    """A case being broken: one request of a verification batch (``round``) or a distribution table (``chain``)."""

    batch: BatchDraft | None = None
    chain: TableDraft | None = None

    def input_json(self) -> dict:
        if self.batch is not None:
            return {"mode": "round", "vocab": self.batch.vocab, "request": self.batch.input_json()["requests"][0]}
        assert self.chain is not None
        return {"mode": "chain", **self.chain.input_json()}


def law_draft(rows: frozenset[int]) -> LawDraft:
    """verification_round's one-request batch for the round rows, distribution's table for the chain rows."""
    if rows & ROUND_ROWS:
        return LawDraft(batch=batch_draft(frozenset(n + ROUND_ROW_OFFSET for n in rows)))
    return LawDraft(chain=table_draft(frozenset(n + CHAIN_ROW_OFFSET for n in rows)))


def round_fault(n: int) -> Callable[[LawDraft], object]:
    """verification_round's fault of its row ``n + 3``, on the round's batch."""
    fault = VERIFICATION_BREAKS.faults[n + ROUND_ROW_OFFSET]

    def apply(d: LawDraft) -> None:
        assert d.batch is not None
        fault(d.batch)

    return apply


def chain_fault(n: int) -> Callable[[LawDraft], object]:
    """distribution's fault of its row ``n - 14``, on the chain's table."""
    fault = TABLE_BREAKS.faults[n + CHAIN_ROW_OFFSET]

    def apply(d: LawDraft) -> None:
        assert d.chain is not None
        fault(d.chain)

    return apply


LAW_BREAKS = precedence.Breaks[LawDraft](
    family="outcome_law",
    base=law_draft,
    faults={**{n: round_fault(n) for n in ROUND_ROWS}, **{n: chain_fault(n) for n in CHAIN_ROWS}},
    encode=LawDraft.input_json,
    exclusive=precedence.exclusive_between(ROUND_ROWS, CHAIN_ROWS)
    | {frozenset(n - ROUND_ROW_OFFSET for n in pair) for pair in VERIFICATION_BREAKS.exclusive}
    | {frozenset(n - CHAIN_ROW_OFFSET for n in pair) for pair in TABLE_BREAKS.exclusive},
    why="a case is a round or a chain (its mode), and a q row is dense or sparse (categorical_sampling's pair)",
)


def build() -> Iterator[Group]:
    yield Group("round", "A verification_round request's law, its drafts given.", RULES, list(round_cases()))
    yield Group("round_invalid", "Requests the law refuses, as verify_round does.", RULES, list(invalid_round_cases()))
    yield Group("chain", "A distribution table's law, the drafts sampled too.", RULES, list(chain_cases()))
    yield Group(
        "precedence",
        "Every refusal row alone and every pair that can fail together: the earlier row's code.",
        REFUSAL_RULES,
        list(precedence.precedence_cases(LAW_BREAKS, solve, REFUSAL_RULES)),
    )


OUTCOME = closed(
    {
        "accepted": {"type": "integer", "minimum": 0},
        "emitted": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
        "probability": {"$ref": "#/$defs/rational"},
    }
)

FAMILY = Family(
    name="outcome_law",
    description="The exact law of one round's (accepted, emitted), which statistical mode samples against.",
    rules=tuple(sorted(set(RULES + REFUSAL_RULES))),
    notes=NOTES,
    build=build,
    solve=solve,
    input_schema={
        "oneOf": [
            closed(
                {
                    "mode": {"const": "round"},
                    "vocab": {"type": "integer", "minimum": 1},
                    "request": verification_round.REQUEST_SCHEMA,
                }
            ),
            closed({"mode": {"const": "chain"}, **distribution.FAMILY.input_schema["properties"]}),
        ]
    },
    expected_schema={
        "oneOf": [
            closed({"outcomes": {"type": "array", "items": OUTCOME, "minItems": 1}}),
            closed({"error": {"enum": sorted({row.code for row in OUTCOME_LAW_REFUSALS})}}),
        ]
    },
    precedence=LAW_BREAKS,
)
