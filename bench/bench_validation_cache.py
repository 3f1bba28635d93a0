"""How much of ``qconform run``'s start the record of validated vector files saves
(docs/vector-format.md, "Validated once").

Runs ``qconform run --adapter ADAPTER --list`` (the corpus collected and checked, nothing run), and
optionally a whole run, with a cold cache (a fresh ``$QCONFORM_CACHE`` each time: every file is
checked) and a warm one (every file was checked before), interleaved, and prints the medians (min,
max) and the ratio cold / warm of each. The baseline is the cold row, measured in the same run.

    .venv/bin/python bench/bench_validation_cache.py --repeat 7
    .venv/bin/python bench/bench_validation_cache.py --repeat 5 --whole-run
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(args: list[str], cache: Path) -> float:
    env = {**os.environ, "QCONFORM_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "qconform", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def summary(times: list[float]) -> str:
    return f"{statistics.median(times):6.2f} s ({min(times):.2f}-{max(times):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--adapter", default="reference")
    parser.add_argument("--whole-run", action="store_true", help="also time the whole run, not only --list")
    options = parser.parse_args()
    commands = {"collect (--list)": ["run", "--adapter", options.adapter, "--list"]}
    if options.whole_run:
        commands["whole run"] = ["run", "--adapter", options.adapter]
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as scratch:
        warm = Path(scratch) / "warm"
        for args in commands.values():
            timed(args, warm)  # every file checked once: the warm cache
        rows: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in commands}
        for index in range(options.repeat):
            for name, args in commands.items():
                cold = Path(scratch) / f"cold-{index}"
                rows[name]["cold"].append(timed(args, cold))
                shutil.rmtree(cold, ignore_errors=True)
                rows[name]["warm"].append(timed(args, warm))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"{'':18} {'cold cache':>22} {'warm cache':>22}  cold / warm (median; run by run)")
    for name, times in rows.items():
        pairs = sorted(c / w for c, w in zip(times["cold"], times["warm"]))
        ratio = statistics.median(times["cold"]) / statistics.median(times["warm"])
        print(
            f"{name:18} {summary(times['cold']):>22} {summary(times['warm']):>22}  "
            f"{ratio:.2f}x; {statistics.median(pairs):.2f}x ({pairs[0]:.2f}-{pairs[-1]:.2f})"
        )


if __name__ == "__main__":
    main()
