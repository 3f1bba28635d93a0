"""Vector family ``target_only``: the target-only fallback draw and the two target ranks deciding together (R25).

Group ``fallback_draws`` pins the key and the token of the target-only draw of
a round whose proposal was not consumed (docs/rng-abi.md, "Target-only
fallback"): CORRECTION domain, position ``anchor``, draw counter 1, from the
target row at the anchor. Group ``two_ranks`` pins the synchronized decision of
the design's two target ranks: both commit only when both hold the same
validated rows; otherwise both discard and commit the same target-only token.
Answers come from ``qconform.spec.wire.fallback``.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction
from typing import Iterator

from qconform.generators.encoding import decode_u64, encode_u64, encode_word
from qconform.generators.families.verification_round import decode_p_rows, encode_p_probabilities
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import closed_object as closed
from qconform.spec.rng_abi import RngIdentity, correction_key, uniform32_draw
from qconform.spec.sampling import mass_draw
from qconform.spec.verification import DrawRecord
from qconform.spec.wire.fallback import RankView, decide_ranks, target_only_draw

FAMILY_RULES = ("R11", "R22", "R23", "R24", "R25", "R28")

NOTES = {
    "FALLBACK_KEY": Note(
        "FUNCTIONALITY",
        "The target-only draw of a round: CORRECTION, position anchor, draw counter 1.",
        "Catches a fallback keyed as the correction after zero accepted drafts (counter 0), which "
        "the target may already have drawn for the same round (a redraw under a reused key, R24).",
    ),
    "COUNTER_MATTERS": Note(
        "EDGE_CASE",
        "The draw with counter 0 at the same position picks another token.",
        "Catches the counter-0 key directly: the token differs.",
    ),
    "FIELD_MAX": Note(
        "EDGE_CASE",
        "Anchor 2^32 - 1 and a seed with its high word set.",
        "Catches narrower field arithmetic in the fallback key.",
    ),
    "BOTH_COMMIT": Note(
        "BASIC",
        "Both ranks hold the same validated rows: both commit.",
        "Catches a fallback where the proposal was good.",
    ),
    "SYNCHRONIZED_FALLBACK": Note(
        "FUNCTIONALITY",
        "Missing, corrupt or late q on either rank: both ranks fall back together with the same token.",
        "Catches a partial commit on one rank and a fallback on the other (R25).",
    ),
}

U32_MAX = (1 << 32) - 1


# ---------------------------------------------------------------- solve


def draw_json(draw: DrawRecord) -> dict:
    return {
        "domain": draw.domain.name,
        "position": draw.position,
        "draw_counter": draw.draw_counter,
        "counter_words": [encode_word(w) for w in draw.counter_words],
        "u32": draw.u32,
        "token": draw.token,
    }


def identity_of(obj: dict) -> RngIdentity:
    return RngIdentity(decode_u64(obj["seed"]), obj["generation"], obj["round"], obj["anchor"])


def solve(case_input: dict) -> dict:
    """The target-only draw, or every rank's outcome when the case lists ranks."""
    ident, p_row = identity_of(case_input), decode_p_rows(case_input["p"])[0]
    if "ranks" not in case_input:
        return {"draw": draw_json(target_only_draw(ident, p_row))}
    views = [
        RankView(None if r["rows"] is None else bytes.fromhex(r["rows"]), r.get("reason")) for r in case_input["ranks"]
    ]
    outcomes = []
    for outcome in decide_ranks(ident, views, p_row):
        out: dict = {"outcome": outcome.kind}
        if outcome.draw is not None:
            out.update(reason=outcome.reason, draw=draw_json(outcome.draw))
        outcomes.append(out)
    return {"ranks": outcomes}


# ---------------------------------------------------------------- cases


def row(*weights: int) -> list[Fraction]:
    total = sum(weights)
    return [Fraction(w, total) for w in weights]


SKEWED = row(1, 5, 0, 9, 3, 14)
UNIFORM8 = row(*[1] * 8)


def case_input(ident: RngIdentity, p_row: list[Fraction], ranks: list[dict] | None = None) -> dict:
    out = {
        "seed": encode_u64(ident.seed),
        "generation": ident.generation,
        "round": ident.round,
        "anchor": ident.anchor,
        "p": encode_p_probabilities([p_row]),
    }
    if ranks is not None:
        out["ranks"] = ranks
    return out


def make_case(name: str, comment: str, flags: tuple[str, ...], inp: dict) -> Case:
    return Case(name=name, comment=comment, rules=FAMILY_RULES, flags=flags, input=inp, expected=solve(inp))


def counter_zero_token(ident: RngIdentity, p_row: list[Fraction]) -> int:
    """The token the counter-0 key (the correction after zero accepted drafts) would draw."""
    return mass_draw(p_row, uniform32_draw(correction_key(ident, 0)))[0]


