"""What the kit keeps between runs, in its cache directory, never in the working directory:
``$QCONFORM_CACHE``, else ``$XDG_CACHE_HOME/qconform``, else ``~/.cache/qconform``.

* ``last-failed.json``: the cases each adapter last failed, for ``qconform run --lf``
  (harness/run/triage.py).
* ``validated/<key>``: an empty file for each vector file that passed its schema and its lint
  (:mod:`qconform.generators.validation`), so that the next load of the same bytes skips the
  checks (docs/vector-format.md, "Validated once"). The key is the SHA-256 of everything the
  verdict depends on: the file's bytes, its schema, the source of every module of
  ``qconform.generators`` and ``qconform.spec`` (the lint and what it reads), and the version of
  jsonschema. A failure is never recorded; a cache that cannot be written costs only the time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import cache
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

#: environment variable naming the cache directory
CACHE_ENV = "QCONFORM_CACHE"
#: the folder of the cache that records the vector files that passed validation
VALIDATED_DIR = "validated"


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qconform"


#: a requirement's distribution name, before its version, extras or marker (``rpds-py>=0.25.0``)
REQUIREMENT_NAME = re.compile(r"^[A-Za-z0-9._-]+")


def checker_versions() -> str:
    """jsonschema's version and those of the distributions it always requires (``referencing``
    resolves the schemas, ``rpds-py`` and ``attrs`` hold them, ``jsonschema-specifications`` the
    metaschemas): an upgrade of any of them may change a verdict. Its optional requirements (an
    ``extra``: format checkers) are left out, since the kit checks no ``format``."""
    names = ["jsonschema"] + [
        found.group(0)
        for requirement in requires("jsonschema") or []
        if "extra ==" not in requirement and (found := REQUIREMENT_NAME.match(requirement))
    ]
    said = []
    for name in names:
        try:
            said.append(f"{name} {version(name)}")
        except PackageNotFoundError:  # required, but not installed under this name: say so
            said.append(f"{name} absent")
    return "\0".join(said)


@cache
def validator_fingerprint() -> bytes:
    """The SHA-256 of what decides a vector file's validity besides its bytes and its schema: the
    source of every module of ``qconform.generators`` and ``qconform.spec`` (the lint, the encodings
    and patterns it checks against, the spec's error codes), and :func:`checker_versions`."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(f"{checker_versions()}\0".encode())
    for package in (here, here.parent / "spec"):
        for source in sorted(package.rglob("*.py")):
            digest.update(f"{source.relative_to(package.parent)}\0".encode())
            digest.update(source.read_bytes())
    return digest.digest()


def validation_key(data: bytes, schema: dict) -> str:
    """The key of the verdict on the vector file of bytes ``data`` against ``schema``."""
    digest = hashlib.sha256(b"qconform validated 1\0" + validator_fingerprint())
    digest.update(hashlib.sha256(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()).digest())
    digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


def was_validated(key: str) -> bool:
    return (cache_dir() / VALIDATED_DIR / key).is_file()


def record_validated(key: str) -> None:
    """Record that the file of ``key`` passed; best effort (an unwritable cache is skipped)."""
    folder = cache_dir() / VALIDATED_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.close(os.open(folder / key, os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError:
        pass
