"""Test-only vector families for the corpus pipeline (fast, independent of the real ones).

``install(monkeypatch)`` swaps them into ``qconform.generators.registry``; run as a
script, this module installs them and then runs the ``qconform`` CLI, so
subprocess tests (hash-seed determinism) see the same fakes.

Setting ``QCONFORM_FAKE_PRUNE=1`` makes ``fake_alpha`` stop yielding one case.
"""

from __future__ import annotations

import os
import sys
from fractions import Fraction

from qconform.generators import registry
from qconform.generators.encoding import encode_blob, encode_f32, encode_rational, encode_u64, f32_bits
from qconform.generators.registry import Case, Family, Group, Note

PRUNED_CASE = "fake_alpha/rows/dense_b"

# Notes are built by iterating a set of strings: their order depends on the hash
# seed, so only the pipeline's sorted serialization makes the bytes stable.
_FLAG_TEXT = {"TIE": "an exact tie", "TINY": "a tiny weight", "SKEW": "a skewed row"}
_NOTES = {flag: Note("EDGE_CASE", _FLAG_TEXT[flag]) for flag in set(_FLAG_TEXT)}

_INPUT = {
    "type": "object",
    "properties": {
        "q": {"$ref": "#/$defs/qRow"},
        "p": {"$ref": "#/$defs/pRows"},
        "seed": {"$ref": "#/$defs/u64"},
        "temperature": {"$ref": "#/$defs/f32"},
    },
    "required": ["q", "seed"],
    "additionalProperties": False,
}
_EXPECTED = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"token": {"type": "integer"}, "mass": {"$ref": "#/$defs/rational"}},
            "required": ["token", "mass"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"error": {"type": "string"}},
            "required": ["error"],
            "additionalProperties": False,
        },
    ]
}


def _dense(counts: list[int]) -> dict:
    return {"representation": "dense", "counts": encode_blob("u32", counts)}


def _case(name: str, counts: list[int], token: int, flags: tuple[str, ...]) -> Case:
    total = sum(counts)
    return Case(
        name=name,
        comment=f"dense row {counts}",
        rules=("R08",),
        input={"q": _dense(counts), "seed": encode_u64(2**64 - 1 - token), "temperature": encode_f32(f32_bits(1.0))},
        expected={"token": token, "mass": encode_rational(Fraction(counts[token], total))},
        flags=flags,
    )


def _alpha_groups():
    rows = [
        _case("dense_a", [1, 2, 1], 1, ("TIE",)),
        _case("dense_b", [3, 1], 0, ("TINY",)),
        _case("dense_c", [1, 1, 6], 2, ("SKEW", "TIE")),
    ]
    if os.environ.get("QCONFORM_FAKE_PRUNE"):
        rows = [c for c in rows if c.name != PRUNED_CASE.rsplit("/", 1)[1]]
    yield Group("rows", "dense rows", ("R08",), rows)
    sparse = Case(
        name="sparse_k2",
        comment="sparse support with exact rational p",
        rules=("R07", "R10"),
        input={
            "q": {"representation": "sparse", "ids": encode_blob("i32", [0, 5]), "counts": encode_blob("u32", [3, 5])},
            "p": {"probabilities": [["1/2", "1/2"]]},
            "seed": "7",
        },
        expected={"token": 5, "mass": "5/8"},
        flags=("TINY",),
    )
    refusal = Case(
        name="zero_mass",
        comment="all-zero counts are refused",
        rules=("R05",),
        input={"q": _dense([0, 0]), "seed": "0"},
        expected={"error": "ZERO_MASS"},
        result="invalid",
    )
    yield Group("mixed", "sparse rows and refusals", ("R05", "R07", "R10"), [sparse, refusal])


def _beta_groups():
    yield Group(
        "only",
        "a single weights case",
        ("R10",),
        [
            Case(
                name="weights_f32",
                comment="target weights as FP32 bit patterns",
                rules=("R10",),
                input={
                    "q": _dense([1, 1]),
                    "p": {"weights": encode_blob("f32", [f32_bits(0.25), f32_bits(0.75)], [1, 2])},
                    "seed": "1",
                },
                expected={"token": 1, "mass": "3/4"},
            )
        ],
    )


FAKE_FAMILIES = {
    "fake_alpha": Family(
        name="fake_alpha",
        description="fake family for pipeline tests",
        rules=("R05", "R07", "R08", "R10"),
        notes=_NOTES,
        build=_alpha_groups,
        input_schema=_INPUT,
        expected_schema=_EXPECTED,
    ),
    "fake_beta": Family(
        name="fake_beta",
        description="second fake family",
        rules=("R10",),
        notes={},
        build=_beta_groups,
        input_schema=_INPUT,
        expected_schema=_EXPECTED,
    ),
}


def load_fake(name: str) -> Family:
    if name not in FAKE_FAMILIES:
        raise KeyError(name)
    return FAKE_FAMILIES[name]


def install(monkeypatch=None) -> None:
    """Make the registry serve the fake families (undone by ``monkeypatch``, if given)."""
    if monkeypatch is None:
        registry.family_names = lambda: tuple(FAKE_FAMILIES)
        registry.load_family = load_fake
        return
    monkeypatch.setattr(registry, "family_names", lambda: tuple(FAKE_FAMILIES))
    monkeypatch.setattr(registry, "load_family", load_fake)


if __name__ == "__main__":
    install()
    from qconform.cli.group import cli

    cli.main(args=sys.argv[1:], prog_name="qconform")
