"""Self-contained HTML pages of a conformance run (``qconform run --html``) and of a
statistical-mode run (``qconform stat --html``).

A page is one file with no external resource (no script, font, stylesheet or image
fetched from anywhere): the CSS is inline, the bars are CSS boxes, the plots are
inline SVG. It is rendered from the same data as the JSON reports
(:func:`qconform.harness.run.json_report.build`, :func:`qconform.harness.stat.report.run_json`),
so the page never says something the JSON report does not. Fields that a report
entry may carry (``flags``, ``rules``, ``comment``, ``reproducer``) are shown when
present. Everything taken from a report is HTML-escaped.

Layout of a run page (docs/harness.md, "Reports"): the verdict line; the header
(adapter, device, corpus root, vectors, expectations, qconform version); the
verdicts per family as stacked bars with their counts; the unexpected results
(``fail``, ``error``, ``xpass``) with their decoded diffs and reproducers, then the
``precision`` results; the problems and what was not run; the adapter's declared
config.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import Any

from qconform.generators import atomic_file

#: classes in display order, with their bar colours
CLASS_COLOURS: dict[str, str] = {
    "pass": "#2e9d4f",
    "fail": "#d0312d",
    "precision": "#e0a800",
    "unsupported": "#b8b8b8",
    "error": "#8b1a8b",
    "xfail": "#2a9fd6",
    "xpass": "#ff6f00",
    "disabled": "#dddddd",
}
#: classes listed one by one as failures (a run fails on them), then those listed as near misses
LISTED_UNEXPECTED = ("fail", "error", "xpass")
LISTED_PRECISION = ("precision",)
#: at most this many cases are listed in each section (the JSON report has them all)
LIST_LIMIT = 500
#: a decoded value longer than this is cut in the page (the JSON report keeps it whole)
VALUE_LIMIT = 4000
#: a plot names its bins under the axis when it has at most this many
LABELLED_BINS = 40
#: a decoded value up to this long (one line) is shown inline, a longer one in a block
SHORT_VALUE = 100

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{font-size:18px;font-weight:600;padding:10px 14px;border-radius:6px;margin:12px 0}
.ok{background:#e3f5e8;color:#17692f} .failed{background:#fde6e5;color:#9b1c18}
table.meta td{padding:2px 12px 2px 0;vertical-align:top} table.meta td:first-child{color:#666;white-space:nowrap}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#f1f1f3;padding:8px;border-radius:4px;white-space:pre-wrap;word-break:break-all;margin:4px 0}
.bars{display:grid;grid-template-columns:max-content 1fr max-content;gap:4px 12px;align-items:center}
.bar{display:flex;height:18px;border-radius:3px;overflow:hidden;background:#eee;min-width:40px}
.bar span{display:block;height:100%}
.counts{font-size:12px;color:#444;white-space:nowrap}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
.case{background:#fff;border:1px solid #e2e2e2;border-left:4px solid #d0312d;border-radius:4px;padding:8px 12px;margin:8px 0}
.case.precision{border-left-color:#e0a800} .case.error{border-left-color:#8b1a8b} .case.xpass{border-left-color:#ff6f00}
.case h3{font-size:14px;margin:0 0 4px;font-weight:600} .cls{text-transform:uppercase;font-size:11px;padding:1px 6px;
border-radius:3px;color:#fff;margin-right:6px}
.diff{display:grid;grid-template-columns:max-content 1fr;gap:1px 10px;margin:2px 0}
.diff>div:nth-child(odd){color:#666} .diff .value{font-weight:600}
.tag{display:inline-block;background:#eef;border-radius:3px;padding:0 5px;margin:0 4px 0 0;font-size:12px}
.note{color:#666;font-size:12.5px}
table.stat{border-collapse:collapse} table.stat td,table.stat th{padding:2px 10px;border-bottom:1px solid #eee;text-align:right}
table.stat td:first-child,table.stat th:first-child,table.stat td:nth-child(2){text-align:left}
svg text{font:11px system-ui,sans-serif}
"""


def _text(value: Any) -> str:
    return escape(str(value), quote=True)


