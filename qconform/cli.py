"""The `qconform` command line."""

from __future__ import annotations

import click

from qconform import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qconform")
def cli() -> None:
    """qconform: exact conformance kit for sampled-draft (q) speculative decoding."""


def main() -> None:
    cli()
