"""Comparator of ``wire_frames``, ``wire_sessions`` and ``worker_sessions``: a different verdict is a wrong answer, not garbage.

An answer that is not valid against the family's schema is garbage
(:class:`~qconform.harness.judging.value_diff.Malformed`, an ``error``). A valid answer
shaped differently from ``expected`` (an ``accept`` with its decoded message
where a ``reject`` with its reason is expected, a counter that the expected
counters lack, an open round where none should be) is a receiver that decided
otherwise: ``fail`` at the first divergent path. Values of the same shape are compared exactly, as everywhere
(:func:`qconform.harness.judging.value_diff.first_difference`). There is no precision
class: a wire verdict is exact.
"""

from __future__ import annotations

from typing import Any

from qconform.harness.adapter import PrecisionProfile
from qconform.harness.judging.judge import case_family
from qconform.harness.judging.value_diff import Malformed, first_difference
from qconform.harness.transport.shim_protocol import check_output
from qconform.harness.verdicts import Diff, Verdict, brief, failed, passed

#: objects compared as one value (a typed blob, a scalar FP32)
LEAF_OBJECTS = ({"dtype", "shape", "b64"}, {"f32"})
ABSENT = "<absent>"
#: fields looked at first (the corpus stores keys sorted): the verdict before what follows from it, and
#: for a worker (``worker_sessions``) the frames it sent and its close before its draws, every event's
#: output before the final state and the counters, so a diff names the first event that differs
FIRST = ("verdict", "reason", "frames", "close", "verdicts", "outputs", "final")


def ordered(keys) -> list[str]:
    return sorted(keys, key=lambda key: FIRST.index(key) if key in FIRST else len(FIRST))


def child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def structural_difference(expected: Any, got: Any, path: str = "") -> Diff | None:
    """The first divergence of ``got`` from ``expected``, a difference of shape included."""
    if isinstance(expected, dict) and isinstance(got, dict) and set(expected) not in LEAF_OBJECTS:
        for key in ordered(expected):
            if key not in got:
                return Diff(child(path, key), brief(expected[key]), ABSENT)
            diff = structural_difference(expected[key], got[key], child(path, key))
            if diff is not None:
                return diff
        extra = [key for key in got if key not in expected]
        return Diff(child(path, extra[0]), ABSENT, brief(got[extra[0]])) if extra else None
    if isinstance(expected, list) and isinstance(got, list):
        for i, (a, b) in enumerate(zip(expected, got)):
            diff = structural_difference(a, b, f"{path}[{i}]")
            if diff is not None:
                return diff
        return None if len(got) == len(expected) else Diff(f"len({path})", str(len(expected)), str(len(got)))
    try:
        return first_difference(expected, got, path)
    except Malformed:
        return Diff(path or "output", brief(expected), brief(got))


def compare(case: dict, output: dict, profile: PrecisionProfile) -> Verdict:
    problem = check_output(case_family(case), output, strict_schema=True)
    if problem is not None:
        raise Malformed("", problem)
    diff = structural_difference(case["expected"], output)
    if diff is None:
        return passed(case["id"])
    return failed(case["id"], f"output differs at {diff}", diff)
