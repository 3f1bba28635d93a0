"""Rendering of ``qconform sizes``: the design's size table (R26) as a rich table."""

from __future__ import annotations

from fractions import Fraction

from rich.console import Console
from rich.table import Table

from qconform.spec.sizes import MB, MIB, SizeTable, rounded_decimal


def bytes_text(n: int) -> str:
    """``2,585,600`` and, on a second line, ``(2.586 MB)``; MB is 10^6 bytes as in the design."""
    if n < MB // 10:
        return f"{n:,}"
    return f"{n:,}\n({rounded_decimal(Fraction(n, MB), 3)} MB)"


def ms_text(seconds: Fraction) -> str:
    """Milliseconds (microseconds below 0.1 ms) rounded to 3 places, and the exact rational."""
    ms = seconds * 1000
    shown = f"{rounded_decimal(ms, 3)} ms" if ms >= Fraction(1, 10) else f"{rounded_decimal(ms * 1000, 3)} µs"
    return f"{shown}\n= {ms.numerator}/{ms.denominator} ms"


def render(table: SizeTable, console: Console) -> None:
    p = table.params
    gbps = p.link_bits_per_second / 10**9
    title = f"q payload sizes, depth {p.depth}, {p.requests} requests/batch, ideal serialization at {gbps} Gb/s"
    grid = Table(title=title)
    grid.add_column("Layout", no_wrap=True)
    grid.add_column("Bytes / request", justify="right", no_wrap=True)
    grid.add_column(f"Bytes / {p.requests} requests", justify="right", no_wrap=True)
    grid.add_column("Ideal time / request", justify="right", no_wrap=True)
    grid.add_column("Ideal time / batch", justify="right", no_wrap=True)
    for row in table.rows:
        grid.add_row(
            row.layout + (" (per rank)" if row.per_rank else ""),
            bytes_text(row.request_bytes),
            bytes_text(row.batch_bytes),
            ms_text(row.request_seconds),
            ms_text(row.batch_seconds),
        )
    console.print(grid)
    mib = rounded_decimal(Fraction(table.in_flight_bytes, MIB), 2)
    console.print(
        f"{p.slots} in-flight dense batch slots: {table.in_flight_bytes:,} bytes ({mib} MiB) per full copy on each endpoint."
    )
    console.print("Exact shape arithmetic of the q payload only (no headers, alignment, checksums, padding);")
    console.print("serialization times are ideal bounds at the nominal rate, not measured latency (R26).")
    if table.shape_refusal:
        console.print(f"[yellow]R27 refuses this shape: {table.shape_refusal}[/yellow]")
