"""The build of qconform's C extensions: setuptools' ``build_ext``, each extension given the digest of
its sources and headers (pyproject.toml, ``[tool.setuptools.cmdclass]``).

The loader compares that digest with the sources beside the built module and never calls a stale one
(:mod:`qconform.native_sources`; docs/architecture.md, "Native extensions"). Setuptools loads this file
by its path, with no package around it, so the digest's module is loaded by its path too.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

from setuptools import Extension
from setuptools.command.build_ext import build_ext as setuptools_build_ext


def native_sources() -> ModuleType:
    """qconform/native_sources.py, loaded by its path (the build runs with no ``qconform`` importable)."""
    spec = importlib.util.spec_from_file_location(
        "qconform_native_sources", Path(__file__).with_name("native_sources.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class build_ext(setuptools_build_ext):  # noqa: N801 - the command's name, as setuptools spells it
    """``build_ext`` with :data:`~qconform.native_sources.DIGEST_MACRO` and
    :data:`~qconform.native_sources.FILES_MACRO` defined for each extension: the digest of its
    ``sources`` and ``depends``, named relative to the folder the module is built into."""

    def build_extension(self, ext: Extension) -> None:
        sources = native_sources()
        package = ".".join(ext.name.split(".")[:-1])
        directory = self.get_finalized_command("build_py").get_package_dir(package)  # pyright: ignore[reportAttributeAccessIssue]
        names = [os.path.relpath(path, directory) for path in [*ext.sources, *ext.depends]]
        digest = sources.sources_digest(Path(directory), names)
        ours = (sources.DIGEST_MACRO, sources.FILES_MACRO)
        ext.define_macros = [macro for macro in ext.define_macros if macro[0] not in ours] + [
            (sources.DIGEST_MACRO, f'"{digest}"'),
            (sources.FILES_MACRO, f'"{" ".join(names)}"'),
        ]
        super().build_extension(ext)
