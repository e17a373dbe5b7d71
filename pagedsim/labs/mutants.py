"""Planted-bug mutants of a lab's reference solution.

A lab's ``mutants.py`` (never released) lists realistic student bugs as text edits of the
reference::

    from pagedsim.labs.mutants import Mutant
    MUTANTS = [
        Mutant(name="gqa-ignored", file="budget_lab.py",
               old="model.num_kv_heads", new="model.num_heads", caught_by=("lab1_1",)),
    ]

``old`` must occur exactly once in ``file``. The test suite grades each mutant and checks
that at least one task of ``caught_by`` loses points: the graders catch that bug.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .meta import MARKER_RE, LabError, LabInfo

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_IMPORT_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Mutant:
    """One planted bug: replace ``old`` (which occurs exactly once in the student file
    ``file``) by ``new``; ``caught_by`` names the task markers that must lose points."""

    name: str
    file: str
    old: str
    new: str
    caught_by: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise LabError(f"mutant name must be lowercase words joined by '-', "
                           f"got {self.name!r}")
        if not isinstance(self.file, str) or not self.file.endswith(".py"):
            raise LabError(f"mutant {self.name}: file must be a .py file name, got {self.file!r}")
        for key in ("old", "new"):
            if not isinstance(getattr(self, key), str):
                raise LabError(f"mutant {self.name}: {key} must be a string, "
                               f"got {getattr(self, key)!r}")
        if not self.old:
            raise LabError(f"mutant {self.name}: old must be non-empty")
        if self.old == self.new:
            raise LabError(f"mutant {self.name}: new equals old, so nothing would change")
        caught_by = self.caught_by
        if isinstance(caught_by, str):  # a common slip: ("lab1_1") is a string, not a tuple
            caught_by = (caught_by,)
        if not isinstance(caught_by, (tuple, list)) or not caught_by or not all(
                isinstance(m, str) and MARKER_RE.match(m) for m in caught_by):
            raise LabError(f"mutant {self.name}: caught_by must be a non-empty tuple of task "
                           f"markers such as 'lab1_2', got {self.caught_by!r}")
        object.__setattr__(self, "caught_by", tuple(caught_by))  # frozen: set once, here

    def apply(self, source: str, filename: str | None = None) -> str:
        """``source`` (the text of :attr:`file`) with ``old`` replaced by ``new``; error unless
        ``old`` occurs exactly once."""
        count = source.count(self.old)
        if count != 1:
            raise LabError(f"mutant {self.name}: {self.old!r} occurs {count} times in "
                           f"{filename or self.file}; it must occur exactly once")
        return source.replace(self.old, self.new)

    def check(self, lab: LabInfo) -> None:
        """Check this mutant against ``lab``: a student file, known task markers, and
        ``old`` exactly once in the reference."""
        if self.file not in lab.student_files:
            raise LabError(f"mutant {self.name}: file {self.file!r} is not a student file of "
                           f"lab {lab.id}; valid: {', '.join(lab.student_files)}")
        unknown = [m for m in self.caught_by if m not in lab.markers]
        if unknown:
            raise LabError(f"mutant {self.name}: caught_by names unknown task(s) "
                           f"{', '.join(unknown)}; valid: {', '.join(lab.markers)}")
        self.apply((lab.path / self.file).read_text(encoding="utf-8"),
                   f"{lab.folder}/{self.file}")


def load_mutants(lab: LabInfo) -> list[Mutant]:
    """The ``MUTANTS`` list of ``lab``'s ``mutants.py`` ([] if the lab has none), each
    checked with :meth:`Mutant.check`; names must be unique."""
    path = lab.path / "mutants.py"
    if not path.is_file():
        return []
    module_name = f"_pagedsim_lab{lab.id}_mutants"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise LabError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    # Graders may run in threads (tests/labs/test_labs.py): one import at a time, since the
    # module sits in sys.modules under a fixed name while it runs.
    with _IMPORT_LOCK:
        sys.modules[module_name] = module  # dataclasses defined there look their module up
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise LabError(f"{path}: importing it failed: {type(exc).__name__}: {exc}"
                           ) from None
        finally:
            sys.modules.pop(module_name, None)
    mutants = getattr(module, "MUTANTS", None)
    if not isinstance(mutants, (list, tuple)) or not all(isinstance(m, Mutant) for m in mutants):
        raise LabError(f"{path}: MUTANTS must be a list of pagedsim.labs.mutants.Mutant")
    names = [m.name for m in mutants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise LabError(f"{path}: mutant names must be unique; repeated: {', '.join(duplicates)}")
    for mutant in mutants:
        mutant.check(lab)
    return list(mutants)


def get_mutant(lab: LabInfo, name: str) -> Mutant:
    """The mutant of ``lab`` called ``name`` (error lists the valid names)."""
    mutants = load_mutants(lab)
    for mutant in mutants:
        if mutant.name == name:
            return mutant
    valid = ", ".join(m.name for m in mutants) or "none (the lab has no mutants.py)"
    raise LabError(f"lab {lab.id} has no mutant {name!r}; valid: {valid}")


def mutants_path(lab: LabInfo) -> Path:
    """Where ``lab``'s mutants live (the file the release leaves out)."""
    return lab.path / "mutants.py"
