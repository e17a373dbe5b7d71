"""Grading one lab: the reference, a student's files, or a planted-bug mutant.

:func:`grade` follows these steps:

1. copy the lab folder into a fresh temporary folder, leaving out ``mutants.py`` and the
   student files (and the lab's ``worker_modules``);
2. put what is graded into a second, separate folder: the student files from ``path`` (a
   released tree's root holding ``lab<N>_<slug>/``, or that lab folder itself; regular
   files only: a link or a FIFO there scores 0 with one line, never followed or read), or
   one mutant applied to the reference, or the reference as it is;
3. check the student files for imports the lab forbids (statically, with ``ast``:
   :mod:`pagedsim.labs.imports`): one found scores 0 on every task and pytest does not run,
   as does a file Python's parser gives up on;
4. run ``python -m pytest -q -p pagedsim.labs.plugin test_lab<N>.py`` in a subprocess, in
   the first folder, and read the per-test outcomes the plugin writes (installed pytest
   plugins are not auto-loaded, except hypothesis's). That process runs the graders but
   not the student's code: the plugin starts a worker process in the second folder,
   confined, and the graders reach the student's modules through it
   (:mod:`pagedsim.labs.remote`), so nothing the student's code does can write a record;
5. score each task: points x passed tests of its marker / its tests.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .imports import UnparsableSource, forbidden_imports
from .meta import (
    LABS_DIR_ENV,
    RESULTS_ENV,
    WORKER_ENV,
    LabError,
    LabInfo,
    TaskInfo,
    find_labs_dir,
    get_lab,
)
from .mutants import get_mutant
from .prefork import FIXED_ENV, Prefork
from .requirements import lab_requirements
from .results import LabResult, TaskScore
from .sandbox import unconfinable
from .signing import KEY_ENV, no_dumps, signed

#: Files of a lab folder that never go into a grading or released copy.
IGNORED = ("mutants.py", "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
#: Default wall-clock limit of one grader run, in seconds, and the largest one accepted.
DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 86_400.0
#: The longest one call into the student's code may run (seconds) before its process is
#: stopped (that test fails, the next starts a fresh process); and its data memory.
CALL_LIMIT_S = 120.0
WORKER_MEMORY_BYTES = 4 * 2**30
#: Bytes the files under the worker's folder may hold together.
WORKER_DISK_BYTES = 256 * 2**20
#: Bytes of pytest's own output kept (its end) to explain a run that went wrong.
_LOG_TAIL_BYTES = 64 * 2**10
#: Environment variables of the calling process that would change how the graders' pytest
#: runs (extra options, plugins), removed from the child's environment.
_SCRUBBED_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER",
                 "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def check_timeout(timeout_s: object, name: str = "timeout_s") -> float:
    """``timeout_s`` as a float if it is a finite number of seconds in (0, 86400]; else a
    one-line :class:`LabError` naming ``name`` and the value."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
            math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise LabError(f"{name} must be a number of seconds > 0 and <= {MAX_TIMEOUT_S:g}, "
                       f"got {timeout_s!r}")
    return float(timeout_s)


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
    if nested.is_symlink():  # a submission's link could lead to the reference lab folder
        raise LabError(f"{lab.folder} in {str(path)!r} is a symbolic link; links in a "
                       f"submission are never followed: give the folder itself")
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
          fail_fast: bool = False, runner: Prefork | None = None,
          uploaded: Path | str | None = None) -> LabResult:
    """Grade lab ``lab_id``: the reference (neither ``path`` nor ``mutant``), the student
    files under ``path``, or the reference with the mutant called ``mutant``.

    ``tasks`` (markers such as ``lab1_2``) grades only those tasks (the result lists only
    them); ``fail_fast`` stops at the first failing test (pytest's ``-x``): the scores
    then only say whether some test failed, which is all the test suite asks of a mutant.
    ``runner`` forks the run from a warm :class:`~pagedsim.labs.prefork.Prefork` server
    instead of starting a fresh Python (the same run, without the imports' start-up time).
    ``uploaded`` (the autograder's submission folder) is named, with the files it holds,
    when a student file is missing.
    """
    timeout_s = check_timeout(timeout_s)
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
    # A student's code run as root with nothing confining it could read the graders' key
    # (sandbox.py): refuse before reading it. The reference and mutants are the lab's own.
    refusal = unconfinable() if path is not None else ""
    if refusal:
        raise LabError(refusal)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"pagedsim-lab{lab.id}-") as tmp, \
            tempfile.TemporaryDirectory(prefix=f"pagedsim-student{lab.id}-") as student:
        work = Path(tmp) / lab.folder
        shutil.copytree(lab.path, work, ignore=shutil.ignore_patterns(*IGNORED))
        graded_files = {n: (lab.path / n).read_text(encoding="utf-8")
                        for n in lab.student_files}
        missing: list[str] = []
        if path is not None:
            source = student_dir(lab, path)
            graded = "the uploaded files" if uploaded else str(source)
            refused: list[str] = []
            for name in lab.student_files:
                try:
                    text = _read_plain(source / name)
                except FileNotFoundError:
                    missing.append(name)
                except _NotPlain as e:
                    refused.append(f"{name} {e}")
                else:
                    graded_files[name] = text
            if refused:
                return _zero(lab, selected, graded, "; ".join(refused) + ": upload the file "
                             "itself; every task scores 0", start)
        elif mutant is not None:
            planted = get_mutant(lab, mutant)
            graded_files[planted.file] = planted.apply(graded_files[planted.file],
                                                       f"{lab.folder}/{planted.file}")
            graded = f"mutant {planted.name}"
        else:
            graded = "reference"
        if missing:
            return _zero(lab, selected, graded, _missing_message(
                lab, missing, Path(uploaded) if uploaded else source), start)
        try:
            found = [line for name, text in graded_files.items()
                     for line in forbidden_imports(text, lab.forbidden_imports, name)]
        except UnparsableSource as e:  # the graders could not import it either
            return _zero(lab, selected, graded, f"{e}; every task scores 0", start)
        if found:
            return _zero(lab, selected, graded, "; ".join(found) + "; every task scores 0",
                         start)
        # The graders' folder keeps no student code; the worker's folder holds only it
        # (and the modules the lab runs beside it).
        for name, text in graded_files.items():
            (work / name).unlink()
            (Path(student) / name).write_text(text, encoding="utf-8")
        for module in lab.worker_modules:
            shutil.move(work / f"{module}.py", Path(student) / f"{module}.py")
        extra = ["-m", " or ".join(t.marker for t in selected)] if tasks is not None else []
        extra += ["-x"] if fail_fast else []
        worker = _worker_config(lab, Path(student), timeout_s)
        worker["refuse_unconfined"] = path is not None  # the worker's own check, the same
        records, note = _run_pytest(lab, work, Path(tmp) / "results.jsonl", timeout_s, extra,
                                    runner, worker)
    return _score(lab, selected, graded, records, note, start)


