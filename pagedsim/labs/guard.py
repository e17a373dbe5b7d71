"""Keeping a lab's forbidden modules out of the worker's memory (issue 21).

A name scrubbed from ``sys.modules`` and from a package is not gone: a class that pagedsim
imported stays reachable through every module that imported it, a function's
``__globals__``, a dataclass's ``__init__``, ``gc.get_objects()`` or a walk of
``object.__subclasses__()``. So the worker that runs a student's code never *executes* a
forbidden module: nothing of it exists in the process to be found.

The worker starts as ``python -c BOOT CONFIG`` (:data:`BOOT`), not ``python -m
pagedsim.labs.worker``, which would run ``pagedsim/__init__.py`` (and with it every
allocator) first. :data:`BOOT` loads this file by path, before pagedsim is imported, and
:func:`boot` puts a :class:`Guard` first on ``sys.meta_path``:

- importing a forbidden module (or a submodule of one) raises :class:`ForbiddenImport`;
  so does importing a module that imports one (``pagedsim.engine.scheduler`` imports
  ``pagedsim.memory``): it is refused with it;
- a package of pagedsim (``pagedsim/__init__.py`` re-exports the allocators) is run one
  statement at a time; an import that fails for a forbidden module binds its names to
  :class:`Refused` placeholders, which say why when used, and the rest of the package
  loads (``pagedsim.errors``, ``pagedsim.OutOfMemoryError``).

A lab's ``given_modules`` (lab 7 gives ``pagedsim.PagedAllocator``, whose ``usage()``
needs ``pagedsim.memory.accounting``, which the lab forbids) are imported before the
guard acts, with whatever they import; :func:`block_forbidden` then scrubs those forbidden
modules' names as well as it can, and they stay reachable through the given ones.

What the guard cannot stop, the file system does: the student's code can take the guard
off ``sys.meta_path``, but the confined worker (:mod:`pagedsim.labs.sandbox`: Landlock, or
the user ``nobody`` with pagedsim readable by root only) cannot read the forbidden files.

Standard library only, and no relative import: :data:`BOOT` runs it before pagedsim.
"""

from __future__ import annotations
import __future__

import ast
import importlib
import importlib.machinery
import sys
import types
from collections.abc import Callable

#: What the worker's Python runs (``python -c BOOT CONFIG``): this file, loaded by path
#: from the pagedsim that will be imported (found, not imported), then :func:`boot`.
BOOT = """\
import importlib.util as u, json, os, sys
p = os.path.join(os.path.dirname(u.find_spec("pagedsim").origin), "labs", "guard.py")
s = u.spec_from_file_location("pagedsim.labs.guard", p)
g = sys.modules[s.name] = u.module_from_spec(s)
s.loader.exec_module(g)
g.boot(json.loads(sys.argv[1]))
"""


class ForbiddenImport(ImportError):
    """A module the lab forbids was imported (directly or by a module that needs it)."""


def forbids(forbidden: tuple[str, ...] | list[str]) -> Callable[[object], bool]:
    """``hit(name)``: is ``name`` a forbidden module or inside one? A module of Python's
    standard library is left to the static check (blocking ``os`` would end the worker)."""
    names = tuple(f for f in forbidden if f.partition(".")[0] not in sys.stdlib_module_names)

    def hit(name: object) -> bool:
        return isinstance(name, str) and any(name == f or name.startswith(f + ".")
                                             for f in names)
    return hit


class Refused(types.ModuleType):
    """What stands where a forbidden module, or a name it would have given, would be:
    using it raises :class:`ForbiddenImport` with the reason."""

    def __init__(self, name: str, reason: str = "") -> None:
        super().__init__(name)
        self.__dict__["_reason"] = reason or f"{name} is forbidden in this lab"

    def __getattr__(self, attr: str) -> object:
        if attr.startswith("__") and attr.endswith("__"):  # hasattr(x, "__module__"): no
            raise AttributeError(attr)
        raise ForbiddenImport(self.__dict__["_reason"])

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise ForbiddenImport(self.__dict__["_reason"])

    def __repr__(self) -> str:
        return f"<refused {self.__name__}: {self.__dict__['_reason']}>"


