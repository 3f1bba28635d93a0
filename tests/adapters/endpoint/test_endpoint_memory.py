"""glibc's mmap threshold pinned (``memory.return_large_buffers``): freed large buffers leave RSS.

Each case runs in a fresh process, so no earlier test's heap hides or causes the
growth: an 8 MB buffer freed (which raises glibc's dynamic threshold to 8 MB),
then 64 buffers of 1 MB made and all but the newest freed, the pattern of dense
rounds whose newest buffers outlive the older ones. Pinned, the freed 63 MB
leave RSS; left dynamic (the control: the soak's worker before issue #25's
fix), the heap keeps them below the newest buffer.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
import numpy as np
from qconform.adapters.endpoint.memory import return_large_buffers

def rss_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

if sys.argv[1] == "pinned":
    assert return_large_buffers()
freed = np.ones(8 << 20, np.uint8)
del freed
before = rss_mb()
kept = [np.ones(1 << 20, np.uint8) for _ in range(64)]
newest = kept.pop()
del kept
print(rss_mb() - before)
"""


def grown_mb(mode: str) -> float:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc")
def test_pinned_threshold_returns_freed_large_buffers():
    assert grown_mb("pinned") < 8


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc")
def test_the_dynamic_threshold_keeps_them():
    """The control: without the pin the same pattern keeps the freed buffers resident (what the pin mends)."""
    assert grown_mb("dynamic") > 32
