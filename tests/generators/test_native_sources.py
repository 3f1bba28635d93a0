"""A C extension built from other sources than those beside it is never called (docs/architecture.md,
"Native extensions").

Each loader (the accumulated stream's, the engine's, the endpoint's dense-row check) is given its
module as built, then with a wrong digest (a stale build), without a digest (built before digests were
recorded), and as installed without its sources. A stale module is not used and gives exactly the
documented line, once a process; a current one is used, silently; an installed one is used.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from qconform import native_sources
from qconform.adapters.endpoint import validation
from qconform.generators import accumulated, accumulated_engine

ROOT = Path(__file__).resolve().parents[2]

#: module -> its loader (as the code calls it)
LOADERS = {
    "qconform.generators._accumulated_stream": accumulated.native_stream,
    "qconform.generators._verification_engine": accumulated_engine.native_engine,
    "qconform.adapters.endpoint._dense_row": validation.native_module,
}


@pytest.fixture(params=sorted(LOADERS))
def built(request, monkeypatch):
    """(module name, the module, its loader), the loader's once-a-process verdict forgotten."""
    name = request.param
    try:
        module = importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not built (no C compiler)")
    for switch in ("QCONFORM_ACCUMULATED_NATIVE", "QCONFORM_ENGINE_NATIVE", "QCONFORM_ENDPOINT_NATIVE"):
        monkeypatch.delenv(switch, raising=False)
    monkeypatch.setattr(native_sources, "checked", {})
    return name, module, LOADERS[name]


def documented_line() -> str:
    """The stale line as docs/architecture.md writes it (a ``text`` block of its "Native extensions")."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## Native extensions") :]
    lines = [line for line in section.splitlines() if line.startswith("qconform: stale C extension ")]
    assert len(lines) == 1, "docs/architecture.md shows the stale line once"
    return lines[0]


def test_the_line_and_its_reasons_are_the_documented_ones():
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert native_sources.STALE_LINE == documented_line()
    assert f"`{native_sources.OTHER_SOURCES}`" in text and f"`{native_sources.NO_DIGEST}`" in text


def test_a_current_module_is_used(built, capsys):
    name, module, loader = built
    assert loader() is module
    assert capsys.readouterr().err == ""


def test_a_stale_module_is_not_used_and_says_how_to_rebuild(built, capsys, monkeypatch):
    name, module, loader = built
    monkeypatch.setattr(module, "source_digest", "0" * 64)
    assert loader() is None
    assert loader() is None  # the line once a process
    files = ", ".join(module.source_files.split())
    why = native_sources.OTHER_SOURCES.format(files=files)
    assert capsys.readouterr().err == documented_line().format(module=name, why=why) + "\n"


def test_a_module_without_a_digest_is_stale(built, capsys, monkeypatch):
    name, module, loader = built
    monkeypatch.delattr(module, "source_digest")
    assert loader() is None
    assert capsys.readouterr().err == documented_line().format(module=name, why=native_sources.NO_DIGEST) + "\n"


def test_a_module_without_its_sources_is_used(built, capsys, monkeypatch, tmp_path):
    """An installed wheel: the module's folder holds no sources, so nothing is compared."""
    name, module, loader = built
    monkeypatch.setattr(module, "source_digest", "0" * 64)
    monkeypatch.setattr(module, "__file__", str(tmp_path / Path(module.__file__).name))
    assert loader() is module
    assert capsys.readouterr().err == ""


def test_the_switch_skips_the_module_and_the_check(built, capsys, monkeypatch):
    name, module, loader = built
    monkeypatch.setattr(module, "source_digest", "0" * 64)
    for switch in ("QCONFORM_ACCUMULATED_NATIVE", "QCONFORM_ENGINE_NATIVE", "QCONFORM_ENDPOINT_NATIVE"):
        monkeypatch.setenv(switch, "0")
    assert loader() is None
    assert capsys.readouterr().err == ""


def test_the_digest_covers_every_source_in_order(tmp_path):
    """Any byte of any file, where one file ends, or the files' order changes the digest."""

    def digest(a: bytes, b: bytes, names: tuple[str, str] = ("a.c", "b.h")) -> str:
        (tmp_path / "a.c").write_bytes(a)
        (tmp_path / "b.h").write_bytes(b)
        return native_sources.sources_digest(tmp_path, names)

    first = digest(b"int a;", b"int b;")
    assert digest(b"int a;", b"int b;") == first
    assert digest(b"int a;", b"int c;") != first
    assert digest(b"int a;", b"int b;", ("b.h", "a.c")) != first
    assert digest(b"int a;int", b" b;") != digest(b"int a;", b"int b;")
