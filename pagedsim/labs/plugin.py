"""A pytest plugin for lab graders: ``python -m pytest -p pagedsim.labs.plugin test_lab1.py``.

Run from a lab folder (the folder holding ``lab.json``), it

1. registers one marker per task of ``lab.json`` (``lab1_1`` ...), so ``-m lab1_2`` runs one
   task and ``--strict-markers`` accepts them;
2. refuses a test with no task marker, with two, or with a ``lab<N>_<k>`` marker the lab
   does not have (a usage error: pytest stops before running anything);
3. loads a hypothesis profile without the slow explain phase and with fixed examples (see
   :func:`_hypothesis_profile`), and refuses a property test whose own settings draw
   random examples (the same files must always get the same grade);
4. when ``$PAGEDSIM_LABS_RESULTS`` names a file, appends one JSON object per line to it: a
   ``test`` record per test (node id, task marker, outcome ``passed`` / ``failed`` /
   ``skipped``, a short failure text, duration in seconds) as each test finishes, so a
   run stopped by a timeout still leaves what it did; an ``error`` record per collection
   error or refused test; a ``collected`` record listing every test it will run; with
   ``$PAGEDSIM_LABS_KEY`` (set by :func:`pagedsim.labs.grade`), each record signed
   (:mod:`pagedsim.labs.signing`) and this process made non-dumpable.

Outside a lab folder (no ``lab.json`` in the working directory) it does nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from .meta import RESULTS_ENV, WORKER_ENV
from .signing import KEY_ENV, make_undumpable, sign
from .steps import plain_steps

#: Longest failure text kept per test (characters); the grader's output stays readable.
MAX_TEXT = 1500
_ANY_MARKER = re.compile(r"^lab[0-9]+_[0-9]+$")

#: This run's lab markers (marker -> title), each test's task marker, and each test's outcome.
_state: dict = {"markers": {}, "item_markers": {}, "outcomes": {}}


def _write(record: dict) -> None:
    path = _state.get("results")
    if path:
        key = _state.get("key")
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(sign(record, key) if key else record) + "\n")


def _lab_markers() -> dict[str, str]:
    """Task marker -> title, from ``lab.json`` in the working directory ({} if none)."""
    path = Path.cwd() / "lab.json"
    if not path.is_file():
        return {}
    try:
        tasks = json.loads(path.read_text(encoding="utf-8")).get("tasks", [])
        return {str(t["marker"]): str(t.get("title", "")) for t in tasks}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}  # pagedsim.labs.meta reports a bad lab.json with the full reason


def pytest_configure(config: pytest.Config) -> None:
    _state["markers"] = _lab_markers()
    # Taken out of the environment, so that the code under test (and any process it
    # starts) does not see where the results go.
    _state["results"] = os.environ.pop(RESULTS_ENV, None)
    # The run's key signs every record (pagedsim.labs.signing); no other process of this
    # user may read it from here (nor this process's memory) from now on.
    key = os.environ.pop(KEY_ENV, None)
    _state["key"] = bytes.fromhex(key) if key else None
    if key:
        make_undumpable()
    _state["outcomes"] = {}
    _state["item_markers"] = {}
    _state["refused"] = False
    for marker, title in _state["markers"].items():
        config.addinivalue_line("markers", f"{marker}: lab task: {title}")
    if _state["markers"]:
        _hypothesis_profile()
    worker = os.environ.pop(WORKER_ENV, None)
    if worker:
        from .remote import Worker, install

        settings = json.loads(worker)
        _state["worker"] = Worker(settings)
        install(_state["worker"], settings["modules"])
        _become_subreaper()


def pytest_unconfigure(config: pytest.Config) -> None:
    worker = _state.pop("worker", None)
    if worker is None:
        return
    worker.close()
    _kill_orphans()
    _write({"kind": "worker", "notes": worker.notes,
            "output": worker.output.decode("utf-8", errors="replace"),
            "output_bytes": worker.output_total_bytes,
            "grader_peak_rss_bytes": _peak_rss_bytes()})


def _peak_rss_bytes() -> int:
    """This process's peak resident memory, whatever the student's code printed: Linux's
    VmHWM (``ru_maxrss`` would carry over the forking parent's peak through exec), else
    ``ru_maxrss`` (KiB on Linux, bytes on macOS)."""
    import resource
    import sys

    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _become_subreaper() -> None:
    """Processes the student's code starts and leaves behind become this process's
    children (Linux), so that :func:`_kill_orphans` ends them."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _kill_orphans() -> None:
    """SIGKILL every remaining child of this process (a fork that outlived its test)."""
    import signal

    for _ in range(5):
        children = []
        for stat_path in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat_path.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == os.getpid():
                children.append(int(stat_path.parent.name))
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError, PermissionError):
                pass


