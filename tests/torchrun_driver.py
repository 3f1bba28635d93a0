"""Launched by tests/harness/test_distributed_runs.py under ``torchrun``: one ``qconform accumulate`` and one
``qconform stat`` run in the same processes; rank 0 prints the hash and writes the stat report."""

from __future__ import annotations

import sys

from qconform.cli.group import cli


def run(args: list[str]) -> int:
    try:
        code = cli.main(args, standalone_mode=False)
    except SystemExit as exc:
        code = exc.code
    return int(code or 0)


if __name__ == "__main__":
    accumulate_args, stat_json = sys.argv[1:-1], sys.argv[-1]
    codes = [
        run(["accumulate", *accumulate_args]),
        run(
            [
                "stat",
                "--adapter",
                "torch-native-rng",
                "--case",
                "verification_round/residual/*",
                "--samples",
                "3000",
                "--chunk",
                "1000",
                "--json",
                stat_json,
            ]
        ),
    ]
    print(f"exit codes {codes}", flush=True)
