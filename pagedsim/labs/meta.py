"""Lab metadata: finding the ``labs/`` folder and loading each lab's ``lab.json``.

A lab is a folder ``lab<N>_<slug>/`` holding ``lab.json``, the student module(s), an
``adapters.py``, the graders ``test_lab<N>.py`` and (never released) ``mutants.py``.
``lab.json`` (every key required unless marked optional)::

    {"id": 1, "title": "Memory budget", "hours": 3, "notebook": "notebooks/01_kv_cache.ipynb",
     "student_files": ["budget_lab.py"], "forbidden_imports": ["pagedsim.models.budget"],
     "tasks": [{"marker": "lab1_1", "title": "bytes per token with GQA", "points": 10}],
     "requires": ["hypothesis>=6.100"],                                # optional
     "worker_modules": ["adapters"],                                   # optional
     "given_modules": ["pagedsim.memory.paged"]}                        # optional

``requires`` (optional) lists extra pip requirements for the autograder, beyond what
:mod:`pagedsim.labs.autograder` infers from the lab's imports. ``worker_modules``
(optional; default: the student files' module names) are the modules the graders import
that run in the student's process when graded (:mod:`pagedsim.labs.remote`): lab 6 names
``adapters``, whose Triton harnesses must run beside the student's kernels.
``given_modules`` (optional) are pagedsim modules the lab gives the student although they
import a forbidden one (lab 7: ``pagedsim.memory.paged``, whose ``usage()`` needs the
forbidden ``pagedsim.memory.accounting``); the worker imports them before it refuses the
forbidden modules (:mod:`pagedsim.labs.guard`). Every problem
is reported as one :class:`LabError` line naming the file, the key and what would be valid.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from numbers import Real
from pathlib import Path

#: Environment variable that points at another ``labs/`` folder (a released tree, the
#: autograder's copy).
LABS_DIR_ENV = "PAGEDSIM_LABS_DIR"
#: Environment variable naming the JSON-lines file :mod:`pagedsim.labs.plugin` writes.
RESULTS_ENV = "PAGEDSIM_LABS_RESULTS"
#: Environment variable: the worker's configuration (JSON) for :mod:`pagedsim.labs.plugin`.
WORKER_ENV = "PAGEDSIM_LABS_WORKER"
#: A lab folder's name: ``lab<N>_<slug>``.
FOLDER_RE = re.compile(r"^lab(?P<id>[1-9][0-9]*)_(?P<slug>[a-z0-9][a-z0-9_]*)$")
#: A task marker: ``lab<N>_<k>``.
MARKER_RE = re.compile(r"^lab(?P<lab>[1-9][0-9]*)_(?P<task>[1-9][0-9]*)$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_REQUIRED = ("id", "title", "hours", "notebook", "student_files", "forbidden_imports", "tasks")
_OPTIONAL = ("requires", "worker_modules", "given_modules")
_TASK_KEYS = ("marker", "title", "points")


class LabError(ValueError):
    """A lab that cannot be found, loaded, released or graded as asked (one line)."""


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """One graded task: its pytest marker (``lab1_2``), its title and its points."""

    marker: str
    title: str
    points: float

    @property
    def task_id(self) -> str:
        """The id solution regions carry: ``lab1_2`` -> ``lab 1.2``."""
        match = MARKER_RE.match(self.marker)
        assert match is not None  # checked when the lab was loaded
        return f"lab {match['lab']}.{match['task']}"


@dataclass(frozen=True, slots=True)
class LabInfo:
    """One lab, as its ``lab.json`` describes it; ``path`` is the lab folder."""

    id: int
    title: str
    hours: float
    notebook: str
    student_files: tuple[str, ...]
    forbidden_imports: tuple[str, ...]
    tasks: tuple[TaskInfo, ...]
    path: Path
    requires: tuple[str, ...] = ()
    worker_modules: tuple[str, ...] = ()
    given_modules: tuple[str, ...] = ()

    @property
    def remote_modules(self) -> tuple[str, ...]:
        """The modules that run in the student's process: ``worker_modules``, or the
        student files' module names."""
        return self.worker_modules or tuple(Path(n).stem for n in self.student_files)

    @property
    def folder(self) -> str:
        """The folder name, ``lab<N>_<slug>``."""
        return self.path.name

    @property
    def test_file(self) -> str:
        """The graders' file name, ``test_lab<N>.py``."""
        return f"test_lab{self.id}.py"

    @property
    def max_score(self) -> float:
        """Points over every task."""
        return sum(t.points for t in self.tasks)

    @property
    def markers(self) -> tuple[str, ...]:
        return tuple(t.marker for t in self.tasks)

    def task(self, marker: str) -> TaskInfo:
        """The task with this marker (error lists the valid markers)."""
        for task in self.tasks:
            if task.marker == marker:
                return task
        raise LabError(f"lab {self.id} has no task {marker!r}; valid: {', '.join(self.markers)}")

    def to_dict(self) -> dict:
        """The JSON form ``pagedsim labs list --json`` prints."""
        return {"id": self.id, "title": self.title, "hours": self.hours,
                "notebook": self.notebook, "folder": self.folder,
                "student_files": list(self.student_files),
                "forbidden_imports": list(self.forbidden_imports),
                "max_score": self.max_score,
                "tasks": [{"marker": t.marker, "title": t.title, "points": t.points}
                          for t in self.tasks]}


