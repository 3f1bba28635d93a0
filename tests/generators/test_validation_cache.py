"""generators/cache.py: a vector file that passed its schema and its lint is not checked again
while its bytes, its schema and the checks are the same (docs/vector-format.md, "Validated once").

Each test points ``$QCONFORM_CACHE`` at a folder of its own and counts the checks
(``check_vector_object``) of one corpus file loaded again and again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import qconform.generators.cache as cache
import qconform.generators.validation as validation
from qconform.generators.corpus import default_vectors_dir
from qconform.generators.validation import SCHEMA_DIR, VectorFileError, load_vector_file

pytestmark = pytest.mark.rules()

FAMILY = "rng_abi"


@pytest.fixture
def corpus(tmp_path, monkeypatch) -> Path:
    """A copy of one family's file and schema, a cache of this test's own, and the checks counted
    in ``checks``."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    source = default_vectors_dir()
    folder = tmp_path / "vectors"
    (folder / SCHEMA_DIR).mkdir(parents=True)
    shutil.copy(source / f"{FAMILY}.json", folder)
    shutil.copy(source / SCHEMA_DIR / f"{FAMILY}.schema.json", folder / SCHEMA_DIR)
    return folder


@pytest.fixture
def checks(monkeypatch) -> list[Path]:
    checked: list[Path] = []
    check = validation.check_vector_object

    def counted(path, obj, schema):
        checked.append(path)
        return check(path, obj, schema)

    monkeypatch.setattr(validation, "check_vector_object", counted)
    return checked


def test_the_same_bytes_are_checked_once(corpus, checks):
    first = load_vector_file(corpus / f"{FAMILY}.json")
    again = load_vector_file(corpus / f"{FAMILY}.json")
    assert first == again
    assert len(checks) == 1


def test_changed_bytes_are_checked_again(corpus, checks):
    path = corpus / f"{FAMILY}.json"
    load_vector_file(path)
    path.write_bytes(path.read_bytes() + b"\n")  # the same object, other bytes
    load_vector_file(path)
    assert len(checks) == 2


def test_a_changed_schema_is_checked_against_again(corpus, checks):
    schema_file = corpus / SCHEMA_DIR / f"{FAMILY}.schema.json"
    load_vector_file(corpus / f"{FAMILY}.json")
    schema = json.loads(schema_file.read_text())
    schema["description"] = "another schema"
    schema_file.write_text(json.dumps(schema))
    load_vector_file(corpus / f"{FAMILY}.json")
    assert len(checks) == 2


def test_other_checks_check_again(corpus, checks, monkeypatch):
    load_vector_file(corpus / f"{FAMILY}.json")
    monkeypatch.setattr(cache, "validator_fingerprint", lambda: b"other checks")
    load_vector_file(corpus / f"{FAMILY}.json")
    assert len(checks) == 2


def test_a_failure_is_never_recorded(corpus, checks):
    path = corpus / f"{FAMILY}.json"
    obj = json.loads(path.read_text())
    obj["testGroups"][0]["tests"][0]["tcId"] = "not an integer"
    path.write_text(json.dumps(obj))
    for _ in range(2):
        with pytest.raises(VectorFileError, match="tcId"):
            load_vector_file(path)
    assert len(checks) == 2
    assert not (cache.cache_dir() / cache.VALIDATED_DIR).exists()


@pytest.mark.parametrize("where", ["a-file", "dev-null"])
def test_a_cache_that_cannot_be_written_costs_only_the_time(corpus, checks, monkeypatch, tmp_path, where):
    blocked = Path(os.devnull)  # not a folder: nothing is recorded or found there
    if where == "a-file":
        blocked = tmp_path / "not-a-folder"
        blocked.write_text("")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocked))
    for _ in range(2):
        assert load_vector_file(corpus / f"{FAMILY}.json")["family"] == FAMILY
    assert len(checks) == 2


def test_the_fingerprint_covers_every_module_the_checks_import(tmp_path):
    """Every ``qconform`` module that loading and checking a vector file imports lives in
    ``qconform.generators`` or ``qconform.spec``, whose sources the fingerprint hashes: a change to
    any code the verdict runs changes the key."""
    code = (
        "import sys, qconform.generators.validation, qconform.generators.lint\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('qconform'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    modules = done.stdout.split()
    assert "qconform.generators.lint" in modules
    outside = [m for m in modules if m != "qconform" and not m.startswith(("qconform.generators", "qconform.spec"))]
    assert outside == []


def test_the_fingerprint_changes_with_any_source_of_the_checks(monkeypatch):
    before = cache.validator_fingerprint()
    lint_source = Path(validation.__file__).resolve().with_name("lint.py")
    real_read = Path.read_bytes

    def edited(path: Path) -> bytes:
        data = real_read(path)
        return data + b"\n# edited" if path == lint_source else data

    cache.validator_fingerprint.cache_clear()
    monkeypatch.setattr(Path, "read_bytes", edited)
    try:
        assert cache.validator_fingerprint() != before
    finally:
        monkeypatch.undo()
        cache.validator_fingerprint.cache_clear()
    assert cache.validator_fingerprint() == before


def test_the_fingerprint_changes_with_the_version_of_anything_jsonschema_validates_with(monkeypatch):
    """An upgrade of ``referencing`` (which resolves the schemas) may change a verdict, as an upgrade
    of jsonschema itself may: either checks every file again."""
    before = cache.validator_fingerprint()
    real_version = cache.version
    for upgraded in ("jsonschema", "referencing"):
        monkeypatch.setattr(cache, "version", lambda name, up=upgraded: "99.0" if name == up else real_version(name))
        cache.validator_fingerprint.cache_clear()
        try:
            assert f"{upgraded} 99.0" in cache.checker_versions()
            assert cache.validator_fingerprint() != before
        finally:
            monkeypatch.undo()
            cache.validator_fingerprint.cache_clear()
    assert cache.validator_fingerprint() == before
