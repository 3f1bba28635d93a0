"""Fixed-depth arms (R27, R35): how a proposal depth is named and negotiated, and the one check of it.

An **arm** is a proposal depth K fixed before sampling (R35), named ``depth-K``.
The design's arm is ``depth-5`` (R27's production bound); any other arm is a
separately named one, and exists for K = 1..:data:`ARM_MAX_DEPTH`. A deployment
serves exactly one arm: its receiver configuration names it (HELLO ``depth``),
the worker's HELLO negotiates it by equality, and every entry point that takes
a depth refuses one that is not the negotiated arm, with the same check
(:func:`check_depth`; on the wire its reason is DEPTH_MISMATCH).
docs/wire-v2.md, "Fixed-depth arms".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qconform.spec.constants import DEPTH
from qconform.spec.errors import refuse
from qconform.spec.rules import defines

#: The deepest arm: K + 1 target rows and K REPLY frames per round must fit the
#: preallocated slot (R27); 8 keeps an arm's dense slot within 8/5 of the design's.
ARM_MAX_DEPTH: int = 8
ARM_NAME = re.compile(r"depth-([1-9][0-9]*)")


@dataclass(frozen=True)
class Arm:
    """A fixed-depth arm: its depth K; its name is ``depth-K``."""

    depth: int

    @property
    def name(self) -> str:
        return f"depth-{self.depth}"


#: The design's arm (R27): depth five.
DESIGN_ARM: Arm = Arm(DEPTH)


@defines("R27", "R35")
def check_arm(arm: Arm) -> Arm:
    """Refuse (BAD_SHAPE) an arm that does not exist: a depth outside 1..ARM_MAX_DEPTH."""
    depth = arm.depth
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= ARM_MAX_DEPTH:
        raise refuse("BAD_SHAPE", f"no fixed-depth arm has depth {depth!r}: arms are depth-1..depth-{ARM_MAX_DEPTH}")
    return arm


@defines("R35")
def arm_named(name: str) -> Arm:
    """The arm called ``name`` (``depth-K``); BAD_SHAPE for any other name."""
    match = ARM_NAME.fullmatch(name)
    if match is None:
        raise refuse("BAD_SHAPE", f"{name!r} is not an arm name (depth-K)")
    return check_arm(Arm(int(match.group(1))))


@defines("R27", "R35")
def check_depth(depth: int, arm: Arm) -> None:
    """Refuse (BAD_SHAPE) a depth other than the negotiated ``arm``'s (which must exist)."""
    check_arm(arm)
    if depth != arm.depth:
        raise refuse("BAD_SHAPE", f"depth {depth} is not the negotiated arm {arm.name} (R27, R35)")
