"""Reports of statistical mode: the terminal table, the JSON report, and the plots of failing cases.

For each failing case with a histogram, :func:`write_plots` saves the plot data as
CSV (always) and, when matplotlib is installed (``pip install 'qconform[stat]'``),
a PNG: per histogram (one per request), the observed frequency of each merged bin
over its exact probability, with the 99% band of that ratio under the exact law,
simultaneous over the case's bins (Bonferroni), from the normal approximation
``e +- z sqrt(e (1 - e) / n)`` of the frequency.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import re
from pathlib import Path
from statistics import NormalDist

from rich.console import Console
from rich.table import Table

from qconform.generators import atomic_file
from qconform.harness.stat.runner import FAIL, CaseResult, Histogram, StatRun, outcome_label

FORMAT = "qconform-stat-v1"
#: coverage of the bands drawn around the expected frequencies, simultaneous per case
BAND_COVERAGE = 0.99
STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta", "unsupported": "yellow", "interrupted": "red"}


def bin_label(outcomes: tuple) -> str:
    return outcome_label(outcomes[0]) if len(outcomes) == 1 else f"{len(outcomes)} rare outcomes"


def number(value: float | None, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def render(run: StatRun, console: Console) -> None:
    """The human report: a header, one row per case, the failures with their messages."""
    options, config = run.options, run.config
    mode = f"sequential, {options.looks} looks" if options.sequential else "fixed sample"
    console.print(
        f"[bold]qconform stat[/bold]  adapter {config.name} on {config.device}  (every draw from the adapter's own RNG)"
    )
    console.print(
        f"{options.samples} rounds per case ({mode}), family-wise alpha {options.alpha:g} (Holm over "
        f"{run.tested} tested cases), power {options.power:g}, seed {options.seed}"
    )
    table = Table(show_lines=False)
    for column in ("case", "class", "rounds", "X2", "df", "p", "Holm p", "detects TV >="):
        table.add_column(column, justify="left" if column in ("case", "class") else "right")
    for r in run.results:
        table.add_row(
            r.id,
            f"[{STYLE.get(r.verdict, '')}]{r.verdict}[/]",
            str(r.samples),
            number(r.statistic, ".1f"),
            str(r.df) if r.statistic is not None else "-",
            number(r.p_value),
            number(r.adjusted_p),
            number(r.detectable_tv),
        )
    console.print(table)
    for r in run.results:
        if r.verdict not in ("pass", "unsupported"):
            console.print(
                f"[{STYLE[r.verdict]}]{r.verdict.upper()}[/] {r.id}: {r.message}"
                + (f" (plot: {r.plot})" if r.plot else "")
            )
    counts = ", ".join(f"{n} {k}" for k, n in sorted(run.counts().items()))
    if run.interrupted:
        console.print(f"problem: run interrupted by {run.interrupted}")
    console.print(f"[bold]{'OK' if run.ok else 'FAILED'}[/bold]: {counts}")


def histogram_json(h: Histogram, samples: int) -> dict:
    return {
        "bins": [
            {
                "outcomes": [outcome_label(o) for o in b.outcomes],
                "probability": float(b.probability),
                "expected": float(b.probability * samples),
                "observed": count,
            }
            for b, count in zip(h.bins, h.counts)
        ],
        "impossible": [{"outcome": outcome_label(o), "observed": c} for o, c in h.impossible.items()],
    }


def case_json(r: CaseResult) -> dict:
    return {
        "id": r.id,
        "family": r.family,
        "class": r.verdict,
        "message": r.message,
        "samples": r.samples,
        "statistic": r.statistic,
        "df": r.df,
        "pValue": r.p_value,
        "adjustedP": r.adjusted_p,
        "detectableTv": r.detectable_tv,
        "stopped": r.stopped,
        "plot": r.plot,
        "histograms": [histogram_json(h, r.samples) for h in r.histograms],
        **({"answer": r.answer} if r.answer is not None else {}),
    }


def run_json(run: StatRun) -> dict:
    options = run.options
    return {
        "format": FORMAT,
        "adapter": run.config.name,
        "device": run.config.device,
        "adapterConfig": {
            "capabilities": run.config.capabilities.to_json(),
            "precision": run.config.precision.to_json(),
        },
        "options": {
            "samples": options.samples,
            "alpha": options.alpha,
            "power": options.power,
            "seed": str(options.seed),
            "sequential": options.sequential,
            "looks": options.looks if options.sequential else 1,
            "chunk": options.chunk,
        },
        "testedCases": run.tested,
        "interrupted": run.interrupted or None,
        "ok": run.ok,
        "counts": run.counts(),
        "cases": [case_json(r) for r in run.results],
    }


def write_json(run: StatRun, path: Path) -> None:
    atomic_file.write_text(path, json.dumps(run_json(run), indent=2) + "\n")


# --- plots ---------------------------------------------------------------------------------


def band_z(bins: int) -> float:
    """The normal quantile of a ``BAND_COVERAGE`` band simultaneous over ``bins`` bins."""
    return NormalDist().inv_cdf(1 - (1 - BAND_COVERAGE) / (2 * max(1, bins)))


def plot_rows(r: CaseResult) -> list[dict]:
    """One row per bin of every histogram: what the plot shows, as numbers."""
    z = band_z(sum(len(h.bins) for h in r.histograms))
    rows = []
    for index, h in enumerate(r.histograms):
        for b, count in zip(h.bins, h.counts):
            e = float(b.probability)
            half = z * math.sqrt(e * (1 - e) / r.samples)
            rows.append(
                {
                    "histogram": index,
                    "bin": bin_label(b.outcomes),
                    "outcomes": len(b.outcomes),
                    "expected_probability": e,
                    "observed_frequency": count / r.samples,
                    "band_low": max(0.0, e - half),
                    "band_high": min(1.0, e + half),
                    "observed_count": count,
                    "expected_count": e * r.samples,
                }
            )
    return rows


def safe_name(case_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "__", case_id)


def write_csv(rows: list[dict], path: Path) -> None:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_file.write_text(path, buffer.getvalue())


def write_png(r: CaseResult, rows: list[dict], path: Path) -> None:
    """Per histogram, ``observed / expected`` of each bin with the band around 1, so a small
    deviation of a likely bin shows as clearly as one of a rare bin."""
    # matplotlib is the optional `stat` extra, absent where the checker runs (write_plots checks for it first)
    import matplotlib  # pyright: ignore[reportMissingImports]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pyright: ignore[reportMissingImports]

    panels = len(r.histograms)
    figure, axes = plt.subplots(panels, 1, figsize=(12, 3.2 * panels), squeeze=False)
    for index, axis in enumerate(axes[:, 0]):
        mine = [row for row in rows if row["histogram"] == index]
        x = list(range(len(mine)))
        low = [row["band_low"] / row["expected_probability"] for row in mine]
        high = [row["band_high"] / row["expected_probability"] for row in mine]
        axis.fill_between(x, low, high, step="mid", alpha=0.3, label=f"{BAND_COVERAGE:.0%} band (simultaneous)")
        axis.axhline(1.0, color="k", linewidth=0.8, label="exact law")
        axis.plot(
            x,
            [row["observed_frequency"] / row["expected_probability"] for row in mine],
            "o",
            color="tab:red",
            markersize=4,
            label="observed",
        )
        if len(mine) <= 40:
            axis.set_xticks(x, [row["bin"] for row in mine], rotation=60, ha="right", fontsize=7)
        axis.set_ylabel("observed / expected")
        axis.set_title(f"request {index}" if panels > 1 else "", fontsize=9)
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.suptitle(
        f"{r.id}: X2 = {r.statistic:.1f} on {r.df} df, p = {r.p_value:.3g} ({r.samples} rounds)", fontsize=9
    )
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, dpi=110, format="png")
    plt.close(figure)
    atomic_file.write_bytes(path, image.getvalue())


def matplotlib_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def write_plots(run: StatRun, directory: Path) -> list[Path]:
    """Plot data (CSV) and, with matplotlib, a PNG for every failing case with a histogram;
    each result's ``plot`` names its PNG (or its CSV without matplotlib). Returns the files."""
    written: list[Path] = []
    png = matplotlib_available()
    for r in run.results:
        if r.verdict != FAIL or not r.histograms or r.statistic is None:
            continue
        rows = plot_rows(r)
        csv_path = directory / f"{safe_name(r.id)}.csv"
        write_csv(rows, csv_path)
        written.append(csv_path)
        r.plot = str(csv_path)
        if png:
            png_path = directory / f"{safe_name(r.id)}.png"
            write_png(r, rows, png_path)
            written.append(png_path)
            r.plot = str(png_path)
    return written