class _NotPlain(Exception):
    """A student file that is a link or a special file, not a regular file."""


def _read_plain(path: Path) -> str:
    """The text of the regular file at ``path``, never following a symbolic link there
    (one to the reference, in a submission unpacked inside the instructor's checkout, was
    graded as the student's) and never blocking on a FIFO or reading a device:
    :class:`_NotPlain` says what it is instead. FileNotFoundError if there is nothing."""
    # O_NOFOLLOW makes open fail on a link (checked by lstat first for the message), and
    # O_NONBLOCK keeps a FIFO without a writer from hanging the open; fstat then judges
    # what was actually opened, so nothing can be swapped in between.
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise _NotPlain("is a symbolic link, not a file (links are never followed)")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise _NotPlain(f"could not be opened as a plain file ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise _NotPlain("is not a regular file (a folder, FIFO or device)")
        return f.read().decode("utf-8", errors="replace")


def _missing_message(lab: LabInfo, missing: list[str], where: Path) -> str:
    """Which file is missing, what the upload held instead, and the likely mix-up."""
    held = sorted(p.relative_to(where).as_posix() for p in where.rglob("*")
                  if p.is_file() and "__MACOSX" not in p.parts) if where.is_dir() else []
    shown = ", ".join(held[:20]) + (f" and {len(held) - 20} more" if len(held) > 20 else "")
    lines = [f"missing student file(s) {', '.join(missing)}: the graders need "
             f"{', '.join(lab.student_files)}, named exactly so; every task scores 0",
             f"your upload holds: {shown}" if held else "your upload holds no file"]
    for name in missing:
        nested = [h for h in held if Path(h).name == name]
        if nested:  # the right name, inside a folder (a zipped folder, a copied tree)
            lines.append(f"upload {nested[0]!r} itself, not the folder around it: the "
                         f"graders look for {name!r} at the top of the upload")
            continue
        close = difflib.get_close_matches(name, [Path(h).name for h in held], n=1, cutoff=0.6)
        if close:
            lines.append(f"rename {close[0]!r} to {name!r} and upload it again")
    return "\n".join(lines)


def _worker_config(lab: LabInfo, folder: Path, timeout_s: float) -> dict:
    """The worker's settings (:class:`pagedsim.labs.remote.Worker`)."""

    kernels = lab_requirements(lab)[1]
    return {"folder": str(folder), "modules": list(lab.remote_modules),
            "preload": ["pagedsim"] + (["torch", "triton"] if kernels else []),
            "forbidden": list(lab.forbidden_imports), "given": list(lab.given_modules),
            "memory_bytes": WORKER_MEMORY_BYTES, "disk_bytes": WORKER_DISK_BYTES,
            "cpu_s": math.ceil(timeout_s) + 10, "call_limit_s": min(timeout_s, CALL_LIMIT_S),
            "start_limit_s": min(timeout_s, CALL_LIMIT_S),
            # The grader and the worker on one CPU (same_cpu.py), but for torch's labs.
            "same_cpu": not kernels}


def _zero(lab: LabInfo, selected: tuple[TaskInfo, ...], graded: str, message: str,
          start: float) -> LabResult:
    tasks = tuple(TaskScore(t.marker, t.title, t.points, 0.0, 0, 0, message) for t in selected)
    return LabResult(lab=lab, graded=graded, tasks=tasks, message=message,
                     duration_s=time.perf_counter() - start)


def _run_pytest(lab: LabInfo, work: Path, results: Path, timeout_s: float,
                extra: list[str], runner: Prefork | None,
                worker: dict) -> tuple[list[dict], str]:
    """Run the graders in ``work`` (a fresh ``python -m pytest``, or a child forked by
    ``runner``); the plugin's records, and a note when pytest stopped without running the
    tests (its exit status and the end of its output)."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    env.update(FIXED_ENV)
    env[RESULTS_ENV] = str(results)
    env[WORKER_ENV] = json.dumps(worker)
    key = secrets.token_bytes(32)  # signs the records (pagedsim.labs.signing)
    env[KEY_ENV] = key.hex()
    args = ["-q", "-p", "pagedsim.labs.plugin", "-p", "no:cacheprovider"]
    if importlib.util.find_spec("hypothesis") is not None:
        args += ["-p", "hypothesis.extra.pytestplugin"]
    args += [*extra, lab.test_file]
    note, status = "", 0
    log = results.with_suffix(".log")
    with no_dumps():  # the key stays out of reach of the student's process
        if runner is None:
            # pytest's output goes to a file (of which only the end is read), not memory.
            with open(log, "wb") as out:
                try:
                    status = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=work,
                                            env=env, stdout=out, stderr=subprocess.STDOUT,
                                            timeout=timeout_s, stdin=subprocess.DEVNULL
                                            ).returncode
                except subprocess.TimeoutExpired:
                    status = -9
        else:
            status = runner.run(args, str(work), env, str(log), timeout_s)
    output = _tail(log)
    if status == -9:
        note = f"the graders ran longer than {timeout_s:g} s and were stopped"
    records, forged = [], 0
    if results.is_file():
        for line in results.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a timeout
            if not signed(record, key):
                forged += 1  # not written by the graders (the student's process can,
                continue  # where nothing confines it to its folder)
            # Paths inside the throw-away copy mean nothing to the reader: make them
            # relative to the lab folder.
            record["text"] = record.get("text", "").replace(f"{work}{os.sep}", "")
            records.append(record)
    # 0: all passed, 1: some failed; any other status means the run itself went wrong. Say
    # how, unless the plugin recorded why (a collection error, a refused test).
    if status not in (0, 1, -9) and not any(r.get("kind") == "error" for r in records):
        tail = "\n".join(output.strip().splitlines()[-15:]).replace(f"{work}{os.sep}", "")
        note = f"pytest exited with status {status}:\n{tail}"
    if forged:
        note = "\n".join(filter(None, [note, f"{forged} line(s) of the results file were not "
                                        "the graders' (not signed) and were ignored"]))
    return records, note


def _tail(path: Path) -> str:
    """The last :data:`_LOG_TAIL_BYTES` of a file ("" if there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _score(lab: LabInfo, selected: tuple[TaskInfo, ...], graded: str, records: list[dict],
           note: str, start: float) -> LabResult:
    # One record per test id (the last wins, should a test ever be reported twice); a test
    # the plugin collected but whose record is missing (a run cut short, or records
    # deleted) counts as failed.
    by_id = {r["nodeid"]: r for r in records if r.get("kind") == "test"}
    for collected in [r for r in records if r.get("kind") == "collected"][-1:]:
        for nodeid, marker in collected.get("tests", {}).items():
            by_id.setdefault(nodeid, {"nodeid": nodeid, "marker": marker, "outcome": "failed",
                                      "text": "no result was recorded (the run stopped "
                                              "before this test ended)"})
    tests = list(by_id.values())
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
    worker = next((r for r in records if r.get("kind") == "worker"), {})
    return LabResult(lab=lab, graded=graded, tasks=tuple(scores), message=note, errors=errors,
                     duration_s=time.perf_counter() - start,
                     sandbox=tuple(str(n) for n in worker.get("notes", ())),
                     output=str(worker.get("output", "")),
                     output_bytes=int(worker.get("output_bytes", 0)),
                     grader_peak_rss_bytes=int(worker.get("grader_peak_rss_bytes", 0)))
