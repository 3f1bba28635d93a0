"""bench/bench_endpoint_process.py runs end to end on a small vocabulary: the verifier process, the sink
process, the rounds, every frame accepted by the verifier (the script asserts its counters)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_endpoint_process_benchmark_runs_and_every_frame_is_accepted():
    done = subprocess.run(
        [sys.executable, "bench/bench_endpoint_process.py", "--rounds", "3", "--runs", "1", "--vocab", "64"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'accepted': 129" in done.stdout  # the HELLO, then 4 rounds of 4 x (RESET, STEP, 5 REPLYs, COMPLETION)
    assert "endpoint / sink, median of 1 runs" in done.stdout
