"""The core reads as one class per concept: no mixins, no module writing another object's
private state, no engine modules that need each other only under ``TYPE_CHECKING``.

(The line caps that used to stand here split classes across files to meet a number; a
file now holds one concept, however long it needs.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PAGEDSIM = Path(__file__).resolve().parents[2] / "pagedsim"
CORE = ("engine", "memory")
#: Base classes a core class may have: a protocol it implements, an exception, or a record.
ALLOWED_BASES = {"Protocol", "NamedTuple", "Enum", "IntEnum", "Exception", "ValueError",
                 "RuntimeError", "TypeError", "KeyError", "Generic"}


def _modules(layer: str) -> list[Path]:
    return sorted((PAGEDSIM / layer).glob("*.py"))


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ast.dump(node)


@pytest.mark.parametrize("layer", CORE)
def test_no_class_of_the_core_inherits_behaviour(layer):
    bad = []
    for path in _modules(layer):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {_base_name(b) for b in node.bases}
                if names - ALLOWED_BASES:
                    bad.append(f"{path.name}: {node.name}({', '.join(sorted(names))})")
    assert bad == []


def _foreign_private_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """``x._name = ...`` / ``x._name += ...`` where ``x`` is not ``self`` or ``cls``."""
    found = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign))
                   else [])
        for t in targets:
            for sub in ast.walk(t):
                if (isinstance(sub, ast.Attribute) and sub.attr.startswith("_")
                        and not sub.attr.startswith("__")
                        and not (isinstance(sub.value, ast.Name)
                                 and sub.value.id in ("self", "cls"))):
                    found.append((node.lineno, ast.unparse(sub)))
    return found


def test_the_check_finds_a_foreign_write():
    assert _foreign_private_writes(ast.parse("sched._blocked = None\nself._x = 1\n")) == [
        (1, "sched._blocked")]


@pytest.mark.parametrize("layer", CORE)
def test_no_module_writes_another_objects_private_state(layer):
    bad = [f"{path.name}:{line}: {what}" for path in _modules(layer)
           for line, what in _foreign_private_writes(
               ast.parse(path.read_text(encoding="utf-8")))]
    assert bad == []


def test_engine_modules_import_each_other_for_real():
    """An import that only ``TYPE_CHECKING`` sees between engine modules hides a cycle."""
    bad = []
    for path in _modules("engine"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                    and node.test.id == "TYPE_CHECKING"):
                for imp in ast.walk(node):
                    if isinstance(imp, ast.ImportFrom) and imp.level == 1:
                        bad.append(f"{path.name}: from .{imp.module} import ...")
    assert bad == []
