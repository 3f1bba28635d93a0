"""Vector family ``distribution``: the exact law of one round at small vocabularies (R09, R11).

Each case gives q and p rows per prefix (the tokens already accepted in the
round) and expects the exact law of the emitted sequence, the first-token law
with the ABI's 32-bit draws and with a real uniform, the target, and the
quantization deviation with its proven bound. A statistical harness check
compares empirical frequencies with ``emitted_law``; an exact implementation
can reproduce every field.

Prefix keys: ``""`` for the empty prefix, else the token IDs joined by commas
(``"0"``, ``"3,1"``). ``q`` holds every prefix of length ``< depth``, ``p`` every
prefix of length ``<= depth`` (length ``depth``: the bonus row).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction
from itertools import product
from typing import Callable, Iterator

from qconform.generators import precedence
from qconform.generators.encoding import decode_rational, encode_rational
from qconform.generators.families.categorical_sampling import (
    ROW_BREAKS,
    RowDraft,
    decode_qrow,
    encode_draft,
    encode_qrow,
    raw_qrow,
    row_draft,
)
from qconform.generators.registry import Case, Family, Group, Note, StatHooks
from qconform.generators.schemas import closed_object as closed
from qconform.spec.constants import M
from qconform.spec.distribution import (
    Prefix,
    check_depth_positive,
    check_round_table,
    first_token_law,
    first_token_law_real_uniform,
    quantization_deviation,
    round_deviation,
    round_law,
)
from qconform.spec.errors import SpecError
from qconform.spec.outcome_law import Law, chain_outcome_law
from qconform.spec.qrow import QRow, check_q_rows
from qconform.spec.refusal_order import DISTRIBUTION_REFUSALS

RULES = ("R08", "R09", "R11")


def prefix_key(prefix: Prefix) -> str:
    """``""`` or the comma-joined token IDs."""
    return ",".join(str(token) for token in prefix)


def parse_prefix(key: str) -> Prefix:
    return tuple(int(token) for token in key.split(",")) if key else ()


def prefixes(vocab: int, max_length: int) -> list[Prefix]:
    """Every prefix of length 0..max_length, shortest first."""
    return [p for n in range(max_length + 1) for p in product(range(vocab), repeat=n)]


def decode_law_input(obj: dict) -> tuple[int, int, dict[Prefix, QRow], dict[Prefix, list[Fraction]]]:
    """(vocab, depth, q by prefix, p by prefix) of a case input."""
    vocab, depth = obj["vocab"], obj["depth"]
    check_depth_positive(depth)
    check_q_rows(vocab, [raw_qrow(row) for row in obj["q"].values()])  # every q row given, reachable or not
    q = {parse_prefix(k): decode_qrow(row, vocab) for k, row in obj["q"].items()}
    p = {parse_prefix(k): [decode_rational(x) for x in row] for k, row in obj["p"].items()}
    check_round_table(vocab, depth, q, p)
    return vocab, depth, q, p


NOTES = {
    precedence.FLAG: precedence.NOTE,
    "Q_EQUALS_P": Note(
        "BASIC",
        "q = p: every draft is accepted, the round emits K drafts and a bonus.",
        "Baseline: the law is the product of the rows.",
    ),
    "POOR_Q": Note(
        "FUNCTIONALITY",
        "q far from p; the first token is still distributed as p (R09).",
        "Catches a verifier whose output law depends on q.",
    ),
    "Q_ZERO_WHERE_P_POSITIVE": Note(
        "EDGE_CASE",
        "q has zero counts where p > 0: those tokens come only from the residual (R04).",
        "Catches a residual that misses tokens q never proposes.",
    ),
    "P_ZERO_WHERE_Q_POSITIVE": Note(
        "EDGE_CASE", "p = 0 where q > 0: such drafts are always rejected.", "Catches acceptance of zero-target drafts."
    ),
    "NON_DYADIC_TARGET": Note(
        "EDGE_CASE",
        "p is not dyadic (thirds, fifths): 32-bit draws cannot represent it exactly, so the "
        "first-token law deviates from p by a nonzero amount below the stated bound.",
        "Documents the quantization deviation instead of pretending it is zero.",
    ),
    "PREFIX_DEPENDENT": Note(
        "FUNCTIONALITY",
        "Depth 2 with q and p rows that depend on the accepted prefix (Markov-conditioned, R01).",
        "Catches verifying a later position against the wrong row.",
    ),
    "RANDOM_ROWS": Note("BASIC", "Random rows from a fixed generator seed.", "General agreement."),
    "ACCEPTANCE_ROUNDS_TO_ONE": Note(
        "EDGE_CASE",
        "p(x)/q(x) lies in (1 - 2^-32, 1): the 32-bit acceptance ceil(2^32 p/q) / 2^32 is 1, the real one is "
        "not, so the real-uniform law holds a correction sequence the quantized law lacks.",
        "Catches an acceptance rounded down (or compared with >= on the 32-bit draw), and a deviation summed "
        "over the sequences of both laws instead of the sequences of either.",
    ),
    "P_EQUALS_Q_TOKEN": Note(
        "EDGE_CASE",
        "p(v) = q(v) exactly for one token v while other tokens have p > q: v has no residual mass and does "
        "not count in the bound's s (the tokens with r_v > 0).",
        "Catches a residual support counted with p >= q.",
    ),
    "INVALID_TABLE": Note(
        "MALFORMED_INPUT",
        "Depth 0, or a q or p table without the row of a prefix the round can reach: BAD_SHAPE.",
        "Catches a law computed for a round that drafts nothing, and a missing row read as zeros or as "
        "another prefix's row.",
    ),
}


def dyadic_q(counts: list[int]) -> QRow:
    assert sum(counts) == M
    return QRow.dense(counts)


def fractions(*values: int | Fraction | str) -> list[Fraction]:
    return [Fraction(v) for v in values]


def rationals(values: list[Fraction]) -> list[str]:
    return [encode_rational(v) for v in values]


def solve(case_input: dict) -> dict:
    """The spec's exact laws and deviations for one input, or the refusal code."""
    try:
        return exact_laws(*decode_law_input(case_input))
    except SpecError as error:
        return {"error": error.code}