class Guard:
    """A ``sys.meta_path`` finder: refuses forbidden modules, and loads pagedsim's packages
    with :class:`_TolerantInit`. Does nothing while ``active`` is False."""

    def __init__(self, forbidden: tuple[str, ...] | list[str]) -> None:
        self.hit = forbids(forbidden)
        self.active = True

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if not self.active:
            return None
        if self.hit(name):
            raise ForbiddenImport(f"{name} is forbidden in this lab", name=name)
        if name.partition(".")[0] != "pagedsim":
            return None
        spec = None
        for finder in sys.meta_path:  # the finders after this one, as the import would
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        origin = getattr(spec, "origin", None) or ""
        if spec is not None and spec.submodule_search_locations is not None and \
                origin.endswith("__init__.py"):
            spec.loader = _TolerantInit(name, origin)
        return spec


class _TolerantInit(importlib.machinery.SourceFileLoader):
    """Runs a package's ``__init__.py`` statement by statement: an import refused for a
    forbidden module binds the names it would have bound to :class:`Refused`."""

    def exec_module(self, module: types.ModuleType) -> None:
        tree = ast.parse(self.get_source(module.__name__), self.path)
        module.__doc__ = ast.get_docstring(tree, clean=False)
        flags = 0  # ``from __future__ import annotations`` holds for the later statements
        for stmt in tree.body:
            code = compile(ast.Module([stmt], []), self.path, "exec", flags=flags,
                           dont_inherit=True)
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                for alias in stmt.names:
                    flags |= getattr(__future__, alias.name).compiler_flag
            try:
                exec(code, module.__dict__)  # noqa: S102 - pagedsim's own package file
            except ForbiddenImport as exc:
                if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    raise
                for alias in stmt.names:
                    local = alias.asname or alias.name.partition(".")[0]
                    module.__dict__[local] = Refused(
                        f"{module.__name__}.{local}",
                        f"{module.__name__}.{local} is not available in this lab: {exc}")


def install(forbidden: tuple[str, ...] | list[str], given: tuple[str, ...] | list[str] = ()
            ) -> Guard:
    """Put a :class:`Guard` first on ``sys.meta_path`` and import the lab's ``given``
    modules past it (with whatever they import); the guard then acts."""
    guard = Guard(forbidden)
    sys.meta_path.insert(0, guard)
    guard.active = False
    try:
        for name in given:
            importlib.import_module(name)
    finally:
        guard.active = True
    return guard


def boot(config: dict) -> None:
    """The worker's start (:data:`BOOT`): :func:`install`, then
    :func:`pagedsim.labs.worker.main`."""
    install(config.get("forbidden", ()), config.get("given", ()))
    importlib.import_module("pagedsim.labs.worker").main()


def block_forbidden(forbidden: tuple[str, ...] | list[str]) -> None:
    """Scrub the forbidden modules that were imported anyway (a lab's given modules need
    them) from ``sys.modules`` and from pagedsim's packages' re-exports
    (``getattr(pagedsim, "account")``). pagedsim's own code keeps the references it holds:
    what a given module needs stays reachable through it."""
    hit = forbids(forbidden)
    for name in [n for n in sys.modules if hit(n)]:
        sys.modules[name] = Refused(name)
    tops = {f.partition(".")[0] for f in forbidden}
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in tops or hit(name) or not hasattr(module, "__path__"):
            continue
        for attr, value in list(vars(module).items()):
            origin = value.__name__ if isinstance(value, types.ModuleType) else getattr(
                value, "__module__", None)
            if hit(origin) or hit(f"{name}.{attr}"):
                setattr(module, attr, Refused(f"{name}.{attr}"))
