"""Vector family ``rng_abi``: Philox4x32-10 known answers and the draw-key layout (R22-R24).

Group ``philox_kat`` holds Random123's three ``philox4x32 10`` lines. Group
``draw_keys`` pins how a (seed, generation, round, position, domain, draw
counter) becomes Philox key and counter words and how the draws are read.
Group ``round_schedule`` pins which position each draw of a round uses. Group
``invalid_fields`` holds fields the ABI refuses. Group ``unseeded_requests`` pins
the seed a request without one gets from its request ID.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Callable, Iterator

from qconform.generators import precedence
from qconform.generators.encoding import decode_decimal, decode_word, encode_u64, encode_word
from qconform.generators.registry import Case, Family, FuzzHooks, Group, Labels, Note
from qconform.generators.schemas import closed_object as closed
from qconform.spec.errors import SpecError
from qconform.spec.philox import KNOWN_ANSWERS, philox4x32
from qconform.spec.rng_abi import (
    Domain,
    DrawKey,
    RngIdentity,
    accept_key,
    correction_key,
    draw_words,
    proposal_draw,
    proposal_key,
    uniform32_draw,
    unseeded_request_seed,
)

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
DRAW_COUNTER_MAX = (1 << 24) - 1

NOTES = {
    precedence.FLAG: precedence.NOTE,
    "KNOWN_ANSWER": Note(
        "BASIC",
        "A Random123 kat_vectors line for philox4x32 with 10 rounds.",
        "A generator that fails it is not Philox4x32-10: every draw of the ABI is wrong.",
    ),
    "SEED_HIGH_WORD": Note(
        "EDGE_CASE",
        "The seed has bits above bit 31, so key word 1 (the high 32 bits of the seed) is nonzero.",
        "Catches an implementation that truncates the seed to 32 bits or swaps the key words.",
    ),
    "FIELD_MAX": Note(
        "EDGE_CASE",
        "Counter fields at their maxima (2^32 - 1, draw counter 2^24 - 1).",
        "Catches signed or narrower field arithmetic and a draw counter that spills into the domain byte.",
    ),
    "DOMAIN_SEPARATION": Note(
        "FUNCTIONALITY",
        "The same seed, generation, round and position in each domain; the draws must differ (R23).",
        "Catches a missing or misplaced domain code, which would reuse proposal noise for correction.",
    ),
    "WORD_ORDER": Note(
        "FUNCTIONALITY",
        "Only one counter field or key word is nonzero, so each field's word is pinned.",
        "Catches swapped counter words (position, round, generation) or swapped key words.",
    ),
    "DRAW_COUNTER": Note(
        "FUNCTIONALITY",
        "A nonzero draw counter in counter word 3 below the domain byte.",
        "Catches a draw counter placed elsewhere or ignored.",
    ),
    "DRAW_READOUT": Note(
        "BASIC",
        "A typical key; u24 is output word 0 >> 8 and u32 is output word 0.",
        "Catches reading another output word or the low 24 bits for the proposal draw.",
    ),
    "ROUND_SCHEDULE": Note(
        "FUNCTIONALITY",
        "Every key of a depth-K round: proposal and acceptance of x_i at anchor + i - 1, "
        "correction after j acceptances (or the bonus, j = K) at anchor + j.",
        "Catches a position off by one and a correction keyed like its acceptance.",
    ),
    "POSITION_WRAP": Note(
        "EDGE_CASE",
        "The anchor is near 2^32, so anchor + offset wraps modulo 2^32.",
        "Catches 64-bit position arithmetic or a refusal where the ABI wraps.",
    ),
    "UNSEEDED_REQUEST": Note(
        "FUNCTIONALITY",
        "A request without a seed gets the first 8 bytes (little-endian) of SHA-256 of the tag "
        "'qconform-unseeded-seed-v1\\0' and its UTF-8 request ID (R24).",
        "Catches a constant default seed (every unseeded request of a batch would draw the same noise), "
        "a seed from a clock or a batch row, and a wrong byte order or tag.",
    ),
    "OUT_OF_RANGE_FIELD": Note(
        "MALFORMED_INPUT",
        "A field outside its width; the ABI refuses it with BAD_RNG_FIELD.",
        "Catches silent truncation, e.g. a draw counter of 2^24 aliasing into the next domain.",
    ),
}

DOMAIN_NAMES = [d.name for d in Domain]


def kat_output(case_input: dict) -> dict:
    """Philox4x32-10 of one known-answer input; ``rounds`` is the constant 10 (the schema's ``const``),
    named in the input as Random123's ``kat_vectors`` line names it, never a free parameter."""
    c0, c1, c2, c3 = (decode_word(w) for w in case_input["counter"])
    k0, k1 = (decode_word(w) for w in case_input["key"])
    return {"output": [encode_word(w) for w in philox4x32((c0, c1, c2, c3), (k0, k1))]}


def draw_key_output(case_input: dict) -> dict:
    key = DrawKey(
        seed=decode_decimal(case_input["seed"]),
        generation=case_input["generation"],
        round=case_input["round"],
        position=case_input["position"],
        domain=Domain[case_input["domain"]],
        draw_counter=case_input["draw_counter"],
    )
    return {
        "key": [encode_word(w) for w in key.key_words()],
        "counter": [encode_word(w) for w in key.counter_words()],
        "output": [encode_word(w) for w in draw_words(key)],
        "u24": proposal_draw(key),
        "u32": uniform32_draw(key),
    }


def schedule_output(case_input: dict) -> dict:
    ident = RngIdentity(
        decode_decimal(case_input["seed"]), case_input["generation"], case_input["round"], case_input["anchor"]
    )
    depth = case_input["depth"]

    def draws(keys: list[DrawKey], value: Callable[[DrawKey], int]) -> list[dict]:
        return [
            {"position": k.position, "counter": [encode_word(w) for w in k.counter_words()], "value": value(k)}
            for k in keys
        ]

    return {
        "proposal": draws([proposal_key(ident, i) for i in range(1, depth + 1)], proposal_draw),
        "accept": draws([accept_key(ident, i) for i in range(1, depth + 1)], uniform32_draw),
        "correction": draws([correction_key(ident, j) for j in range(depth + 1)], uniform32_draw),
    }


def solve(case_input: dict) -> dict:
    """The spec's answer to one ``rng_abi`` input: a KAT line, one draw key, a round schedule,
    or the seed of an unseeded request."""
    try:
        if "request_id" in case_input:
            return {"seed": encode_u64(unseeded_request_seed(case_input["request_id"]))}
        if "counter" in case_input:
            return kat_output(case_input)
        if "depth" in case_input:
            return schedule_output(case_input)
        return draw_key_output(case_input)
    except SpecError as error:
        return {"error": error.code}


def solved_case(
    name: str, comment: str, rules: tuple[str, ...], flags: tuple[str, ...], case_input: dict, result: str = "valid"
) -> Case:
    """A case whose expected answer is :func:`solve` of its input; ``result`` states the intent."""
    expected = solve(case_input)
    assert ("error" in expected) == (result == "invalid"), (name, expected)
    return Case(
        name=name, comment=comment, rules=rules, flags=flags, input=case_input, expected=expected, result=result
    )


def kat_cases() -> Iterator[Case]:
    for name, (counter, key, output) in zip(("zeros", "ones", "pi_digits"), KNOWN_ANSWERS):
        case = solved_case(
            name,
            f"Random123 kat_vectors: philox4x32 10, counter and key from {name.replace('_', ' ')}.",
            ("R22",),
            ("KNOWN_ANSWER",),
            {"counter": [encode_word(w) for w in counter], "key": [encode_word(w) for w in key], "rounds": 10},
        )
        assert case.expected == {"output": [encode_word(w) for w in output]}
        yield case


def key_input(key: DrawKey) -> dict:
    return {
        "seed": encode_u64(key.seed),
        "generation": key.generation,
        "round": key.round,
        "position": key.position,
        "domain": key.domain.name,
        "draw_counter": key.draw_counter,
    }


def key_case(name: str, comment: str, flags: tuple[str, ...], key: DrawKey) -> Case:
    return solved_case(name, comment, ("R22", "R23"), flags, key_input(key))


def draw_key_cases() -> Iterator[Case]:
    base = dict(seed=0x0123456789ABCDEF, generation=7, round=3, position=1000)
    for domain in Domain:
        yield key_case(
            f"domains-{domain.name.lower()}",
            f"Fixed seed, generation, round and position in domain {domain.name}.",
            ("DOMAIN_SEPARATION",),
            DrawKey(domain=domain, **base),
        )
    yield key_case("seed-low-word-only", "Seed 1: key (1, 0).", ("WORD_ORDER",), DrawKey(1, 0, 0, 0, Domain.PROPOSAL))
    yield key_case(
        "seed-high-word-only",
        "Seed 2^32: key (0, 1).",
        ("WORD_ORDER", "SEED_HIGH_WORD"),
        DrawKey(1 << 32, 0, 0, 0, Domain.PROPOSAL),
    )
    yield key_case(
        "seed-high-bit",
        "Seed with bit 63 set.",
        ("SEED_HIGH_WORD",),
        DrawKey(0x8000000000000001, 5, 9, 77, Domain.ACCEPT),
    )
    yield key_case(
        "seed-max", "Seed 2^64 - 1.", ("SEED_HIGH_WORD", "FIELD_MAX"), DrawKey(U64_MAX, 0, 0, 0, Domain.CORRECTION)
    )
    yield key_case(
        "position-only",
        "Only the position is nonzero (counter word 0).",
        ("WORD_ORDER",),
        DrawKey(0, 0, 0, 1, Domain.PROPOSAL),
    )
    yield key_case(
        "round-only",
        "Only the round is nonzero (counter word 1).",
        ("WORD_ORDER",),
        DrawKey(0, 0, 1, 0, Domain.PROPOSAL),
    )
    yield key_case(
        "generation-only",
        "Only the generation is nonzero (counter word 2).",
        ("WORD_ORDER",),
        DrawKey(0, 1, 0, 0, Domain.PROPOSAL),
    )
    yield key_case(
        "draw-counter-1",
        "Draw counter 1 in the acceptance domain.",
        ("DRAW_COUNTER",),
        DrawKey(0, 0, 0, 0, Domain.ACCEPT, 1),
    )
    for domain in Domain:
        yield key_case(
            f"fields-max-{domain.name.lower()}",
            f"Every field at its maximum in domain {domain.name}.",
            ("FIELD_MAX", "SEED_HIGH_WORD"),
            DrawKey(U64_MAX, U32_MAX, U32_MAX, U32_MAX, domain, DRAW_COUNTER_MAX),
        )
    rng = random.Random(0x5EED0001)
    for index in range(6):
        key = DrawKey(
            seed=rng.getrandbits(64),
            generation=rng.getrandbits(32),
            round=rng.getrandbits(32),
            position=rng.getrandbits(32),
            domain=Domain(1 + index % 3),
            draw_counter=rng.choice((0, 0, 1, rng.getrandbits(24))),
        )
        yield key_case(f"random-{index}", "A random key (fixed generator seed).", ("DRAW_READOUT",), key)


def schedule_case(name: str, comment: str, flags: tuple[str, ...], ident: RngIdentity, depth: int) -> Case:
    case_input = {
        "seed": encode_u64(ident.seed),
        "generation": ident.generation,
        "round": ident.round,
        "anchor": ident.anchor,
        "depth": depth,
    }
    return solved_case(name, comment, ("R14", "R22", "R23"), flags, case_input)


def round_schedule_cases() -> Iterator[Case]:
    yield schedule_case(
        "depth5-anchor-0",
        "A depth-5 round at anchor 0.",
        ("ROUND_SCHEDULE",),
        RngIdentity(seed=42, generation=1, round=1, anchor=0),
        5,
    )
    yield schedule_case(
        "depth5-anchor-4096",
        "A depth-5 round at anchor 4096, high seed word set.",
        ("ROUND_SCHEDULE", "SEED_HIGH_WORD"),
        RngIdentity(seed=0xDEADBEEF00C0FFEE, generation=3, round=17, anchor=4096),
        5,
    )
    yield schedule_case(
        "depth5-anchor-wraps",
        "A depth-5 round whose positions wrap past 2^32 - 1.",
        ("ROUND_SCHEDULE", "POSITION_WRAP"),
        RngIdentity(seed=9, generation=U32_MAX, round=U32_MAX, anchor=U32_MAX - 2),
        5,
    )
    yield schedule_case(
        "depth1-anchor-7",
        "A depth-1 round: one proposal, one test, corrections at 7 and 8.",
        ("ROUND_SCHEDULE",),
        RngIdentity(seed=1, generation=0, round=0, anchor=7),
        1,
    )


def invalid_case(name: str, comment: str, fields: dict) -> Case:
    case_input = {**fields, "seed": str(fields["seed"])}  # the u64 text, 2^64 included (20 digits)
    return solved_case(name, comment, ("R22", "R24"), ("OUT_OF_RANGE_FIELD",), case_input, result="invalid")


def key_fields(rows: frozenset[int]) -> dict:
    """A valid single draw's fields (the seed as an integer until encoded)."""
    return {"seed": 1, "generation": 0, "round": 0, "position": 0, "domain": "ACCEPT", "draw_counter": 0}


def one_past(name: str, limit: int):
    return lambda d: d.__setitem__(name, limit)


#: Faults of ``refusal_order.RNG_ABI_REFUSALS``: each field one past its range.
FIELD_BREAKS = precedence.Breaks[dict](
    family="rng_abi",
    base=key_fields,
    faults={
        1: one_past("seed", 1 << 64),
        2: one_past("position", 1 << 32),
        3: one_past("round", 1 << 32),
        4: one_past("generation", 1 << 32),
        5: one_past("draw_counter", 1 << 24),
    },
    encode=lambda d: {**d, "seed": str(d["seed"])},  # the u64 text, 2^64 included (20 digits)
)


def invalid_field_cases() -> Iterator[Case]:
    base = {"seed": 1, "generation": 0, "round": 0, "position": 0, "domain": "ACCEPT", "draw_counter": 0}
    yield invalid_case(
        "draw-counter-2pow24", "Draw counter 2^24 would alias into the domain byte.", {**base, "draw_counter": 1 << 24}
    )
    yield invalid_case("position-2pow32", "Position 2^32 does not fit counter word 0.", {**base, "position": 1 << 32})
    yield invalid_case(
        "generation-2pow32", "Generation 2^32 does not fit counter word 2.", {**base, "generation": 1 << 32}
    )
    yield invalid_case("round-2pow32", "Round 2^32 does not fit counter word 1.", {**base, "round": 1 << 32})
    yield invalid_case(
        "seed-2pow64",
        "Seed 2^64 does not fit the two key words; it is refused, not taken mod 2^64.",
        {**base, "seed": 1 << 64},
    )
    yield invalid_case(
        "position-negative",
        "Position -1 is no 32-bit word; it is refused, not wrapped to 2^32 - 1.",
        {**base, "position": -1},
    )


def unseeded_cases() -> Iterator[Case]:
    ids = {
        "request-a": ("req-a", "A short request ID."),
        "request-b": ("req-b", "One character away from req-a: an unrelated seed."),
        "empty-id": ("", "The empty request ID: the hash of the tag alone."),
        "engine-style-id": ("cmpl-3f9c2a7e5b1d4c8e9a0f6b2d7e1c5a3b-0", "A completion ID with its sequence suffix."),
        "non-ascii-id": ("requête-7-请求", "Non-ASCII: the UTF-8 bytes are hashed."),
    }
    for name, (request_id, comment) in ids.items():
        yield solved_case(name, comment, ("R24",), ("UNSEEDED_REQUEST",), {"request_id": request_id})


def build() -> Iterator[Group]:
    yield Group("philox_kat", "Random123 known-answer lines for philox4x32 10.", ("R22",), list(kat_cases()))
    yield Group(
        "draw_keys",
        "Key and counter words of one draw, its output words and draws.",
        ("R22", "R23"),
        list(draw_key_cases()),
    )
    yield Group(
        "round_schedule", "The key of every draw of one round.", ("R14", "R22", "R23"), list(round_schedule_cases())
    )
    yield Group(
        "invalid_fields",
        "Fields outside their widths, refused with BAD_RNG_FIELD.",
        ("R22", "R24"),
        list(invalid_field_cases()),
    )
    yield Group(
        "precedence",
        "Every refusal row alone and every pair: one code, BAD_RNG_FIELD, whichever fields are out of range.",
        ("R22", "R24"),
        list(precedence.precedence_cases(FIELD_BREAKS, solve, ("R22", "R24"))),
    )
    yield Group(
        "unseeded_requests", "The seed of a request without one, from its request ID.", ("R24",), list(unseeded_cases())
    )


WORD4 = {"type": "array", "items": {"$ref": "#/$defs/word32"}, "minItems": 4, "maxItems": 4}
WORD2 = {"type": "array", "items": {"$ref": "#/$defs/word32"}, "minItems": 2, "maxItems": 2}
NONNEG = {"type": "integer", "minimum": 0}
#: an input field of a key: any integer, so that the refusals of fields out of range (negative or too wide) are inputs
FIELD = {"type": "integer"}


SCHEDULE_DRAWS = {
    "type": "array",
    "items": closed({"position": NONNEG, "counter": WORD4, "value": NONNEG}),
}

INPUT_SCHEMA = {
    "oneOf": [
        closed({"counter": WORD4, "key": WORD2, "rounds": {"const": 10}}),
        closed(
            {
                "seed": {"$ref": "#/$defs/u64"},
                "generation": FIELD,
                "round": FIELD,
                "position": FIELD,
                "domain": {"enum": DOMAIN_NAMES},
                "draw_counter": FIELD,
            }
        ),
        closed(
            {
                "seed": {"$ref": "#/$defs/u64"},
                "generation": NONNEG,
                "round": NONNEG,
                "anchor": NONNEG,
                "depth": {"type": "integer", "minimum": 1},
            }
        ),
        closed({"request_id": {"type": "string"}}),
    ]
}

EXPECTED_SCHEMA = {
    "oneOf": [
        closed({"output": WORD4}),
        closed({"key": WORD2, "counter": WORD4, "output": WORD4, "u24": NONNEG, "u32": NONNEG}),
        closed({"proposal": SCHEDULE_DRAWS, "accept": SCHEDULE_DRAWS, "correction": SCHEDULE_DRAWS}),
        closed({"seed": {"$ref": "#/$defs/u64"}}),
        closed({"error": {"const": "BAD_RNG_FIELD"}}),
    ]
}


# --- fuzzing ------------------------------------------------------------------------------------


def fuzz_strategy() -> SearchStrategy[dict]:
    from qconform.generators import fuzz_inputs

    return fuzz_inputs.rng_abi_inputs


def fuzz_labels(case_input: dict, expected: dict) -> Labels:
    if "counter" in case_input:
        return ("R22",), ()
    if "depth" in case_input:
        return ("R14", "R22", "R23"), ("ROUND_SCHEDULE",)
    return ("R22", "R23"), ("DRAW_READOUT",)


FAMILY = Family(
    name="rng_abi",
    description="Philox4x32-10 known answers and the RNG ABI philox4x32-10-qconform-v1 (docs/rng-abi.md).",
    rules=("R14", "R22", "R23", "R24"),
    notes=NOTES,
    build=build,
    input_schema=INPUT_SCHEMA,
    expected_schema=EXPECTED_SCHEMA,
    solve=solve,
    fuzz=FuzzHooks(inputs=fuzz_strategy, labels=fuzz_labels),
    precedence=FIELD_BREAKS,
)