def find_labs_dir() -> Path:
    """The ``labs/`` folder: ``$PAGEDSIM_LABS_DIR`` if set, else the repository's top-level
    ``labs/`` next to the ``pagedsim`` package. Error if it is not a folder."""
    env = os.environ.get(LABS_DIR_ENV)
    if env:
        path = Path(env)
        if not path.is_dir():
            raise LabError(f"${LABS_DIR_ENV} = {env!r} is not a folder")
        return path.resolve()
    path = Path(__file__).resolve().parents[2] / "labs"
    if not path.is_dir():
        raise LabError(f"no labs folder at {path}; set ${LABS_DIR_ENV} to a labs/ folder "
                       "(a repository checkout or a released tree)")
    return path


def lab_folders(labs_dir: Path | None = None) -> list[Path]:
    """Every ``lab<N>_<slug>`` folder with a ``lab.json`` under ``labs_dir``, by lab id."""
    labs_dir = find_labs_dir() if labs_dir is None else Path(labs_dir)
    found = [p for p in labs_dir.iterdir()
             if p.is_dir() and FOLDER_RE.match(p.name) and (p / "lab.json").is_file()]
    return sorted(found, key=lambda p: int(FOLDER_RE.match(p.name)["id"]))  # type: ignore[index]


def list_labs(labs_dir: Path | None = None) -> list[LabInfo]:
    """Every lab under ``labs_dir`` (default :func:`find_labs_dir`), ordered by id."""
    labs = [load_lab(p) for p in lab_folders(labs_dir)]
    seen: dict[int, Path] = {}
    for lab in labs:
        if lab.id in seen:
            raise LabError(f"two folders for lab {lab.id}: {seen[lab.id].name} and {lab.folder}")
        seen[lab.id] = lab.path
    return labs


def get_lab(lab_id: object, labs_dir: Path | None = None) -> LabInfo:
    """The lab with this id (error lists the valid ids). Only that lab's ``lab.json`` is
    loaded, so a lab under construction elsewhere in the folder does not stop this one."""
    folders = lab_folders(labs_dir)
    ids = [int(FOLDER_RE.match(p.name)["id"]) for p in folders]  # type: ignore[index]
    mine = [p for p, i in zip(folders, ids, strict=True)
            if i == lab_id and not isinstance(lab_id, bool)]
    if not mine:
        valid = ", ".join(str(i) for i in sorted(set(ids))) or "none (no labs found)"
        raise LabError(f"unknown lab {lab_id!r}; valid: {valid}")
    if len(mine) > 1:
        raise LabError(f"two folders for lab {lab_id}: {mine[0].name} and {mine[1].name}")
    return load_lab(mine[0])


