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

The check runs in the grading process, before the graders and outside their time limit, so
its cost is linear in the source: an attribute chain (``pagedsim.a.a...``) is followed once,
from its outermost node, not once per link. A file too deep for Python's parser (which
raises RecursionError or MemoryError, not SyntaxError) is refused with
:class:`UnparsableSource`.
"""

from __future__ import annotations

import ast
import importlib
import types

from .meta import LabError
from .pysource import parse

#: Characters of a dotted name quoted in a report (a chain can be 100,000 links long).
_SHOWN_NAME_CHARS = 120


class UnparsableSource(LabError):
    """A student file Python's parser gave up on (nested too deeply, or too large)."""


def forbidden_imports(source: str, forbidden: tuple[str, ...] | list[str],
                      filename: str = "<string>") -> list[str]:
    """One ``file:line: uses X, ...`` line per use of a forbidden module in ``source``; []
    when clean or when ``source`` does not parse (pytest then reports the syntax error).
    :class:`UnparsableSource` (one line) when the parser itself gives up: 100,000 nested
    unary minuses raise MemoryError, a 1,000-link attribute chain RecursionError."""
    forbidden = tuple(forbidden)
    if not forbidden:
        return []
    try:
        tree = parse(source, filename=filename)
    except (SyntaxError, ValueError):
        return []
    except (RecursionError, MemoryError) as e:
        raise UnparsableSource(f"{filename}: Python's parser could not read this file "
                               f"({type(e).__name__}: it is nested too deeply or too large)"
                               ) from None
    bound: dict[str, str] = {}  # local name -> the dotted name it was imported as
    found: dict[int, str] = {}  # line -> the first offence on it

    def report(node: ast.expr | ast.stmt, name: str) -> None:
        hit = _offender(name, forbidden)
        if hit is not None and node.lineno not in found:
            shown = name if len(name) <= _SHOWN_NAME_CHARS else (
                name[:_SHOWN_NAME_CHARS] + f"... ({len(name):,} characters)")
            found[node.lineno] = (f"{filename}:{node.lineno}: uses {shown}, which this lab "
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
    # Only the outermost node of a chain: its inner nodes are its prefixes, which
    # _offender checks on the way (all start on the same line), and walking each of them
    # again made a chain of N links cost N^3 (500 links: two minutes).
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
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
    """The forbidden prefix ``name`` or one of its dotted prefixes falls under, directly or
    through what it resolves to."""
    for prefix in forbidden:
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    tops = {f.partition(".")[0] for f in forbidden}
    if name.partition(".")[0] not in tops:
        return None  # only look inside the packages the forbidden modules belong to
    for origin in _origins(name):
        for prefix in forbidden:
            if origin == prefix or origin.startswith(prefix + "."):
                return prefix
    return None


def _origins(name: str) -> list[str]:
    """The modules the objects called by ``name``'s prefixes (``pagedsim``,
    ``pagedsim.kv_budget``, ...) are defined in, as far as they can be found without
    errors. One step per link, each from the object before it (a submodule not imported yet
    is imported), so a long chain costs linear time: the old search imported every prefix
    of the whole name afresh, for every link."""
    parts = name.split(".")
    try:
        obj: object = importlib.import_module(parts[0])
    except Exception:  # not a module (or one that fails to import)
        return []
    origins = [parts[0]]
    for attr in parts[1:]:
        try:
            obj = getattr(obj, attr)
        except Exception:
            if not isinstance(obj, types.ModuleType):
                break
            try:  # a submodule that nothing has imported yet
                obj = importlib.import_module(f"{obj.__name__}.{attr}")
            except Exception:
                break
        if isinstance(obj, types.ModuleType):
            origins.append(obj.__name__)
        else:
            module = getattr(obj, "__module__", None)
            if isinstance(module, str):
                origins.append(module)
    return origins