def _hypothesis_profile() -> None:
    """Grade with hypothesis's explain phase off, no example database, no deadline and
    derandomized (the examples a property tries depend only on the test, not on a seed
    drawn per run: a student who grades the same files again gets the same grade).

    When a property fails, the explain phase re-runs it many times to say which inputs
    mattered; on a starter, where every property fails at once, it dominates the run (on
    lab 1's starter, measured once on a 2-core machine: pytest's 18.3 s with it, 1.9 s
    without). Students still get the shrunk failing example. The database would only write
    a ``.hypothesis/`` folder into the throw-away grading copy. A grader's own
    ``@settings(...)`` still sets everything else (max_examples, deadline).
    """
    try:
        from hypothesis import HealthCheck, Phase, settings
    except ImportError:
        return
    phases = [p for p in Phase if p.name != "explain"]
    # On top of whatever profile is loaded now (a lab's conftest.py may have loaded one).
    # No deadline and no too-slow health check: a score must not depend on the machine's
    # speed or load (every call into the student's code is a round trip to its process).
    settings.register_profile("pagedsim-labs", parent=settings.default, phases=phases,
                              database=None, deadline=None, derandomize=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("pagedsim-labs")


def _short(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The one-line reason pytest gives (``AssertionError: assert 3 == 4``), or the tail of
    the long report when there is none."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) if crash is not None else None
    if not text:
        if isinstance(report.longrepr, tuple):  # skips: (file, line, reason)
            text = str(report.longrepr[2])
        else:
            text = "\n".join(str(report.longreprtext).strip().splitlines()[-6:])
    text = plain_steps(text)  # a property's failing example as the steps that break it
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + " ..."


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write({"kind": "error", "nodeid": report.nodeid,
                "text": "collection error: " + _short(report)})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    known = _state["markers"]
    if not known:
        return
    problems = []
    for item in items:
        names = {m.name for m in item.iter_markers() if _ANY_MARKER.match(m.name)}
        unknown = sorted(names - set(known))
        if unknown:
            problems.append(f"{item.nodeid} has marker(s) {', '.join(unknown)} that are no "
                            f"task of this lab; valid: {', '.join(known)}")
        elif len(names) != 1:
            what = "no task marker" if not names else f"{len(names)} task markers"
            problems.append(f"{item.nodeid} has {what}; each test needs exactly one of "
                            f"{', '.join(known)}")
        else:
            _state["item_markers"][item.nodeid] = names.pop()
        random = _draws_random_examples(item)
        if random:
            problems.append(f"{item.nodeid} {random}")
    for problem in problems:
        _write({"kind": "error", "nodeid": "", "text": problem})
    _state["refused"] = bool(problems)  # then nothing runs (and nothing is collected)
    if problems:
        raise pytest.UsageError(problems[0] + (f" (and {len(problems) - 1} more)"
                                               if len(problems) > 1 else ""))


def _draws_random_examples(item: pytest.Item) -> str:
    """Why a hypothesis test would try other examples on each run ("" if it would not):
    its own ``@settings(derandomize=False)`` (the profile above derandomizes every test
    whose settings leave it unset)."""
    use = getattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings", None)
    if use is None or getattr(use, "derandomize", True):
        return ""
    return ("draws random examples (derandomize=False): the same files would get another "
            "grade on each run; give its settings derandomize=True")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Every test this run will run, with its task: grading counts a test whose record is
    missing as failed (so deleting records gains nothing)."""
    if _state["markers"] and not _state.get("refused"):
        _write({"kind": "collected", "tests": {
            item.nodeid: _state["item_markers"].get(item.nodeid, "") for item in session.items}})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Fold a test's three phases into one outcome: a failure in any phase fails the test
    (an error in a fixture counts as a failed test); a skip skips it."""
    if not _state["markers"]:
        return
    outcome = _state["outcomes"].setdefault(report.nodeid,
                                            {"outcome": "passed", "text": "", "duration": 0.0})
    outcome["duration"] += report.duration
    if outcome["outcome"] != "passed":
        return  # keep the first reason
    if report.failed:
        phase = "" if report.when == "call" else f"(in {report.when}) "
        outcome.update(outcome="failed", text=phase + _short(report))
    elif report.skipped:
        outcome.update(outcome="skipped", text=_short(report))
    elif report.when == "call" and hasattr(report, "wasxfail"):
        outcome.update(outcome="failed", text="unexpectedly passed a test marked xfail")


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    outcome = _state["outcomes"].get(nodeid)
    if outcome is None:
        return
    _write({"kind": "test", "nodeid": nodeid, "marker": _state["item_markers"].get(nodeid, ""),
            **outcome})
