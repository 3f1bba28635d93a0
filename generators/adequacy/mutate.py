"""The mutation sites of a spec module, their stable IDs, and the mutated module code.

A *site* is one place in a module's syntax tree where one mutation operator applies
(docs/adequacy.md, "Operators"):

* ``Lt->LtE`` and the other comparison swaps (``<``/``<=``, ``>``/``>=``, ``==``/``!=``,
  ``in``/``not in``, ``is``/``is not``), one site per operator of a chained comparison;
* ``Add->Sub`` and the other arithmetic swaps (:data:`BINARY_SWAPS`), in expressions
  and augmented assignments;
* ``int+1`` and ``int-1`` for every integer literal;
* ``min->max`` and ``max->min`` for every call of the builtin;
* ``drop-raise``: a ``raise`` of a refusal replaced by ``pass``.

Skipped, because no behaviour lives there: docstrings, annotations, decorators
(``@defines("R08")``), ``assert`` statements and ``raise AssertionError`` (internal
invariants: a failing one is a crash), f-strings (refusal details; vectors pin the
code, not the message) and ``if TYPE_CHECKING:`` blocks.

A mutant's ID names its module, the qualified name of the enclosing function, the
operator and the source text of the mutated expression (its *anchor*), plus ``#k``
when ``k`` earlier sites of that function share all three. It survives unrelated
edits (lines moving, other functions changing) and changes only when the mutated
expression itself does.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: comparison operator -> its mutant
COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}

#: arithmetic operator -> its mutant
BINARY_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitOr,
}

MINMAX = {"min": "max", "max": "min"}

#: exceptions whose ``raise`` is an internal invariant, not a refusal (never dropped)
INVARIANT_EXCEPTIONS = frozenset({"AssertionError", "NotImplementedError"})

#: the longest anchor text kept in an ID
ANCHOR_LIMIT = 80

#: the qualified name given to module-level code
MODULE_LEVEL = "<module>"


@dataclass(frozen=True)
class Site:
    """One mutant: ``operator`` applied at the ``serial``-th node of ``module``'s tree."""

    module: str  # the spec module, relative to spec/ without .py: "sampling", "wire/codec"
    qualname: str
    operator: str
    anchor: str
    occurrence: int
    line: int
    serial: int  # node index in :func:`_walk` order (valid for this source text only)
    detail: int = 0  # which comparison operator of a chain, or the +1/-1 of a literal
    in_function: bool = False  # inside a function body (else module or class level: run at import)

    @property
    def id(self) -> str:
        tail = f"#{self.occurrence}" if self.occurrence else ""
        return f"{self.module}:{self.qualname}:{self.operator}:{self.anchor}{tail}"

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "module": self.module,
            "function": self.qualname,
            "operator": self.operator,
            "line": self.line,
        }


def _anchor(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= ANCHOR_LIMIT else text[: ANCHOR_LIMIT - 3] + "..."


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _raised_name(node: ast.Raise) -> str | None:
    exc = node.exc
    if isinstance(exc, ast.Call):
        exc = exc.func
    if isinstance(exc, ast.Name):
        return exc.id
    if isinstance(exc, ast.Attribute):
        return exc.attr
    return None


def _children(node: ast.AST) -> Iterator[ast.AST]:
    """The children that can hold behaviour (annotations, decorators and docstrings left out)."""
    for name, value in ast.iter_fields(node):
        if name in ("annotation", "returns", "decorator_list", "type_comment"):
            continue
        if isinstance(node, ast.arg):
            continue
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, ast.AST):
                yield item


