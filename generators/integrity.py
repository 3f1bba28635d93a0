"""Corpus integrity: every hash of ``index.json`` checked against the files it pins.

:func:`verify` is what ``qconform run`` does before it runs anything
(docs/vector-format.md, "Index"; docs/harness.md, "Corpus integrity"):

1. the index's ``root`` is the root hash of its own ``cases`` table;
2. with ``--corpus-root HEX``, that root equals the pinned one (a release gate
   pins the corpus it was qualified against);
3. per family, the vector file's bytes and its schema's bytes match ``sha256``
   and ``schemaSha256``;
4. per case, the sha256 of its canonical JSON matches the index, and the file
   holds exactly the indexed cases (and ``count`` of them).

The first violation raises :class:`IntegrityError`, one line naming the file.
When stale temporaries of a killed ``qconform generate`` lie in the corpus, the
message says so: a half-updated corpus is the usual cause.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from qconform.generators.atomic_file import stale_temporaries
from qconform.generators.corpus import case_hash, cases_of, root_hash, sha256_hex
from qconform.generators.validation import INDEX_FILE, SCHEMA_DIR, load_index


class IntegrityError(Exception):
    """The corpus does not match its index (or the pinned root): one line naming the file."""


def _cause(root: Path) -> str:
    stale = stale_temporaries([root, root / SCHEMA_DIR])
    if not stale:
        return ""
    names = ", ".join(p.name for p in stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
    return (
        f"; stale temporaries ({names}) show that a `qconform generate` was killed while writing: "
        "run it again to finish the corpus"
    )


def _fail(root: Path, text: str) -> IntegrityError:
    return IntegrityError(f"corpus integrity: {text}{_cause(root)}")


def _read(root: Path, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise _fail(root, f"cannot read {path}: {exc.strerror or exc}") from None


def _short(digest: str) -> str:
    return digest[:16]


def verify_family(root: Path, name: str, entry: dict, index_cases: dict[str, str]) -> None:
    """Checks 3 and 4 for one family of the index."""
    path = root / entry["file"]
    data = _read(root, path)
    if sha256_hex(data) != entry["sha256"]:
        raise _fail(
            root,
            f"{path} does not match the sha256 recorded in {root / INDEX_FILE} "
            f"({_short(entry['sha256'])}... recorded, {_short(sha256_hex(data))}... found)",
        )
    schema = root / entry["schema"]
    schema_sha = sha256_hex(_read(root, schema))
    if schema_sha != entry["schemaSha256"]:
        raise _fail(
            root,
            f"{schema} does not match the schemaSha256 recorded in {root / INDEX_FILE} "
            f"({_short(entry['schemaSha256'])}... recorded, {_short(schema_sha)}... found)",
        )
    try:
        cases = cases_of(json.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        raise _fail(root, f"{path} is not a vector file: {exc}") from None
    indexed = {cid: h for cid, h in index_cases.items() if cid.split("/", 1)[0] == name}
    for cid, case in cases.items():
        if cid not in indexed:
            raise _fail(root, f"{path} holds case {cid}, which {root / INDEX_FILE} does not list")
        if case_hash(case) != indexed[cid]:
            raise _fail(root, f"case {cid} of {path} does not match its sha256 in {root / INDEX_FILE}")
    missing = sorted(set(indexed) - set(cases))
    if missing:
        raise _fail(root, f"{path} lacks {len(missing)} case(s) that {root / INDEX_FILE} lists, e.g. {missing[0]}")
    if entry["count"] != len(cases):
        raise _fail(root, f"{path} holds {len(cases)} cases; {root / INDEX_FILE} says {entry['count']}")


def verify(root: Path | str, pinned_root: str | None = None, families: Sequence[str] | None = None) -> dict:
    """Verify the corpus under ``root`` (module docstring) and return its index.

    ``families`` limits checks 3 and 4 to those families (default: all); checks 1
    and 2 always cover the whole index. Raises :class:`IntegrityError`, or
    :class:`~qconform.generators.validation.VectorFileError` for an unreadable index.
    """
    root = Path(root)
    index = load_index(root)
    computed = root_hash(index["cases"])
    if computed != index["root"]:
        raise _fail(
            root,
            f"{root / INDEX_FILE}: its root {_short(index['root'])}... is not the hash of its "
            f"cases ({_short(computed)}...)",
        )
    if pinned_root is not None and index["root"] != pinned_root.lower():
        raise IntegrityError(f"corpus root {index['root']} of {root} is not the pinned --corpus-root {pinned_root}")
    for name in families if families is not None else list(index["families"]):
        verify_family(root, name, index["families"][name], index["cases"])
    return index