def exact_laws(vocab: int, depth: int, q: dict[Prefix, QRow], p: dict[Prefix, list[Fraction]]) -> dict:
    """The expected object of a valid input."""
    deviation = quantization_deviation(vocab, depth, q, p)
    round_dev = round_deviation(vocab, depth, q, p)
    return {
        "emitted_law": [
            {"tokens": list(tokens), "probability": encode_rational(probability)}
            for tokens, probability in round_law(vocab, depth, q, p).items()
        ],
        "first_token_law": rationals(first_token_law(vocab, depth, q, p)),
        "first_token_law_real_uniform": rationals(first_token_law_real_uniform(vocab, depth, q, p)),
        "target": rationals(p[()]),
        "tv_deviation": encode_rational(deviation.tv),
        "deviation_bound": encode_rational(deviation.bound),
        "round_tv_deviation": encode_rational(round_dev.tv),
        "round_deviation_bound": encode_rational(round_dev.bound),
    }


def law_case(
    name: str,
    comment: str,
    flags: tuple[str, ...],
    vocab: int,
    depth: int,
    q: Callable[[Prefix], QRow],
    p: Callable[[Prefix], list[Fraction]],
) -> Case:
    """A case whose q and p are tabulated over every prefix the round can reach."""
    case_input = {
        "vocab": vocab,
        "depth": depth,
        "q": {prefix_key(k): encode_qrow(q(k)) for k in prefixes(vocab, depth - 1)},
        "p": {prefix_key(k): rationals(p(k)) for k in prefixes(vocab, depth)},
    }
    return Case(name=name, comment=comment, rules=RULES, flags=flags, input=case_input, expected=solve(case_input))