def _walk(tree: ast.Module) -> Iterator[tuple[int, ast.AST, ast.AST | None, str, bool]]:
    """Every node that may be mutated, in a fixed depth-first order:
    (serial, node, parent, qualname, whether it lies in a function's body)."""
    serial = 0

    def visit(node: ast.AST, parent: ast.AST | None, scope: tuple[str, ...], body: bool) -> Iterator:
        nonlocal serial
        serial += 1
        yield serial, node, parent, ".".join(scope) or MODULE_LEVEL, body
        if isinstance(node, (ast.Assert, ast.JoinedStr)) or _is_type_checking(node):
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = scope + (node.name,)
        for child in _children(node):
            if isinstance(child, ast.stmt) and _is_docstring(child):
                continue
            inside = body or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and child in node.body)
            yield from visit(child, node, scope, inside)

    yield from visit(tree, None, (), False)


def _default_of(node: ast.expr, arguments: ast.arguments) -> ast.AST:
    """``name=default`` (without annotations) for a parameter's default value."""
    positional = arguments.posonlyargs + arguments.args
    pairs = list(zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults))
    pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None]
    name = next(a.arg for a, d in pairs if d is node)
    return ast.keyword(arg=name, value=node)


def _sites_of_node(node: ast.AST, parent: ast.AST | None) -> Iterator[tuple[str, ast.AST, int]]:
    """(operator, anchor node, detail) for each mutant of one node."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            swap = COMPARE_SWAPS.get(type(op))
            if swap is not None:
                yield f"{type(op).__name__}->{swap.__name__}", node, index
    elif isinstance(node, (ast.BinOp, ast.AugAssign)):
        swap = BINARY_SWAPS.get(type(node.op))
        if swap is not None:
            yield f"{type(node.op).__name__}->{swap.__name__}", node, 0
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        anchor = _default_of(node, parent) if isinstance(parent, ast.arguments) else parent or node
        yield "int+1", anchor, 1
        yield "int-1", anchor, -1
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in MINMAX:
        yield f"{node.func.id}->{MINMAX[node.func.id]}", node, 0
    elif isinstance(node, ast.Raise) and node.exc is not None and _raised_name(node) not in INVARIANT_EXCEPTIONS:
        yield "drop-raise", node, 0


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def sites(module: str, path: Path) -> list[Site]:
    """Every mutant of the spec module ``module`` (its source at ``path``), in source order."""
    seen: dict[tuple[str, str, str], int] = {}
    out: list[Site] = []
    for serial, node, parent, qualname, in_function in _walk(parse(path)):
        for operator, anchor_node, detail in _sites_of_node(node, parent):
            anchor = _anchor(anchor_node)
            key = (qualname, operator, anchor)
            occurrence = seen.get(key, 0)
            seen[key] = occurrence + 1
            out.append(
                Site(
                    module,
                    qualname,
                    operator,
                    anchor,
                    occurrence,
                    getattr(node, "lineno", 0),
                    serial,
                    detail,
                    in_function,
                )
            )
    return out


class _DropRaise(ast.NodeTransformer):
    def __init__(self, target: ast.AST) -> None:
        self.target = target

    def visit_Raise(self, node: ast.Raise) -> ast.AST:
        return ast.Pass() if node is self.target else node


def mutated_tree(path: Path, site: Site) -> ast.Module:
    """The syntax tree of the module at ``path`` with ``site``'s mutation applied."""
    tree = parse(path)
    node = next(n for serial, n, _parent, _scope, _body in _walk(tree) if serial == site.serial)
    if site.operator == "drop-raise":
        tree = _DropRaise(node).visit(tree)
    elif isinstance(node, ast.Compare):
        node.ops[site.detail] = COMPARE_SWAPS[type(node.ops[site.detail])]()
    elif isinstance(node, (ast.BinOp, ast.AugAssign)):
        node.op = BINARY_SWAPS[type(node.op)]()
    elif isinstance(node, ast.Constant):
        assert type(node.value) is int  # sites() mutates only int constants
        node.value = node.value + site.detail
    elif isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        node.func.id = MINMAX[node.func.id]
    else:  # pragma: no cover - sites() yields only the kinds above
        raise AssertionError(f"no mutation for {site.id}")
    return ast.fix_missing_locations(tree)
