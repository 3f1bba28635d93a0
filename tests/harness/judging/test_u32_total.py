"""value_diff.u32_total (issue #24): the exact sum of a u32 row's bytes, in Python below
NUMPY_SUM_ITEMS items and in NumPy's uint64 from there on, the same on both sides."""

from __future__ import annotations

import random
import struct

import pytest

from qconform.harness.judging.value_diff import NUMPY_SUM_ITEMS, u32_total


@pytest.mark.parametrize("items", [0, 1, NUMPY_SUM_ITEMS - 1, NUMPY_SUM_ITEMS, 129280])
@pytest.mark.parametrize("fill", ["max", "random"])
def test_the_total_is_the_exact_sum_of_the_items(items, fill):
    rng = random.Random(items)
    values = [0xFFFFFFFF if fill == "max" else rng.randrange(1 << 32) for _ in range(items)]
    view = memoryview(struct.pack(f"<{items}I", *values))
    total = u32_total(view)
    assert type(total) is int and total == sum(values)
    if fill == "max" and items:
        assert total > 0xFFFFFFFF or items == 1  # no wrap at 32 bits
