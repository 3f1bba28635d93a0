"""The bundled vLLM adapter against a thin loop over the same ``RejectionSampler.forward``,
at production vocabulary, measured in the same run (docs/engines/vllm.md, "Speed").

    .venv/bin/python bench/bench_vllm_stat.py                  # N = 2000 rounds per case
    .venv/bin/python bench/bench_vllm_stat.py --samples 20000

Both sides sample the ``production_vocab`` cases of ``verification_round`` (V = 129280)
``--samples`` times each, start-up (importing torch and vLLM) included:

* ``adapter``: ``qconform stat --adapter vllm:patch-expand`` (the harness, the shim protocol,
  the case decoding, the law's test);
* ``thin loop``: one program in vLLM's environment that calls the shim's
  ``sample_verification_round`` on each case: decode once, then ``RejectionSampler.forward``
  on chunks of copies (``forward_batch`` only builds vLLM's metadata), counting outcomes. No
  protocol, no harness, no law.

The ratio adapter / thin loop is the adapter's overhead; issue #23 asks for at most 1.5.
Needs the vLLM environment (``bash adapters/vllm/install.sh``); says so in one line otherwise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = "verification_round/production_vocab/*"
#: the thin loop: the shim's sampler, no protocol, no harness
THIN_LOOP = """
import json, sys, fnmatch
sys.argv = ["thin"]
sys.path.insert(0, "adapters/vllm")
import shim
sampler = shim.VllmSampler("cpu", "expand", "cpu")
corpus = json.load(open("vectors/verification_round.json"))
cases = [t for g in corpus["testGroups"] for t in g["tests"] if fnmatch.fnmatch(t["id"], "{cases}")]
for case in cases:
    shim.sample_verification_round(sampler, case["input"], {samples}, 0)
print(len(cases), "cases", file=sys.stderr)
"""


def timed(command: list[str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_vllm_stat: {' '.join(command[:4])} ... exited {done.returncode}: {done.stderr[-300:]}")
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from qconform.adapters import vllm
    from qconform.adapters.engine_env import EngineSetupError

    try:
        python = vllm.ENVIRONMENT.python()
    except EngineSetupError as exc:
        print(f"bench_vllm_stat: {exc}", file=sys.stderr)
        return 2
    thin = timed([str(python), "-c", THIN_LOOP.format(samples=args.samples, cases=CASES)])
    with tempfile.TemporaryDirectory() as tmp:
        stat = [sys.executable, "-m", "qconform", "stat", "--adapter", "vllm:patch-expand", "--case", CASES]
        adapter = timed(stat + ["--samples", str(args.samples), "--timeout", "3000", "--json", f"{tmp}/stat.json"])
    print(f"production_vocab, N = {args.samples} rounds per case, start-up included")
    print(f"  thin loop over RejectionSampler.forward  {thin:8.1f} s")
    print(f"  qconform stat --adapter vllm:patch-expand {adapter:8.1f} s")
    print(f"  adapter / thin loop                      {adapter / thin:8.2f}  (issue #23: at most 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
