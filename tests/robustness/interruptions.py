"""The commands the robustness tests interrupt, and what each says once interrupted
(docs/harness.md, "Stopping cleanly"): one table for tests/robustness/test_long_work.py and
tests/robustness/test_interrupted_starts.py."""

from __future__ import annotations

#: the partial report of an interrupted fuzz or accumulate: the summary says how far it got
PARTIAL = {
    "fuzz": (["fuzz", "--family", "rng_abi", "--examples", "1000"], "INTERRUPTED by {name} after 1 of 1000 examples"),
    "accumulate": (
        ["accumulate", "--family", "rng_abi", "--count", "100000"],
        "INTERRUPTED by {name}: rng_abi: 0 of 100000 cases answered",
    ),
}

#: commands that stop with one line while their adapter starts: what the line says was not done
STARTING = {
    "stat": (["stat"], "nothing sampled"),
    "fuzz": (["fuzz", "--family", "rng_abi", "--examples", "100"], "nothing fuzzed"),
    "batch-invariance": (["batch-invariance"], "nothing checked"),
}


def starting_line(nothing: str) -> str:
    """The line of a :data:`STARTING` command interrupted while its adapter starts (``{name}``: the signal's)."""
    return "Error: interrupted by {name} while the adapter started; " + nothing
