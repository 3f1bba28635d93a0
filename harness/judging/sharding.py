"""Comparator of ``sharding``: every decision exactly, the exact sums within ``sum_rel``.

A sharding answer (docs/formats/sharding.md) holds per-shard partial results and
the merged global result. Most of them are decisions: the shard maxima, local
top-k candidates, floors, tickets, count masses, the global support, the
remaining tickets, the q row and every draw's shard, index and token. Those must
equal the expected values exactly (R30-R33): a wrong ticket or a wrong shard is a
``fail`` whatever the profile says.

The **sums** (:data:`SUM_FIELDS`: the shifted sum, support sum and remainder sum
of each shard and of the merge, and the residual's target sums) are exact
rationals in the spec. An implementation that reduces them in floating point (an
FP64 all-reduce, as a real tensor-parallel engine does) answers the exact value of
its float result, which may differ in the last bits. Such a difference is
``precision`` when the adapter's profile declares ``sum_rel`` and
``|answer - expected| <= sum_rel * |expected|``; beyond it, or without the
declaration, it is ``fail``. The case's decisions were generated away from every
FP64 rounding hazard (the generator refuses quotas near an integer or the ticket
threshold), so an implementation with inexact sums still owes exact decisions.
"""

from __future__ import annotations

import copy
from fractions import Fraction

from qconform.generators.encoding import decode_rational
from qconform.harness.adapter import PrecisionProfile
from qconform.harness.judging.judge import profile_margin
from qconform.harness.judging.value_diff import first_difference
from qconform.harness.verdicts import Diff, Verdict, brief, failed, passed, precision

#: the answer fields that are exact sums, in the per-shard partials and in the merge
SUM_FIELDS = ("shifted_sum", "support_sum", "remainder_sum", "target_sum")


def paired_parents(expected: dict, answer: dict) -> list[tuple[str, dict, object]]:
    """``(path, expected object, answered object)`` of the objects that hold sums: each
    ``shards[i]`` and ``merged`` (the answered one None where the answer lacks it)."""
    shards = answer.get("shards")
    if not isinstance(shards, list):
        shards = []
    pairs: list[tuple[str, dict, object]] = [
        (f"shards[{i}]", want, shards[i] if i < len(shards) else None)
        for i, want in enumerate(expected.get("shards", []))
    ]
    return pairs + [("merged", expected.get("merged", {}), answer.get("merged"))]


def sum_divergences(expected: dict, output: dict) -> tuple[dict, list[tuple[str, Fraction, Fraction]]]:
    """The answer with each well-formed sum set to its expected value, and the sums that
    differed: ``(path, expected, answered)``. A malformed or missing sum is left for the
    exact comparison to report."""
    decisions = copy.deepcopy(output)
    differing = []
    for where, want, got in paired_parents(expected, decisions):
        if not isinstance(got, dict):
            continue
        for key in SUM_FIELDS:
            path = f"{where}.{key}"
            if key in want and key in got and first_difference(want[key], got[key], path) is not None:
                differing.append((path, decode_rational(want[key]), decode_rational(got[key])))
                got[key] = want[key]
    return decisions, differing


def compare(case: dict, output: dict, profile: PrecisionProfile) -> Verdict:
    case_id, expected = case["id"], case["expected"]
    decisions, differing = sum_divergences(expected, output)
    diff = first_difference(expected, decisions)
    if diff is not None:
        return failed(case_id, f"a decision differs at {diff.path}", diff)
    if not differing:
        return passed(case_id)
    limit = profile_margin(profile, "sum_rel")
    for path, want, got in differing:
        if abs(got - want) > limit * abs(want):
            relative = abs(got - want) / abs(want) if want else None
            return failed(
                case_id,
                f"sum {path} differs by {brief(relative) if relative is not None else 'any amount'}"
                f" relative, beyond the profile's sum_rel {brief(limit)}",
                Diff(path, str(want), str(got)),
            )
    path, want, got = differing[0]
    return precision(
        case_id,
        f"{len(differing)} sum(s) differ within sum_rel {brief(limit)} (first: {path}); every decision is exact",
        Diff(path, str(want), str(got)),
    )