def load_lab(folder: Path) -> LabInfo:
    """Load and check ``folder/lab.json`` (and that the files it names exist)."""
    folder = Path(folder).resolve()
    where = folder / "lab.json"
    try:
        raw = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LabError(f"{where}: no such file") from None
    except json.JSONDecodeError as exc:
        raise LabError(f"{where}: not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise LabError(f"{where}: must hold one JSON object, got {type(raw).__name__}")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise LabError(f"{where}: missing key(s) {', '.join(missing)}")
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise LabError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: "
                       f"{', '.join(_REQUIRED + _OPTIONAL)}")

    folder_match = FOLDER_RE.match(folder.name)
    if folder_match is None:
        raise LabError(f"{folder}: a lab folder is named lab<N>_<slug> (lowercase slug)")
    lab_id = raw["id"]
    if type(lab_id) is not int or lab_id != int(folder_match["id"]):
        raise LabError(f"{where}: id must be the integer {folder_match['id']} of the folder "
                       f"name {folder.name}, got {lab_id!r}")
    title = _text(where, "title", raw["title"])
    hours = _positive(where, "hours", raw["hours"])
    notebook = _text(where, "notebook", raw["notebook"])
    student_files = _names(where, "student_files", raw["student_files"], allow_empty=False)
    for name in student_files:
        if "/" in name or "\\" in name or not name.endswith(".py"):
            raise LabError(f"{where}: student_files entry {name!r} must be a .py file name "
                           "inside the lab folder (no folders)")
        if name in ("adapters.py", "mutants.py", f"test_lab{lab_id}.py"):
            raise LabError(f"{where}: student_files may not name {name!r} (a grading file)")
        if not (folder / name).is_file():
            raise LabError(f"{where}: student file {name!r} does not exist in {folder.name}/")
    forbidden = _names(where, "forbidden_imports", raw["forbidden_imports"], allow_empty=True)
    for name in forbidden:
        if not _MODULE_RE.match(name):
            raise LabError(f"{where}: forbidden_imports entry {name!r} is not a module name "
                           "such as 'pagedsim.models.budget'")
    requires = _names(where, "requires", raw.get("requires", []), allow_empty=True)
    worker_modules = _names(where, "worker_modules", raw.get("worker_modules", []),
                            allow_empty=True)
    for name in worker_modules:
        if not _MODULE_RE.match(name) or "." in name or not (folder / f"{name}.py").is_file():
            raise LabError(f"{where}: worker_modules entry {name!r} must name a module "
                           f"<name>.py of {folder.name}/")
    given = _names(where, "given_modules", raw.get("given_modules", []), allow_empty=True)
    for name in given:
        if not _MODULE_RE.match(name) or any(name == f or name.startswith(f + ".")
                                             for f in forbidden):
            raise LabError(f"{where}: given_modules entry {name!r} must be a module name "
                           "that forbidden_imports does not forbid")
    tasks = _tasks(where, lab_id, raw["tasks"])
    for name in ("adapters.py", f"test_lab{lab_id}.py"):
        if not (folder / name).is_file():
            raise LabError(f"{where}: the lab folder has no {name}")
    return LabInfo(id=lab_id, title=title, hours=hours, notebook=notebook,
                   student_files=student_files, forbidden_imports=forbidden, tasks=tasks,
                   path=folder, requires=requires, worker_modules=worker_modules,
                   given_modules=given)


def _text(where: Path, key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LabError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _positive(where: Path, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
        raise LabError(f"{where}: {key} must be a number > 0, got {value!r}")
    return value  # type: ignore[return-value]


def _names(where: Path, key: str, value: object, allow_empty: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise LabError(f"{where}: {key} must be a list of non-empty strings, got {value!r}")
    if not value and not allow_empty:
        raise LabError(f"{where}: {key} must name at least one file")
    if len(set(value)) != len(value):
        raise LabError(f"{where}: {key} lists a name twice: {value!r}")
    return tuple(value)


def _tasks(where: Path, lab_id: int, value: object) -> tuple[TaskInfo, ...]:
    if not isinstance(value, list) or not value:
        raise LabError(f"{where}: tasks must be a non-empty list of objects, got {value!r}")
    tasks = []
    for i, raw in enumerate(value):
        at = f"{where}: tasks[{i}]"
        if not isinstance(raw, dict) or sorted(raw) != sorted(_TASK_KEYS):
            raise LabError(f"{at} must be an object with exactly the keys "
                           f"{', '.join(_TASK_KEYS)}, got {raw!r}")
        marker = raw["marker"]
        match = MARKER_RE.match(marker) if isinstance(marker, str) else None
        if match is None or int(match["lab"]) != lab_id:
            raise LabError(f"{at}.marker must be lab{lab_id}_<k> (k = 1, 2, ...), got {marker!r}")
        if int(match["task"]) != i + 1:
            raise LabError(f"{at}.marker must be lab{lab_id}_{i + 1} (tasks are numbered "
                           f"in order from 1), got {marker!r}")
        tasks.append(TaskInfo(marker=marker, title=_text(where, f"tasks[{i}].title",
                                                         raw["title"]),
                              points=_positive(where, f"tasks[{i}].points", raw["points"])))
    return tuple(tasks)
