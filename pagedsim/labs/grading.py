"""Grading one lab: the reference, a student's files, or a planted-bug mutant.

:func:`grade` follows these steps:

1. copy the lab folder into a fresh temporary folder, leaving out ``mutants.py``;
2. put in what is graded: the student files from ``path`` (a released tree's root holding
   ``lab<N>_<slug>/``, or that lab folder itself), or one mutant applied to the reference,
   or nothing (the reference as it is);
3. check the student files for imports the lab forbids (statically, with ``ast``:
   :mod:`pagedsim.labs.imports`): one found scores 0 on every task and pytest does not run;
4. run ``python -m pytest -q -p pagedsim.labs.plugin test_lab<N>.py`` in a subprocess, in
   that folder, and read the per-test outcomes the plugin writes (installed pytest plugins
   are not auto-loaded, except hypothesis's: a lab's ``conftest.py`` may name others in
   ``pytest_plugins``);
5. score each task: points x passed tests of its marker / its tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .imports import forbidden_imports
from .meta import LABS_DIR_ENV, RESULTS_ENV, LabError, LabInfo, TaskInfo, find_labs_dir, get_lab
from .mutants import get_mutant
from .prefork import FIXED_ENV, Prefork
from .results import LabResult, TaskScore

#: Files of a lab folder that never go into a grading or released copy.
IGNORED = ("mutants.py", "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
#: Default wall-clock limit of one grader run, in seconds.
DEFAULT_TIMEOUT_S = 600.0
#: Environment variables of the calling process that would change how the graders' pytest
#: runs (extra options, plugins), removed from the child's environment.
_SCRUBBED_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER",
                 "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def require_pytest() -> None:
    """Error (one line) if pytest is missing: the graders are pytest files."""
    if importlib.util.find_spec("pytest") is None:
        raise LabError("pytest is not installed; grading needs it: pip install pytest "
                       "hypothesis (or pip install -e '.[dev]')")


def student_dir(lab: LabInfo, path: Path | str) -> Path:
    """The folder holding ``lab``'s student files: ``path/<lab folder>`` when ``path`` is a
    released tree's root, else ``path`` itself."""
    path = Path(path)
    if not path.exists():
        raise LabError(f"path {str(path)!r} does not exist")
    if not path.is_dir():
        raise LabError(f"path {str(path)!r} is not a folder; give the released tree's root or "
                       f"its {lab.folder}/ folder")
    nested = path / lab.folder
    return (nested if nested.is_dir() else path).resolve()


def _labs_dir_or_tree(path: Path | str) -> Path | None:
    """The labs folder to grade against: :func:`find_labs_dir`'s when there is one (the
    instructor's graders, whatever the student's tree holds), else the tree at ``path``
    itself (a student with an installed pagedsim grading their own released copy)."""
    try:
        return find_labs_dir()
    except LabError:
        if os.environ.get(LABS_DIR_ENV):
            raise  # set by hand: a mistake there is the user's to see
        tree = Path(path)
        if (tree / "lab.json").is_file():  # a lab folder: its parent is the tree
            tree = tree.parent
        return tree if tree.is_dir() else None


def grade(lab_id: int, path: Path | str | None = None, mutant: str | None = None,
          labs_dir: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
          tasks: tuple[str, ...] | list[str] | None = None,
          fail_fast: bool = False, runner: Prefork | None = None) -> LabResult:
    """Grade lab ``lab_id``: the reference (neither ``path`` nor ``mutant``), the student
    files under ``path``, or the reference with the mutant called ``mutant``.

    ``tasks`` (markers such as ``lab1_2``) grades only those tasks (the result lists only
    them); ``fail_fast`` stops at the first failing test (pytest's ``-x``): the scores
    then only say whether some test failed, which is all the test suite asks of a mutant.
    ``runner`` forks the run from a warm :class:`~pagedsim.labs.prefork.Prefork` server
    instead of starting a fresh Python (the same run, without the imports' start-up time).
    """
    if path is not None and not Path(path).exists():
        raise LabError(f"path {str(path)!r} does not exist")
    if labs_dir is None and path is not None:
        labs_dir = _labs_dir_or_tree(path)
    lab = get_lab(lab_id, labs_dir)
    if path is not None and mutant is not None:
        raise LabError("give a student path or a mutant, not both")
    selected = lab.tasks if tasks is None else tuple(lab.task(m) for m in dict.fromkeys(tasks))
    if not selected:
        raise LabError(f"no task selected; valid: {', '.join(lab.markers)}")
    require_pytest()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"pagedsim-lab{lab.id}-") as tmp:
        work = Path(tmp) / lab.folder
        shutil.copytree(lab.path, work, ignore=shutil.ignore_patterns(*IGNORED))
        missing: list[str] = []
        if path is not None:
            source = student_dir(lab, path)
            graded = str(source)
            for name in lab.student_files:
                (work / name).unlink()  # the reference must never be graded in its place
                if (source / name).is_file():
                    shutil.copyfile(source / name, work / name)
                else:
                    missing.append(name)
        elif mutant is not None:
            planted = get_mutant(lab, mutant)
            target = work / planted.file
            target.write_text(planted.apply(target.read_text(encoding="utf-8"),
                                            f"{lab.folder}/{planted.file}"), encoding="utf-8")
            graded = f"mutant {planted.name}"
        else:
            graded = "reference"

        if missing:
            message = (f"missing student file(s) {', '.join(missing)} in {graded}; every task "
                       "scores 0")
            return _zero(lab, selected, graded, message, start)
        found = [line for name in lab.student_files
                 for line in forbidden_imports((work / name).read_text(encoding="utf-8"),
                                               lab.forbidden_imports, name)]
        if found:
            return _zero(lab, selected, graded, "; ".join(found) + "; every task scores 0",
                         start)
        extra = ["-m", " or ".join(t.marker for t in selected)] if tasks is not None else []
        extra += ["-x"] if fail_fast else []
        records, note = _run_pytest(lab, work, Path(tmp) / "results.jsonl", timeout_s, extra,
                                    runner)
    return _score(lab, selected, graded, records, note, start)


