"""Fuzz the wire v2 decoder and receiver, structure-aware (R18, R19, R21): count inputs, findings, codes reached.

Each input is a valid frame of ``wire_frames``' pool mutated as a message (a
field set to a boundary value, a q value or sparse ID broken, the entry count
or representation changed), with its checksums resealed most of the time, fed
to the spec receiver in a negotiated session (``qconform.generators.wire_fuzz``).
A finding is any exception. The run prints the count of inputs per outcome
(reason code, ``accept``, ``duplicate``, ``greedy_v1``) as a Markdown table, the
share stopped by framing (magic, truncation, lengths, checksum, before HELLO),
and the single-frame reason codes not reached.

    .venv/bin/python bench/fuzz_wire_decoder.py --runs 1000000                  # atheris if installed
    .venv/bin/python bench/fuzz_wire_decoder.py --runs 1000000 --engine random  # the plain engine

atheris (``pip install -e '.[fuzz]'``; libFuzzer, coverage-guided) instruments
``qconform.spec.wire`` and steers the same mutations through its
``FuzzedDataProvider``; without it a seeded ``random.Random`` drives them.
Exit status: 0, or 1 with a finding or a single-frame code not reached.
"""

from __future__ import annotations

import argparse
import atexit
import sys
import time

try:
    import atheris  # pyright: ignore[reportMissingModuleSource] - the optional [fuzz] extra
except ImportError:  # the random engine needs nothing beyond the project
    atheris = None

if atheris is not None:
    # typeshed's atheris stubs declare neither this nor FuzzedDataProvider at the package's top level,
    # where atheris exports both
    with atheris.instrument_imports(include=["qconform.spec.wire"]):  # pyright: ignore[reportAttributeAccessIssue]
        from qconform.spec.wire import codec, header, receiver, validation  # noqa: F401

from qconform.generators.wire_fuzz import (
    ProviderChooser,
    Tally,
    fuzz,
    make_input,
    run_input,
    single_frame_codes,
)
from qconform.spec.wire.reasons import REASONS

#: Reasons given before a frame's fields can be trusted: the stops a byte-level fuzzer spends its inputs on.
FRAMING = (
    "TRUNCATED",
    "BAD_MAGIC",
    "UNKNOWN_VERSION",
    "UNKNOWN_MESSAGE_TYPE",
    "LENGTH_MISMATCH",
    "UNEXPECTED_SIZE",
    "CHECKSUM_MISMATCH",
    "V2_BEFORE_HELLO",
)


def report(tally: Tally, engine: str, seconds: float) -> int:
    """Print the per-code table and return the exit status."""
    missing = sorted(single_frame_codes() - set(tally.outcomes))
    framing = sum(tally.outcomes[c] for c in FRAMING)
    print(
        f"engine: {engine}; inputs: {tally.inputs}; findings: {len(tally.findings)}; "
        f"seconds: {seconds:.0f} ({tally.inputs / max(seconds, 1e-9):.0f} inputs/s)"
    )
    for finding in tally.findings[:10]:
        print(f"  {finding}")
    print(
        f"stopped by framing: {framing / max(tally.inputs, 1):.1%}; reason codes reached: "
        f"{len(set(tally.outcomes) & set(REASONS))} of {len(REASONS)}; single-frame codes not reached: "
        f"{', '.join(missing) or 'none'}"
    )
    print("\n| outcome | inputs | share |\n|---|---:|---:|")
    for code, n in sorted(tally.outcomes.items(), key=lambda item: (-item[1], item[0])):
        print(f"| `{code}` | {n} | {n / tally.inputs:.2%} |")
    sys.stdout.flush()
    return 1 if tally.findings or missing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    parser.add_argument("--seed", type=int, default=1)
    args, rest = parser.parse_known_args()
    engine = args.engine if args.engine != "auto" else ("atheris" if atheris is not None else "random")
    started = time.perf_counter()
    if engine == "random":
        tally = fuzz(
            args.runs, args.seed, lambda t: print(f"... {t.inputs} inputs, {len(t.findings)} findings", flush=True)
        )
        return report(tally, engine, time.perf_counter() - started)
    if atheris is None:
        print("atheris is not installed (pip install -e '.[fuzz]'); use --engine random", file=sys.stderr)
        return 2
    tally = Tally()
    reported: list[int] = []

    def final_report() -> None:
        if not reported:  # libFuzzer may leave through os._exit after the last input: report at that input
            reported.append(report(tally, engine, time.perf_counter() - started))

    atexit.register(final_report)

    def one_input(data: bytes) -> None:
        provider = atheris.FuzzedDataProvider(data)  # pyright: ignore[reportAttributeAccessIssue, reportOptionalMemberAccess]
        run_input(make_input(ProviderChooser(provider)), tally)
        if tally.inputs % 100_000 == 0:
            print(f"... {tally.inputs} inputs, {len(tally.findings)} findings", flush=True)
        if tally.inputs >= args.runs:
            final_report()

    atheris.Setup([sys.argv[0], f"-runs={args.runs}", f"-seed={args.seed}", "-max_len=64", *rest], one_input)
    atheris.Fuzz()
    final_report()
    return reported[0]


if __name__ == "__main__":
    sys.exit(main())
