"""``qconform show CASE_ID``: one case of the corpus, for a person or a tool.

Prints the case's family, group, result, comment, flags with the notes the vector
file gives them, rules, ``input`` and ``expected`` (pretty JSON on a terminal).
``--json`` prints one JSON object with the same fields instead. An unknown id is
a usage error (exit 2) that names the closest ids.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import click

from qconform.cli.arguments import check_corpus, usable_corpus
from qconform.cli.errors import UsageLineError


def find_case(root: Path, case_id: str) -> dict:
    """The case ``case_id`` of the corpus under ``root`` as a JSON-ready object."""
    from qconform.generators.validation import iter_cases

    index = check_corpus(root, ())
    if case_id not in index["cases"]:
        close = difflib.get_close_matches(case_id, list(index["cases"]), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UsageLineError(f"unknown case {case_id} (not in the corpus at {root}){hint}")
    family = case_id.split("/", 1)[0]
    with usable_corpus():
        case = next(c for c in iter_cases(root, [family]) if c.id == case_id)
    return {
        "id": case.id,
        "family": case.family,
        "group": case.group,
        "result": case.result,
        "comment": case.comment,
        "flags": {flag: case.notes.get(flag, "") for flag in case.flags},
        "rules": list(case.rules),
        "input": case.input,
        "expected": case.expected,
    }


def note_text(note: object) -> str:
    """A flag's note in one line: ``[bugType] description Effect: effect``."""
    if not isinstance(note, dict):
        return str(note)
    parts = [
        f"[{note['bugType']}]" if note.get("bugType") else "",
        str(note.get("description", "")),
        f"Effect: {note['effect']}" if note.get("effect") else "",
    ]
    return " ".join(p for p in parts if p)


@click.command("show")
@click.argument("case_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (for tools).")
@click.option(
    "--vectors",
    type=click.Path(file_okay=False, path_type=Path),
    help="Vectors directory (default: $QCONFORM_VECTORS or the installed corpus).",
)
def show_command(case_id: str, as_json: bool, vectors: Path | None) -> None:
    """One case of the corpus: input, expected, flags with their notes, comment, rules."""
    from rich.syntax import Syntax

    from qconform.cli.console import wide_console
    from qconform.generators.corpus import default_vectors_dir

    case = find_case((vectors or default_vectors_dir()).resolve(), case_id)
    if as_json:
        click.echo(json.dumps(case, indent=1))
        return
    console = wide_console()
    console.print(f"[bold]{case['id']}[/] ({case['result']})", highlight=False)
    console.print(f"comment: {case['comment']}", highlight=False, markup=False)
    console.print(f"rules: {', '.join(case['rules']) or 'none'}", highlight=False, markup=False)
    console.print("flags:" if case["flags"] else "flags: none", highlight=False)
    for flag, note in case["flags"].items():
        console.print(f"  {flag}: {note_text(note)}", highlight=False, markup=False, soft_wrap=True)
    for part in ("input", "expected"):
        console.print(f"{part}:", highlight=False)
        console.print(Syntax(json.dumps(case[part], indent=1), "json", word_wrap=True))