def _zero(lab: LabInfo, selected: tuple[TaskInfo, ...], graded: str, message: str,
          start: float) -> LabResult:
    tasks = tuple(TaskScore(t.marker, t.title, t.points, 0.0, 0, 0, message) for t in selected)
    return LabResult(lab=lab, graded=graded, tasks=tasks, message=message,
                     duration_s=time.perf_counter() - start)


def _run_pytest(lab: LabInfo, work: Path, results: Path, timeout_s: float,
                extra: list[str], runner: Prefork | None) -> tuple[list[dict], str]:
    """Run the graders in ``work`` (a fresh ``python -m pytest``, or a child forked by
    ``runner``); the plugin's records, and a note when pytest stopped without running the
    tests (its exit status and the end of its output)."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    env.update(FIXED_ENV)
    env[RESULTS_ENV] = str(results)
    args = ["-q", "-p", "pagedsim.labs.plugin", "-p", "no:cacheprovider"]
    if importlib.util.find_spec("hypothesis") is not None:
        args += ["-p", "hypothesis.extra.pytestplugin"]
    args += [*extra, lab.test_file]
    note, status, output = "", 0, ""
    if runner is None:
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
            status, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            status = -9
    else:
        log = results.with_suffix(".log")
        status = runner.run(args, str(work), env, str(log), timeout_s)
        output = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    if status == -9:
        note = f"the graders ran longer than {timeout_s:g} s and were stopped"
    records = []
    if results.is_file():
        for line in results.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a timeout
            # Paths inside the throw-away copy mean nothing to the reader: make them
            # relative to the lab folder.
            record["text"] = record.get("text", "").replace(f"{work}{os.sep}", "")
            records.append(record)
    # 0: all passed, 1: some failed; any other status means the run itself went wrong. Say
    # how, unless the plugin recorded why (a collection error, a refused test).
    if status not in (0, 1, -9) and not any(r.get("kind") == "error" for r in records):
        tail = "\n".join(output.strip().splitlines()[-15:]).replace(f"{work}{os.sep}", "")
        note = f"pytest exited with status {status}:\n{tail}"
    return records, note


def _score(lab: LabInfo, selected: tuple[TaskInfo, ...], graded: str, records: list[dict],
           note: str, start: float) -> LabResult:
    # One record per test id (the last wins, should a test ever be reported twice).
    tests = list({r["nodeid"]: r for r in records if r.get("kind") == "test"}.values())
    errors = tuple(r["text"] for r in records if r.get("kind") == "error")
    scores = []
    for task in selected:
        mine = [r for r in tests if r.get("marker") == task.marker]
        passed = sum(r["outcome"] == "passed" for r in mine)
        if mine:
            output = "\n".join(f"{r['nodeid']}: {r['outcome']}: {r['text']}"
                               for r in mine if r["outcome"] != "passed")
            output = output or f"all {len(mine)} tests passed"
        else:
            output = "no test of this task ran" + (
                " (the graders stopped before running tests; see the overall output)"
                if errors else "")
        score = task.points * passed / len(mine) if mine else 0.0
        scores.append(TaskScore(task.marker, task.title, task.points, score, passed,
                                len(mine), output))
    return LabResult(lab=lab, graded=graded, tasks=tuple(scores), message=note, errors=errors,
                     duration_s=time.perf_counter() - start)
