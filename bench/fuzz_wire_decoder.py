"""Fuzz the wire v2 decoder and stateless checks (R18, R19, R21): count inputs and findings.

A finding is any exception other than a ``WireReject`` whose code is registered
in ``qconform.spec.wire.reasons.REASONS`` (a crash, or an unclassified refusal).
Inputs are raw bytes, or a valid frame of ``wire_frames``' pool with the input
XOR-ed over it (half of them with the frame checksum resealed, so the fuzzer
reaches the payload checks), each checked before and after HELLO.

    .venv/bin/python bench/fuzz_wire_decoder.py --runs 1000000            # atheris if installed
    .venv/bin/python bench/fuzz_wire_decoder.py --runs 200000 --engine random

With atheris (libFuzzer, coverage-guided) the decoder modules are instrumented;
without it, a seeded random mutator drives the same target. Prints the count of
inputs, of findings, the reasons seen and the time taken.
"""

from __future__ import annotations

import argparse
import atexit
import random
import sys
import time
from collections import Counter

try:
    import atheris
except ImportError:  # the random engine needs nothing beyond the project
    atheris = None

if atheris is not None:
    with atheris.instrument_imports(include=["qconform.spec.wire"]):
        from qconform.spec.wire import codec, header, receiver, validation  # noqa: F401

from qconform.generators.families.wire_frames import base_frames
from qconform.spec.wire.codec import encode_v1
from qconform.spec.wire.header import seal
from qconform.spec.wire.reasons import REASONS, WireReject
from qconform.spec.wire.receiver import check_frame

POOL = [(config, data) for _, config, _, data in base_frames()] + [(base_frames()[0][1], encode_v1([1, 2, 3]))]
REPORT_EVERY = 100_000


class Tally:
    def __init__(self, target: int) -> None:
        self.target = target
        self.inputs = 0
        self.findings: list[str] = []
        self.outcomes: Counter[str] = Counter()
        self.started = time.perf_counter()
        self.printed = False

    def report(self) -> None:
        if self.printed:
            return
        self.printed = True
        seconds = time.perf_counter() - self.started
        print(f"inputs: {self.inputs}")
        print(f"findings: {len(self.findings)}")
        for finding in self.findings[:10]:
            print(f"  {finding}")
        print(f"outcomes: {len(self.outcomes)} distinct; " + ", ".join(f"{k}={v}" for k, v in self.outcomes.most_common()))
        print(f"seconds: {seconds:.1f} ({self.inputs / max(seconds, 1e-9):.0f} inputs/s)")
        sys.stdout.flush()


def frame_of(data: bytes) -> tuple[bytes, bool, object]:
    """The frame an input stands for, whether HELLO is negotiated, and the configuration."""
    if len(data) < 2:
        return data, False, POOL[0][0]
    mode, pick = data[0], data[1]
    config, base = POOL[pick % len(POOL)]
    rest = data[2:]
    if mode % 3 == 0:
        return rest, bool(mode & 4), config
    out = bytearray(base)
    for i, b in enumerate(rest):
        out[(i * 7 + pick) % len(out)] ^= b
    if mode & 8:
        del out[len(out) - (mode >> 4):]
    frame = bytes(out)
    if mode % 3 == 2 and len(frame) >= 20:
        frame = seal(frame)
    return frame, bool(mode & 4), config


def target(tally: Tally, data: bytes) -> None:
    frame, negotiated, config = frame_of(data)
    tally.inputs += 1
    try:
        check_frame(frame, config, config if negotiated else None)
        tally.outcomes["accept"] += 1
    except WireReject as error:
        if error.code not in REASONS:
            tally.findings.append(f"unregistered code {error.code!r} for {frame.hex()}")
        tally.outcomes[error.code] += 1
    except Exception as error:  # noqa: BLE001 - every other exception is a finding
        tally.findings.append(f"{type(error).__name__}: {error} for {frame[:64].hex()}")
    if tally.inputs % REPORT_EVERY == 0:
        print(f"... {tally.inputs} inputs, {len(tally.findings)} findings", flush=True)
    if tally.inputs >= tally.target:
        tally.report()


def random_input(rng: random.Random) -> bytes:
    mode = rng.randrange(256)
    size = rng.choice((0, 1, 2, 4, 8, 16, 64, 300))
    return bytes([mode, rng.randrange(256)]) + bytes(rng.randrange(256) if rng.random() < 0.3 else 0 for _ in range(size))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    parser.add_argument("--seed", type=int, default=1)
    args, rest = parser.parse_known_args()
    engine = "atheris" if args.engine == "auto" and atheris is not None else args.engine
    if engine == "auto":
        engine = "random"
    print(f"engine: {engine}, runs: {args.runs}", flush=True)
    tally = Tally(args.runs)
    atexit.register(tally.report)
    if engine == "atheris":
        if atheris is None:
            print("atheris is not installed", file=sys.stderr)
            return 2
        atheris.Setup([sys.argv[0], f"-runs={args.runs}", f"-seed={args.seed}", "-max_len=600", *rest],
                      lambda data: target(tally, data))
        atheris.Fuzz()
    else:
        rng = random.Random(args.seed)
        while tally.inputs < args.runs:
            target(tally, random_input(rng))
    tally.report()
    return 1 if tally.findings else 0


if __name__ == "__main__":
    sys.exit(main())
