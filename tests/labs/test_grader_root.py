"""Grading as root where the worker can neither drop to an unprivileged user nor use
Landlock (issue 37): root with its capabilities reads the graders' key and results path
from ``/proc/<pid>/environ`` (non-dumpable does not stop root) and signs its own records.

Both conditions are simulated: ``$PAGEDSIM_LABS_USER`` names a user that does not exist
(the worker stays root) and ``$PAGEDSIM_LABS_NO_LANDLOCK=1`` makes the sandbox treat the
kernel as one without Landlock. Grading a submission then refuses with one line before any
of it runs; should that check be skipped, the worker refuses by itself before importing
the student's code, and the environ-reading cheat scores 0.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pagedsim.labs import LabError, grade, grading, sandbox

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0
pytestmark = [pytest.mark.skipif(not (LABS / "lab1_budget").is_dir() or not hasattr(
    os, "fork") or not sys.platform.startswith("linux"), reason="needs lab 1 and Linux")]

#: Reads every process's original environment block for the run's key and results path,
#: then appends 2,000 signed "passed" records per task under made-up test ids.
ENVIRON_CHEAT = '''
import glob as _glob, hashlib as _hl, hmac as _hmac, json as _json
def _environ_forge():
    key = path = None
    for name in _glob.glob("/proc/[0-9]*/environ"):
        try:
            block = open(name, "rb").read().split(b"\\0")
        except OSError:
            continue
        for entry in block:
            if entry.startswith(b"PAGEDSIM_LABS_KEY="):
                key = bytes.fromhex(entry.split(b"=", 1)[1].decode())
            if entry.startswith(b"PAGEDSIM_LABS_RESULTS="):
                path = entry.split(b"=", 1)[1].decode()
    if key is None or path is None:
        return
    with open(path, "a") as f:
        for task in range(1, 5):
            for i in range(2000):
                record = {"kind": "test", "nodeid": f"forged-{task}-{i}",
                          "marker": f"lab1_{task}", "outcome": "passed", "text": "",
                          "duration": 0.0}
                body = _json.dumps(record, sort_keys=True).encode()
                record["mac"] = _hmac.new(key, body, _hl.sha256).hexdigest()
                f.write(_json.dumps(record) + "\\n")
_environ_forge()
'''


def _submission(root: Path, text: str) -> Path:
    (root / "lab1_budget").mkdir(parents=True)
    (root / "lab1_budget" / "budget_lab.py").write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def root_without_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.USER_ENV, "pagedsim-no-such-user")
    monkeypatch.setenv(sandbox.NO_LANDLOCK_ENV, "1")


def test_unconfinable_names_both_conditions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The line, root simulated where the tests do not run as root."""
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    monkeypatch.setenv(sandbox.USER_ENV, "pagedsim-no-such-user")
    monkeypatch.setenv(sandbox.NO_LANDLOCK_ENV, "1")
    line = sandbox.unconfinable()
    assert line.startswith("refusing to grade: run as root but no user "
                           "'pagedsim-no-such-user' exists, and this kernel has no Landlock")
    assert "\n" not in line
    monkeypatch.delenv(sandbox.NO_LANDLOCK_ENV)
    assert sandbox.unconfinable() == "" or sandbox.landlock_abi() < 1
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    monkeypatch.setenv(sandbox.NO_LANDLOCK_ENV, "1")
    assert sandbox.unconfinable() == ""  # not root: the graders are non-dumpable


@pytest.mark.skipif(not ROOT_USER, reason="needs root")
@pytest.mark.parametrize("cheat", ["environ", "results-path", "none"])
def test_grading_a_submission_refuses_with_one_line(
        cheat: str, starter: str, tmp_path: Path, root_without_landlock: None) -> None:
    from test_grader_cheats import CHEATS

    text = starter + {"environ": ENVIRON_CHEAT, "results-path": CHEATS["results-path-written"],
                      "none": ""}[cheat]
    with pytest.raises(LabError) as info:
        grade(1, path=_submission(tmp_path, text), labs_dir=LABS, timeout_s=120)
    assert str(info.value).startswith("refusing to grade: run as root")
    assert "\n" not in str(info.value)


@pytest.mark.skipif(not ROOT_USER, reason="needs root")
def test_the_reference_still_grades(root_without_landlock: None) -> None:
    """The instructor's own code (reference, mutants) is not refused."""
    result = grade(1, labs_dir=LABS, timeout_s=120, tasks=["lab1_1"])
    assert result.full_marks, result.table()


@pytest.mark.skipif(not ROOT_USER, reason="needs root")
def test_the_worker_refuses_by_itself(starter: str, tmp_path: Path, root_without_landlock: None,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With grading's own check skipped, the worker refuses before importing the student's
    code: the environ-reading cheat, which forges ~99.8% where it runs, scores 0."""
    monkeypatch.setattr(grading, "unconfinable", lambda: "")
    result = grade(1, path=_submission(tmp_path, starter + ENVIRON_CHEAT), labs_dir=LABS,
                   timeout_s=120)
    assert result.score == 0, result.table()
    assert all(t.tests >= 1 and t.passed == 0 for t in result.tasks), result.table()
    assert "refusing to run the graded code: run as root" in result.table()