def _value(value: Any) -> str:
    """A decoded value for a ``<pre>``: escaped, cut at :data:`VALUE_LIMIT` characters."""
    text = value if isinstance(value, str) else json.dumps(value, indent=1)
    if len(text) > VALUE_LIMIT:
        text = f"{text[:VALUE_LIMIT]}... ({len(text)} characters; the whole value is in the JSON report)"
    return _text(text)


def _shown_value(value: Any) -> str:
    """A short one-line value inline, a long or multi-line one in a wrapped block."""
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) <= SHORT_VALUE and "\n" not in text:
        return f'<div class="mono value">{_text(text)}</div>'
    return f'<pre class="value">{_value(value)}</pre>'


def page(title: str, body: Iterable[str]) -> str:
    """A complete HTML document: inline CSS, no external resource."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_text(title)}</title><style>{STYLE}</style></head>\n<body><main>\n"
        + "\n".join(body)
        + "\n</main></body></html>\n"
    )


def meta_table(rows: Iterable[tuple[str, Any]]) -> str:
    cells = "".join(
        f'<tr><td>{_text(k)}</td><td class="mono">{_text(v) if v != "" else "<i>none</i>"}</td></tr>' for k, v in rows
    )
    return f'<table class="meta">{cells}</table>'


def verdict_banner(ok: bool, line: str) -> str:
    return (
        f'<div class="verdict {"ok" if ok else "failed"}" id="verdict">{"OK" if ok else "FAILED"}: {_text(line)}</div>'
    )


def legend(classes: Iterable[str]) -> str:
    return (
        '<div class="legend">'
        + "".join(f'<span><i style="background:{CLASS_COLOURS.get(c, "#999")}"></i>{_text(c)}</span>' for c in classes)
        + "</div>"
    )


def family_bars(families: dict[str, dict[str, int]]) -> str:
    """One stacked bar per family, its segments proportional to the cases in each class."""
    order = list(CLASS_COLOURS)
    present = [c for c in order if any(counts.get(c) for counts in families.values())]
    rows = []
    for family, counts in families.items():
        total = sum(counts.values()) or 1
        segments = "".join(
            f'<span class="{c}" style="width:{100 * counts[c] / total:.3f}%;background:{CLASS_COLOURS[c]}" '
            f'title="{_text(family)}: {counts[c]} {c}"></span>'
            for c in order
            if counts.get(c)
        )
        text = ", ".join(f"{counts[c]} {c}" for c in order if counts.get(c))
        rows.append(
            f'<div class="mono">{_text(family)}</div><div class="bar" data-family="{_text(family)}">'
            f'{segments}</div><div class="counts">{_text(text)}</div>'
        )
    if not rows:
        return '<p class="note">no case was judged</p>'
    return legend(present) + f'<div class="bars" id="families">{"".join(rows)}</div>'


def case_block(case: dict) -> str:
    """One listed case: class, id, message, diff, flags, rules, comment, reproducer."""
    cls = case.get("class", "")
    parts = [
        f'<div class="case {_text(cls)}" data-case="{_text(case.get("id", ""))}">',
        (
            f'<h3><span class="cls" style="background:{CLASS_COLOURS.get(cls, "#999")}">{_text(cls)}</span>'
            f'<span class="mono">{_text(case.get("id", ""))}</span></h3>'
        ),
    ]
    if case.get("message"):
        parts.append(f"<div>{_text(case['message'])}</div>")
    diff = case.get("diff")
    if diff:
        parts.append(
            '<div class="diff">'
            f'<div>first difference</div><div class="mono">{_text(diff.get("path", ""))}</div>'
            f"<div>expected</div>{_shown_value(diff.get('expected', ''))}"
            f"<div>got</div>{_shown_value(diff.get('got', ''))}</div>"
        )
    tags = [*(("flag", f) for f in case.get("flags") or ()), *(("rule", r) for r in case.get("rules") or ())]
    if tags:
        parts.append(
            "<div>" + "".join(f'<span class="tag {kind}">{_text(name)}</span>' for kind, name in tags) + "</div>"
        )
    if case.get("comment"):
        parts.append(f'<div class="note">{_text(case["comment"])}</div>')
    if case.get("reproducer"):
        parts.append(f'<div class="note">reproduce:</div><pre class="reproducer">{_text(case["reproducer"])}</pre>')
    parts.append("</div>")
    return "".join(parts)


def case_section(title: str, anchor: str, cases: list[dict]) -> list[str]:
    if not cases:
        return []
    out = [f'<h2 id="{anchor}">{_text(title)} ({len(cases)})</h2>']
    out += [case_block(c) for c in cases[:LIST_LIMIT]]
    if len(cases) > LIST_LIMIT:
        out.append(f'<p class="note">... and {len(cases) - LIST_LIMIT} more (see the JSON report)</p>')
    return out


def class_line(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {c}" for c, n in counts.items() if n) or "no cases judged"


def render_run(report: dict) -> str:
    """The page of a ``qconform-run-v1`` report (:func:`qconform.harness.run.json_report.build`)."""
    cases = report.get("cases", [])
    unexpected = [c for c in cases if c.get("class") in LISTED_UNEXPECTED]
    near = [c for c in cases if c.get("class") in LISTED_PRECISION]
    problems = report.get("problems", [])
    line = f"{class_line(report.get('counts', {}))}; {len(unexpected) + len(problems)} unexpected"
    body = [
        f"<h1>qconform run: {_text(report.get('adapter', ''))}</h1>",
        verdict_banner(bool(report.get("ok")), line),
        meta_table(
            [
                ("adapter", report.get("adapter", "")),
                ("device", report.get("device", "")),
                ("corpus root", report.get("corpusRoot", "")),
                ("vectors", report.get("vectors", "")),
                ("families", ", ".join(report.get("families", {}))),
                ("expectations", report.get("expectations", "")),
                ("qconform", report.get("qconformVersion", "")),
            ]
        ),
        '<h2 id="per-family">Verdicts per family</h2>',
        family_bars(report.get("families", {})),
    ]
    body += case_section("Unexpected results", "failures", unexpected)
    if problems:
        body.append('<h2 id="problems">Problems</h2><ul>' + "".join(f"<li>{_text(p)}</li>" for p in problems) + "</ul>")
    body += case_section("Precision (inside a declared margin)", "precision", near)
    not_run = report.get("notRun", {})
    if not_run:
        body.append('<h2 id="not-run">Not run</h2>' + meta_table(not_run.items()))
    body.append(
        '<h2 id="adapter-config">Adapter config</h2>'
        f"<pre>{_text(json.dumps(report.get('adapterConfig', {}), indent=2))}</pre>"
    )
    return page(f"qconform run: {report.get('adapter', '')}", body)


# --- statistical mode ------------------------------------------------------------------------


def ratio_svg(rows: list[dict], title: str) -> str:
    """An inline SVG of one histogram's plot rows (:func:`qconform.harness.stat.report.plot_rows`):
    per bin, observed / expected frequency as a dot, the simultaneous band as a bar, 1 as a line."""
    labelled = len(rows) <= LABELLED_BINS
    width, height, left, top, bottom = 900, 290 if labelled else 220, 48, 22, 100 if labelled else 30
    plot_w, plot_h = width - left - 10, height - top - bottom
    ratios = [
        (
            r["band_low"] / r["expected_probability"],
            r["band_high"] / r["expected_probability"],
            r["observed_frequency"] / r["expected_probability"],
        )
        for r in rows
    ]
    high = max([1.5, *(max(b, o) for _, b, o in ratios)]) * 1.05
    step = plot_w / max(1, len(rows))

    def y(value: float) -> float:
        return top + plot_h * (1 - value / high)

    items = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img"><title>{_text(title)}</title>'
        ),
        f'<text x="{left}" y="14">{_text(title)}</text>',
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="#999"/>',
        f'<line x1="{left}" x2="{width - 10}" y1="{y(1):.1f}" y2="{y(1):.1f}" stroke="#222"/>',
        f'<text x="4" y="{y(1) + 4:.1f}">1.0</text>',
        f'<text x="4" y="{y(0) + 4:.1f}">0</text>',
        f'<text x="4" y="{top + 8}">{high:.2g}</text>',
    ]
    for index, ((low, band_high, observed), row) in enumerate(zip(ratios, rows)):
        x = left + step * (index + 0.5)
        label = _text(f"{row['bin']}: observed {row['observed_count']}, expected {row['expected_count']:.1f}")
        items.append(
            f'<rect x="{x - max(1.0, step * 0.3):.1f}" y="{y(band_high):.1f}" '
            f'width="{max(2.0, step * 0.6):.1f}" height="{max(0.5, y(low) - y(band_high)):.1f}" '
            f'fill="#9ecae1"><title>{label}</title></rect>'
        )
        items.append(
            f'<circle cx="{x:.1f}" cy="{y(observed):.1f}" r="3" fill="#d0312d"><title>{label}</title></circle>'
        )
        if labelled:
            items.append(
                f'<text transform="translate({x + 3:.1f},{top + plot_h + 8}) rotate(45)" '
                f'font-size="9">{_text(row["bin"])}</text>'
            )
    items.append(
        f'<text x="{left}" y="{height - 8}">bins ({len(rows)}); dot: observed / expected; '
        f"bar: 99% band under the exact law (simultaneous)</text></svg>"
    )
    return "".join(items)


def render_stat(report: dict, plots: dict[str, list[str]]) -> str:
    """The page of a ``qconform-stat-v1`` report (:func:`qconform.harness.stat.report.run_json`),
    with ``plots``: case id -> inline SVG plots (one per histogram) of its failing cases."""
    counts = report.get("counts", {})
    options = report.get("options", {})
    body = [
        f"<h1>qconform stat: {_text(report.get('adapter', ''))}</h1>",
        verdict_banner(bool(report.get("ok")), class_line(counts)),
        meta_table(
            [
                ("adapter", report.get("adapter", "")),
                ("device", report.get("device", "")),
                ("rounds per case", options.get("samples", "")),
                ("family-wise alpha", options.get("alpha", "")),
                ("power", options.get("power", "")),
                ("seed", options.get("seed", "")),
                ("tested cases", report.get("testedCases", "")),
            ]
        ),
        (
            '<h2 id="cases">Cases</h2><table class="stat"><tr><th>case</th><th>class</th><th>rounds</th>'
            "<th>X2</th><th>df</th><th>p</th><th>Holm p</th></tr>"
        ),
    ]
    for case in report.get("cases", []):
        cls = case.get("class", "")
        body.append(
            f'<tr><td class="mono">{_text(case["id"])}</td><td style="color:{CLASS_COLOURS.get(cls, "#333")}">'
            f"{_text(cls)}</td><td>{case.get('samples', '')}</td><td>{_number(case.get('statistic'), '.1f')}"
            f"</td><td>{case.get('df', '')}</td><td>{_number(case.get('pValue'))}</td>"
            f"<td>{_number(case.get('adjustedP'))}</td></tr>"
        )
    body.append("</table>")
    failing = [c for c in report.get("cases", []) if c.get("class") in ("fail", "error")]
    if failing:
        body.append(f'<h2 id="failures">Failures ({len(failing)})</h2>')
        for case in failing[:LIST_LIMIT]:
            block = case_block(case)
            body.append(block[: -len("</div>")] + "".join(plots.get(case["id"], [])) + "</div>")
    body.append(
        '<h2 id="adapter-config">Adapter config</h2>'
        f"<pre>{_text(json.dumps(report.get('adapterConfig', {}), indent=2))}</pre>"
    )
    return page(f"qconform stat: {report.get('adapter', '')}", body)


def _number(value: float | None, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


# --- writing ---------------------------------------------------------------------------------


def write_run(path: str | Path, report: dict) -> None:
    """Write the page of a run report (the dict of :func:`qconform.harness.run.json_report.build`)."""
    atomic_file.write_text(path, render_run(report))


def write_stat(path: str | Path, run: Any) -> None:
    """Write the page of a statistical-mode run (a :class:`qconform.harness.stat.StatRun`)."""
    from qconform.harness.stat.report import plot_rows, run_json
    from qconform.harness.stat.runner import FAIL

    plots: dict[str, list[str]] = {}
    for result in run.results:
        if result.verdict != FAIL or not result.histograms or result.statistic is None:
            continue
        rows = plot_rows(result)
        panels = len(result.histograms)
        plots[result.id] = [
            ratio_svg(
                [r for r in rows if r["histogram"] == index],
                f"{result.id}"
                + (f", request {index}" if panels > 1 else "")
                + f": X2 = {result.statistic:.1f} on {result.df} df, p = {result.p_value:.3g}",
            )
            for index in range(panels)
        ]
    atomic_file.write_text(path, render_stat(run_json(run), plots))
