"""``qconform sizes``: the design's size table (R26), exactly."""

from __future__ import annotations

from fractions import Fraction

import click

from qconform.cli.console import wide_console


def _fraction(_ctx, _param, value: str) -> Fraction:
    try:
        rate = Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise click.BadParameter(f"{value!r} is not a decimal or rational number") from None
    if rate <= 0:
        raise click.BadParameter("must be positive")
    return rate


@click.command()
@click.option("--vocab", type=click.IntRange(min=1), default=None, help="Vocabulary size V (default 129280).")
@click.option("--depth", type=click.IntRange(min=1), default=None, help="Proposal depth K (default 5).")
@click.option("--requests", type=click.IntRange(min=1), default=None, help="Requests per batch (default 4).")
@click.option(
    "--k", "ks", type=click.IntRange(min=1), multiple=True, help="Sparse support sizes (default 16 32 64 256)."
)
@click.option("--shards", type=click.IntRange(min=1), default=2, show_default=True, help="Vocabulary shards (TP).")
@click.option("--slots", type=click.IntRange(min=1), default=2, show_default=True, help="In-flight dense batch slots.")
@click.option(
    "--link-gbps",
    default="40",
    show_default=True,
    callback=_fraction,
    help="Nominal link rate in Gb/s (decimal or p/q).",
)
def sizes(vocab, depth, requests, ks, shards, slots, link_gbps) -> None:
    """The design's size table (R26): exact bytes and ideal serialization bounds."""
    from qconform import sizes_report
    from qconform.spec import sizes as spec_sizes

    params = spec_sizes.SizeParams.with_defaults(vocab, depth, requests, ks, shards, slots, link_gbps)
    sizes_report.render(spec_sizes.size_table(params), wide_console())