def depth1_cases() -> Iterator[Case]:
    half = M // 2
    quarter = M // 4
    uniform4 = fractions("1/4", "1/4", "1/4", "1/4")
    yield law_case(
        "q-equals-p-v2",
        "q = p = (1/2, 1/2).",
        ("Q_EQUALS_P",),
        2,
        1,
        lambda _: dyadic_q([half, half]),
        lambda _: fractions("1/2", "1/2"),
    )
    yield law_case(
        "poor-q-v4",
        "q puts 7/8 on token 3, p puts 1/10 there.",
        ("POOR_Q",),
        4,
        1,
        lambda _: dyadic_q([M // 16, M // 16, 0, 7 * M // 8]),
        lambda pre: fractions("3/10", "3/10", "3/10", "1/10") if pre == () else uniform4,
    )
    yield law_case(
        "q-zero-where-p-positive-v4",
        "q on {0, 1} only, p on all four tokens.",
        ("Q_ZERO_WHERE_P_POSITIVE",),
        4,
        1,
        lambda _: dyadic_q([half, half, 0, 0]),
        lambda pre: fractions("1/8", "1/8", "3/8", "3/8") if pre == () else uniform4,
    )
    yield law_case(
        "p-zero-where-q-positive-v3",
        "q uniform-ish, p(2) = 0.",
        ("P_ZERO_WHERE_Q_POSITIVE",),
        3,
        1,
        lambda _: dyadic_q([quarter, quarter, half]),
        lambda pre: fractions("1/3", "2/3", 0) if pre == () else fractions("1/3", "1/3", "1/3"),
    )
    yield law_case(
        "non-dyadic-thirds-v3",
        "p = (1/3, 1/3, 1/3), q = (1/2, 1/4, 1/4).",
        ("NON_DYADIC_TARGET",),
        3,
        1,
        lambda _: dyadic_q([half, quarter, quarter]),
        lambda _: fractions("1/3", "1/3", "1/3"),
    )
    yield law_case(
        "point-mass-q-v5",
        "q all on token 4, p(4) = 1/5 and fifths elsewhere.",
        ("POOR_Q", "Q_ZERO_WHERE_P_POSITIVE", "NON_DYADIC_TARGET"),
        5,
        1,
        lambda _: dyadic_q([0, 0, 0, 0, M]),
        lambda _: fractions(*["1/5"] * 5),
    )
    yield law_case(
        "acceptance-rounds-to-one-v2",
        "q = (1/2, 1/2), p = (1/2 - 2^-40, 1/2 + 2^-40): draft 0 is accepted with 1 - 2^-39 by a real uniform "
        "and always by the 32-bit draw, so only the real-uniform law emits the correction (1,).",
        ("ACCEPTANCE_ROUNDS_TO_ONE", "POOR_Q"),
        2,
        1,
        lambda _: dyadic_q([half, half]),
        lambda _: fractions(Fraction(1, 2) - Fraction(1, 2**40), Fraction(1, 2) + Fraction(1, 2**40)),
    )
    yield law_case(
        "p-equals-q-on-one-token-v3",
        "q = (1/2, 1/4, 1/4), p = (1/2, 1/2, 0): p(0) = q(0) exactly, only token 1 has residual mass (s = 1).",
        ("P_EQUALS_Q_TOKEN", "P_ZERO_WHERE_Q_POSITIVE"),
        3,
        1,
        lambda _: dyadic_q([half, quarter, quarter]),
        lambda _: fractions("1/2", "1/2", 0),
    )
    yield law_case(
        "q-count-one-v2",
        "q = (M - 1, 1) / M: token 1 has the smallest positive count, 1, and is still proposed; p = (1/2, 1/2).",
        ("POOR_Q",),
        2,
        1,
        lambda _: dyadic_q([M - 1, 1]),
        lambda _: fractions("1/2", "1/2"),
    )


def depth2_cases() -> Iterator[Case]:
    half, quarter = M // 2, M // 4
    yield law_case(
        "q-equals-p-v2-d2",
        "q = p = (1/2, 1/2) at every prefix.",
        ("Q_EQUALS_P",),
        2,
        2,
        lambda _: dyadic_q([half, half]),
        lambda _: fractions("1/2", "1/2"),
    )

    def markov_q(prefix: Prefix) -> QRow:
        if not prefix:
            return dyadic_q([half, quarter, quarter])
        return dyadic_q([0, half, half]) if prefix[-1] == 0 else dyadic_q([3 * quarter, quarter, 0])

    def markov_p(prefix: Prefix) -> list[Fraction]:
        last = prefix[-1] if prefix else None
        return {
            None: fractions("1/3", "1/2", "1/6"),
            0: fractions("1/5", "2/5", "2/5"),
            1: fractions("1/7", "4/7", "2/7"),
            2: fractions(0, "1/2", "1/2"),
        }[last]

    yield law_case(
        "markov-v3-d2",
        "q and p conditioned on the last accepted token; non-dyadic p.",
        ("PREFIX_DEPENDENT", "NON_DYADIC_TARGET", "Q_ZERO_WHERE_P_POSITIVE", "P_ZERO_WHERE_Q_POSITIVE"),
        3,
        2,
        markov_q,
        markov_p,
    )
    yield law_case(
        "poor-q-v4-d2",
        "q concentrated on the token p likes least at both positions.",
        ("POOR_Q", "PREFIX_DEPENDENT"),
        4,
        2,
        lambda pre: dyadic_q([0, 0, M // 8, 7 * M // 8]) if not pre else dyadic_q([M, 0, 0, 0]),
        lambda pre: fractions("2/5", "3/10", "1/5", "1/10") if len(pre) < 2 else fractions(*["1/4"] * 4),
    )


def random_cases() -> Iterator[Case]:
    rng = random.Random(0xD157)

    def random_q(vocab: int) -> QRow:
        cuts = sorted(rng.randrange(M + 1) for _ in range(vocab - 1))
        return dyadic_q([b - a for a, b in zip([0] + cuts, cuts + [M])])

    def random_p(vocab: int) -> list[Fraction]:
        weights = [rng.randint(0, 9) for _ in range(vocab)]
        weights[rng.randrange(vocab)] += 1
        return [Fraction(w, sum(weights)) for w in weights]

    for vocab, depth in ((8, 1), (6, 1), (4, 2)):
        q_table = {prefix: random_q(vocab) for prefix in prefixes(vocab, depth - 1)}
        p_table = {prefix: random_p(vocab) for prefix in prefixes(vocab, depth)}
        yield law_case(
            f"random-v{vocab}-d{depth}",
            f"Random rows, V = {vocab}, depth {depth}.",
            ("RANDOM_ROWS",),
            vocab,
            depth,
            q_table.__getitem__,
            p_table.__getitem__,
        )


def invalid_case(name: str, comment: str, case_input: dict) -> Case:
    """A table the spec refuses BAD_SHAPE."""
    expected = solve(case_input)
    assert expected == {"error": "BAD_SHAPE"}, (name, expected)
    return Case(
        name=name,
        comment=comment,
        rules=RULES,
        flags=("INVALID_TABLE",),
        input=case_input,
        expected=expected,
        result="invalid",
    )


def invalid_cases() -> Iterator[Case]:
    half = rationals(fractions("1/2", "1/2"))
    halves = encode_qrow(dyadic_q([M // 2, M // 2]))
    yield invalid_case(
        "depth-zero",
        "Depth 0 with a q row and a p row for the empty prefix: a round drafts K >= 1 tokens.",
        {"vocab": 2, "depth": 0, "q": {"": halves}, "p": {"": half}},
    )
    yield invalid_case(
        "q-row-missing-for-reachable-prefix",
        "Depth 2, q = p = (1/2, 1/2): draft 1 is always accepted, but q has no row for the prefix (1).",
        {
            "vocab": 2,
            "depth": 2,
            "q": {"": halves, "0": halves},
            "p": {prefix_key(k): half for k in prefixes(2, 2)},
        },
    )


@dataclass
class TableDraft:
    """A round's table being broken: the depth, the empty prefix's q row, and p rows by prefix key."""

    depth: int
    q: RowDraft
    p: dict[str, list[Fraction]]

    def input_json(self) -> dict:
        return {
            "vocab": self.q.vocab,
            "depth": self.depth,
            "q": {"": encode_draft(self.q)["row"]},
            "p": {key: rationals(row) for key, row in self.p.items()},
        }


#: ``refusal_order.DISTRIBUTION_REFUSALS`` rows 2-7 are ``QROW_REFUSALS`` rows 1-6 on the empty prefix's q row.
QROW_ROW_OFFSET = 1


def table_draft(rows: frozenset[int]) -> TableDraft:
    """A valid depth-1 table: row_draft's q row at the empty prefix, uniform p there and at every one-token prefix."""
    q = row_draft(frozenset(n - QROW_ROW_OFFSET for n in rows))
    uniform = [Fraction(1, q.vocab)] * q.vocab
    return TableDraft(1, q, {"": list(uniform), **{str(v): list(uniform) for v in range(q.vocab)}})


def qrow_fault(n: int) -> Callable[[TableDraft], object]:
    return lambda d: ROW_BREAKS.faults[n - QROW_ROW_OFFSET](d.q)


def heavier_bonus_row(d: TableDraft) -> None:
    d.p["1"][0] += Fraction(1, 8)


TABLE_BREAKS = precedence.Breaks[TableDraft](
    family="distribution",
    base=table_draft,
    faults={
        1: lambda d: setattr(d, "depth", 0),
        **{n: qrow_fault(n) for n in range(2, 8)},
        8: lambda d: d.p[""].pop(),
        9: heavier_bonus_row,
        10: lambda d: d.p.pop("3"),  # token 3 has q > 0 and p > 0 at the empty prefix: (3) is reached
    },
    encode=TableDraft.input_json,
    exclusive=frozenset(frozenset(n + QROW_ROW_OFFSET for n in pair) for pair in ROW_BREAKS.exclusive),
    why="a q row is dense or sparse (categorical_sampling's exclusive pair)",
)


def reach_cases() -> Iterator[Case]:
    """Rows a round cannot reach may be left out: a child is reached iff q > 0 **and** p > 0 at its parent."""
    halves = encode_qrow(dyadic_q([M // 2, M // 2]))
    for name, comment, p in (
        (
            "p-zero-child-row-omitted",
            "Depth 1, q = (1/2, 1/2), p = (1, 0): token 1 is proposed (q > 0) but never accepted (p = 0), so "
            "the prefix (1) is not reached and its p row (the bonus row) may be left out.",
            {"": fractions("1", "0"), "0": fractions("1/2", "1/2")},
        ),
    ):
        case_input = {"vocab": 2, "depth": 1, "q": {"": halves}, "p": {k: rationals(v) for k, v in p.items()}}
        yield Case(
            name=name,
            comment=comment,
            rules=RULES,
            flags=("P_ZERO_WHERE_Q_POSITIVE",),
            input=case_input,
            expected=solve(case_input),
        )


def build() -> Iterator[Group]:
    yield Group("depth1", "Depth-1 rounds.", RULES, list(depth1_cases()) + list(reach_cases()))
    yield Group("depth2", "Depth-2 rounds with prefix-dependent rows.", RULES + ("R01",), list(depth2_cases()))
    yield Group("random", "Random rows.", RULES, list(random_cases()))
    yield Group(
        "invalid",
        "Tables the exact law refuses: depth 0, a reachable prefix without its row.",
        RULES,
        list(invalid_cases()),
    )
    yield Group(
        "precedence",
        "Every refusal row alone and every pair that can fail together: the earlier row's code.",
        ("R01", "R10", "R11", "R27"),
        list(precedence.precedence_cases(TABLE_BREAKS, solve, ("R01", "R10", "R11", "R27"))),
    )


RATIONALS = {"type": "array", "items": {"$ref": "#/$defs/rational"}}
PREFIX_KEYS = {"pattern": r"^(?:[0-9]+(?:,[0-9]+)*)?$"}


# --- statistical mode ---------------------------------------------------------------------------


def outcome_laws(case_input: dict) -> list[Law]:
    """The exact law of ``(accepted, emitted)`` of one round whose drafts are sampled too
    (one histogram in a ``sample`` answer)."""
    return [chain_outcome_law(*decode_law_input(case_input))]


#: The expected object of a valid input.
LAWS = closed(
    {
        "emitted_law": {
            "type": "array",
            "items": closed(
                {
                    "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                    "probability": {"$ref": "#/$defs/rational"},
                }
            ),
        },
        "first_token_law": RATIONALS,
        "first_token_law_real_uniform": RATIONALS,
        "target": RATIONALS,
        "tv_deviation": {"$ref": "#/$defs/rational"},
        "deviation_bound": {"$ref": "#/$defs/rational"},
        "round_tv_deviation": {"$ref": "#/$defs/rational"},
        "round_deviation_bound": {"$ref": "#/$defs/rational"},
    }
)


FAMILY = Family(
    name="distribution",
    description="The exact law of one round's emitted tokens at small vocabularies, and its quantization deviation.",
    rules=("R01", "R08", "R09", "R10", "R11", "R27"),
    notes=NOTES,
    build=build,
    solve=solve,
    input_schema=closed(
        {
            "vocab": {"type": "integer", "minimum": 2, "maximum": 64},
            "depth": {"type": "integer", "minimum": 0},
            "q": {"type": "object", "propertyNames": PREFIX_KEYS, "additionalProperties": {"$ref": "#/$defs/qRow"}},
            "p": {"type": "object", "propertyNames": PREFIX_KEYS, "additionalProperties": RATIONALS},
        }
    ),
    expected_schema={"oneOf": [LAWS, closed({"error": {"enum": sorted({r.code for r in DISTRIBUTION_REFUSALS})}})]},
    stat=StatHooks(per_request=False, laws=outcome_laws),
    precedence=TABLE_BREAKS,
)