def fallback_cases() -> Iterator[Case]:
    for name, ident, p_row, flags in (
        ("small-identity", RngIdentity(0x5EED, 1, 1, 100), SKEWED, ("FALLBACK_KEY",)),
        ("later-round", RngIdentity(0x5EED, 3, 17, 4100), SKEWED, ("FALLBACK_KEY",)),
        ("field-max", RngIdentity((1 << 64) - 1, U32_MAX, U32_MAX, U32_MAX), UNIFORM8, ("FALLBACK_KEY", "FIELD_MAX")),
        ("seed-high-word", RngIdentity(0x1234_5678_9ABC_DEF0, 2, 5, 0), UNIFORM8, ("FALLBACK_KEY", "FIELD_MAX")),
    ):
        yield make_case(
            name,
            f"The target-only draw of seed {ident.seed:#x}, generation {ident.generation}, "
            f"round {ident.round}, anchor {ident.anchor}.",
            flags,
            case_input(ident, p_row),
        )
    # an identity where the counter-0 key draws another token: the counter is pinned by the token itself
    ident = next(
        RngIdentity(0xC0FFEE, 1, r, 64)
        for r in range(1, 1000)
        if counter_zero_token(RngIdentity(0xC0FFEE, 1, r, 64), UNIFORM8)
        != target_only_draw(RngIdentity(0xC0FFEE, 1, r, 64), UNIFORM8).token
    )
    yield make_case(
        "counter-matters",
        f"Round {ident.round}: the counter-0 key would draw token "
        f"{counter_zero_token(ident, UNIFORM8)}, the fallback key draws another.",
        ("FALLBACK_KEY", "COUNTER_MATTERS"),
        case_input(ident, UNIFORM8),
    )


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def rank_cases() -> Iterator[Case]:
    ident = RngIdentity(0x5EED, 2, 7, 300)
    good = {"rows": digest("round 7 rows")}
    other = {"rows": digest("round 7 rows, another copy")}
    for name, comment, flags, ranks in (
        ("both-hold-the-rows", "Both ranks hold the same validated rows: both commit.", ("BOTH_COMMIT",), [good, good]),
        (
            "missing-on-rank-0",
            "Rank 0's receiver found a row missing: both ranks fall back.",
            ("SYNCHRONIZED_FALLBACK",),
            [{"rows": None, "reason": "MISSING_Q"}, good],
        ),
        (
            "corrupt-on-rank-1",
            "The broadcast to rank 1 failed its checksum: both ranks fall back, rank 0 too.",
            ("SYNCHRONIZED_FALLBACK",),
            [good, {"rows": None, "reason": "CHECKSUM_MISMATCH"}],
        ),
        (
            "late-on-rank-1",
            "Rank 1's copy arrived after the decision (timeout): both ranks fall back.",
            ("SYNCHRONIZED_FALLBACK",),
            [good, {"rows": None, "reason": "timeout"}],
        ),
        (
            "both-lost",
            "Both ranks lost the round: the first rank's reason, one token.",
            ("SYNCHRONIZED_FALLBACK",),
            [{"rows": None, "reason": "LATE_REPLY"}, {"rows": None, "reason": "timeout"}],
        ),
        (
            "ranks-disagree",
            "Each rank holds rows, but not the same: both fall back (RANKS_DISAGREE).",
            ("SYNCHRONIZED_FALLBACK",),
            [good, other],
        ),
    ):
        yield make_case(name, comment, flags, case_input(ident, SKEWED, ranks))


def build() -> Iterator[Group]:
    yield Group(
        "fallback_draws",
        "The key and token of the target-only draw.",
        ("R22", "R23", "R24", "R25"),
        list(fallback_cases()),
    )
    yield Group("two_ranks", "The two target ranks decide each round together.", ("R25", "R28"), list(rank_cases()))


# ---------------------------------------------------------------- schema

NONNEG = {"type": "integer", "minimum": 0}
HEX = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
RANK_SCHEMA = {
    "oneOf": [
        closed({"rows": HEX}),
        closed({"rows": {"type": "null"}, "reason": {"type": "string", "minLength": 1}}),
    ]
}
DRAW_SCHEMA = closed(
    {
        "domain": {"const": "CORRECTION"},
        "position": NONNEG,
        "draw_counter": {"const": 1},
        "counter_words": {"type": "array", "items": {"$ref": "#/$defs/word32"}, "minItems": 4, "maxItems": 4},
        "u32": NONNEG,
        "token": NONNEG,
    }
)
OUTCOME_SCHEMA = {
    "oneOf": [
        closed({"outcome": {"const": "commit"}}),
        closed({"outcome": {"const": "target_only"}, "reason": {"type": "string"}, "draw": DRAW_SCHEMA}),
    ]
}

FAMILY = Family(
    name="target_only",
    description="The target-only fallback: its draw key and token, and the two target ranks deciding together "
    "(docs/rng-abi.md, Target-only fallback).",
    rules=FAMILY_RULES,
    notes=NOTES,
    build=build,
    input_schema=closed(
        {
            "seed": {"$ref": "#/$defs/u64"},
            "generation": NONNEG,
            "round": NONNEG,
            "anchor": NONNEG,
            "p": {"$ref": "#/$defs/pRows"},
            "ranks": {"type": "array", "items": RANK_SCHEMA, "minItems": 1},
        },
        required=["anchor", "generation", "p", "round", "seed"],
    ),
    expected_schema={
        "oneOf": [
            closed({"draw": DRAW_SCHEMA}),
            closed({"ranks": {"type": "array", "items": OUTCOME_SCHEMA, "minItems": 1}}),
        ]
    },
    solve=solve,
)
