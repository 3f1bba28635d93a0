"""Fixed-depth arms (R27, R35): one naming, one check, the same refusal in every entry point."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from qconform.spec.arms import ARM_MAX_DEPTH, DESIGN_ARM, Arm, arm_named, check_depth
from qconform.spec.errors import SpecError
from qconform.spec.qrow import QRow
from qconform.spec.rng_abi import RngIdentity
from qconform.spec.verification import RoundInput, verify_batch
from qconform.spec.wire.negotiation import check_config, example_config
from qconform.spec.wire.receiver import initial_state

pytestmark = pytest.mark.rules("R27", "R35")

VOCAB = 4
UNIFORM = QRow.dense([1 << 22] * VOCAB)


def batch(depth: int) -> list[RoundInput]:
    p = [Fraction(1, VOCAB)] * VOCAB
    return [RoundInput(RngIdentity(7, 1, 1, 0), [1] * depth, [UNIFORM] * depth, [p] * (depth + 1))]


def refused(call) -> str:
    with pytest.raises(SpecError) as caught:
        call()
    return caught.value.code


def test_arms_are_named_depth_k():
    assert DESIGN_ARM == Arm(5) and DESIGN_ARM.name == "depth-5"
    assert arm_named("depth-7") == Arm(7)
    for name in ("depth-0", "depth-9", "depth-05", "five", "depth-"):
        assert refused(lambda name=name: arm_named(name)) == "BAD_SHAPE", name


def test_every_entry_point_refuses_the_same_depths():
    for depth in (0, ARM_MAX_DEPTH + 1):
        config = replace(example_config(vocab=60, max_support=16), depth=depth)
        assert refused(lambda config=config: check_config(config)) == "BAD_SHAPE"
        assert refused(lambda config=config: initial_state(config)) == "BAD_SHAPE"
    assert refused(lambda: verify_batch(batch(ARM_MAX_DEPTH + 1))) == "BAD_SHAPE"
    # a depth other than the negotiated arm: refused by the check every entry point shares
    assert refused(lambda: verify_batch(batch(7), DESIGN_ARM)) == "BAD_SHAPE"
    assert refused(lambda: check_depth(7, DESIGN_ARM)) == "BAD_SHAPE"


def test_a_separately_named_arm_is_served_when_negotiated():
    assert check_config(example_config(vocab=60, max_support=16, depth=7)) is None
    assert len(verify_batch(batch(7), arm_named("depth-7"))) == 1
    assert len(verify_batch(batch(5), DESIGN_ARM)) == 1
