"""Which modules, and which vector families, depend on a spec module: the static import graph.

Every ``import`` and ``from ... import`` of the spec and generator packages is read
from the source (no module is executed), function-level imports included. A
family depends on a spec module when its family module imports it transitively;
only those families can change when that module is mutated, so only they are
re-solved.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

#: the packages whose modules form the graph: the spec, the generators, and the judges
#: (``qconform adequacy --judges`` mutates ``harness/judging``; docs/adequacy.md)
PACKAGES = ("qconform.spec", "qconform.generators", "qconform.harness.judging")
FAMILIES_PACKAGE = "qconform.generators.families"
#: modules whose imports do not reach what generation runs: the fuzzer's input strategies
#: (``Family.fuzz``) are drawn by ``qconform fuzz`` only, never by ``solve`` or ``build``, and
#: they import every family's codecs, which would make every family depend on every module
IGNORED: frozenset[str] = frozenset({"qconform.generators.fuzz_inputs"})


def package_dir(package: str) -> Path:
    """The source directory of ``package``, found without executing it."""
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise RuntimeError(f"package {package} not found")
    return Path(next(iter(found.submodule_search_locations)))


@cache
def module_files() -> dict[str, Path]:
    """Module name -> source file, for every module of :data:`PACKAGES`."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        root = package_dir(package)
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package,) + parts)] = path
    return out


def _imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports (a package import counts its ``__init__``)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            # importing a.b.c also executes the packages a and a.b
            pieces = target.split(".")
            for end in range(1, len(pieces) + 1):
                prefix = ".".join(pieces[:end])
                if prefix in known and prefix != name:
                    out.add(prefix)
    return out


@cache
def import_graph() -> dict[str, frozenset[str]]:
    """Module -> the modules it imports directly (within :data:`PACKAGES`)."""
    known = module_files()
    return {name: frozenset(_imported(name, path, known) - IGNORED) for name, path in known.items()}


def dependents(module: str) -> frozenset[str]:
    """``module`` and every module that imports it, directly or transitively."""
    graph = import_graph()
    reverse: dict[str, set[str]] = {name: set() for name in graph}
    for name, imports in graph.items():
        for target in imports:
            reverse.setdefault(target, set()).add(name)
    seen = {module}
    stack = [module]
    while stack:
        for user in reverse.get(stack.pop(), ()):
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return frozenset(seen)


def dependent_families(module: str, family_names: tuple[str, ...]) -> tuple[str, ...]:
    """The families (in corpus order) whose family module depends on ``module``."""
    users = dependents(module)
    return tuple(name for name in family_names if f"{FAMILIES_PACKAGE}.{name}" in users)
