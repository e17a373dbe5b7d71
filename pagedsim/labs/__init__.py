"""Graded classroom labs: list them, release the student version, grade a submission.

The labs live in the repository's top-level ``labs/`` folder (or ``$PAGEDSIM_LABS_DIR``),
one folder per lab; ``labs/INSTRUCTORS.md`` is the instructor's guide. Pure Python: the
framework never imports torch or triton (only the graders of labs that need them do, in
their own subprocess).

- :func:`list_labs`, :func:`find_labs_dir`: the labs and where they are (:mod:`.meta`);
- :func:`release`: the student version, solution regions stripped (:mod:`.release`,
  :mod:`.regions`);
- :func:`grade`: the reference, a student's files or a planted-bug mutant, graded by the
  lab's pytest graders in a subprocess (:mod:`.grading`, :mod:`.plugin`, :mod:`.mutants`);
- :func:`build_autograder`: a Gradescope autograder zip (:mod:`.autograder`);
- ``python -m pagedsim.labs.index``: the table of ``labs/README.md``; ``python -m
  pagedsim.labs.timings``: the measured grading times of ``labs/INSTRUCTORS.md``.
"""

from __future__ import annotations

from .autograder import build_autograder
from .grading import grade
from .imports import forbidden_imports
from .meta import LabError, LabInfo, TaskInfo, find_labs_dir, get_lab, list_labs
from .mutants import Mutant, load_mutants
from .regions import Region, RegionError, parse_regions, strip_regions
from .release import release
from .results import LabResult, TaskScore

__all__ = [
    "LabError",
    "LabInfo",
    "LabResult",
    "Mutant",
    "Region",
    "RegionError",
    "TaskInfo",
    "TaskScore",
    "build_autograder",
    "find_labs_dir",
    "forbidden_imports",
    "get_lab",
    "grade",
    "list_labs",
    "load_mutants",
    "parse_regions",
    "release",
    "strip_regions",
]
