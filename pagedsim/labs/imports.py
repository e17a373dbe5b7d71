"""The forbidden-import check: does a student file use a module the lab forbids?

Checked statically with ``ast``, without running the student's code:

- ``import X`` / ``import X.Y as z``, ``from X import y`` (which imports ``X.y`` too);
- ``importlib.import_module("X")`` and ``__import__("X")`` with a literal name;
- names reached through an allowed module that come from a forbidden one: with
  ``pagedsim.models.budget`` forbidden, ``from pagedsim import kv_budget`` and
  ``import pagedsim; pagedsim.kv_budget(...)`` are caught too, since ``pagedsim``
  re-exports ``kv_budget`` from ``pagedsim.models.budget``. Such names are looked up by importing
  the module they are reached through, only when it is in the same top-level package as a
  forbidden module (the grader's own process has imported pagedsim already).

A forbidden module ``X`` also forbids its submodules ``X.*``.
"""

from __future__ import annotations

import ast
import importlib
import types

from .pysource import parse


def forbidden_imports(source: str, forbidden: tuple[str, ...] | list[str],
                      filename: str = "<string>") -> list[str]:
    """One ``file:line: uses X, ...`` line per use of a forbidden module in ``source``; []
    when clean or when ``source`` does not parse (pytest then reports the syntax error)."""
    forbidden = tuple(forbidden)
    if not forbidden:
        return []
    try:
        tree = parse(source, filename=filename)
    except (SyntaxError, ValueError):
        return []
    bound: dict[str, str] = {}  # local name -> the dotted name it was imported as
    found: dict[int, str] = {}  # line -> the first offence on it

    def report(node: ast.expr | ast.stmt, name: str) -> None:
        hit = _offender(name, forbidden)
        if hit is not None and node.lineno not in found:
            found[node.lineno] = (f"{filename}:{node.lineno}: uses {name}, which this lab "
                                  f"forbids ({hit})")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                report(node, alias.name)
                local = alias.asname or alias.name.partition(".")[0]
                bound[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            report(node, node.module)
            for alias in node.names:
                report(node, f"{node.module}.{alias.name}")
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args and _is_import_call(node.func):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                report(node, first.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node, bound)
            if dotted is not None:
                report(node, dotted)
    return [found[line] for line in sorted(found)]


def _is_import_call(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def _dotted(node: ast.Attribute, bound: dict[str, str]) -> str | None:
    """``pagedsim.kv_budget`` for the expression ``p.kv_budget`` after ``import pagedsim as
    p``; None unless the chain starts at an imported name."""
    parts = []
    expr: ast.expr = node
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name) or expr.id not in bound:
        return None
    return ".".join([bound[expr.id], *reversed(parts)])


def _offender(name: str, forbidden: tuple[str, ...]) -> str | None:
    """The forbidden prefix ``name`` falls under, directly or through what it resolves to."""
    for prefix in forbidden:
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    tops = {f.partition(".")[0] for f in forbidden}
    if name.partition(".")[0] not in tops:
        return None  # only look inside the packages the forbidden modules belong to
    origin = _origin(name)
    if origin is None:
        return None
    for prefix in forbidden:
        if origin == prefix or origin.startswith(prefix + "."):
            return prefix
    return None


def _origin(name: str) -> str | None:
    """The module the object called ``name`` (``pagedsim.kv_budget``) is defined in, or None
    if it cannot be found without errors."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # not a module (or one that fails to import): try a shorter one
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        if isinstance(obj, types.ModuleType):
            return obj.__name__
        module = getattr(obj, "__module__", None)
        return module if isinstance(module, str) else None
    return None
