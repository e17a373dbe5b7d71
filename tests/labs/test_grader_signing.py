"""Results the student's process cannot forge where it can write them (issue 21, part 3).

A non-root grader on a kernel without Landlock runs the student's code as its own user,
which may write the graders' results file. These tests play that process's part from
outside (this machine may well have Landlock, which would stop the real one): forged
"passed" records appended and the failed ones deleted score nothing, since grading keeps
only records signed with the run's key and counts a collected test without a record as
failed; the key's holders are non-dumpable meanwhile, so a process of the same user cannot
read it from them (:mod:`pagedsim.labs.signing`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pagedsim.labs import get_lab, grade, grading, signing
from pagedsim.labs.meta import RESULTS_ENV
from pagedsim.labs.prefork import Prefork
from pagedsim.labs.release import stripped_files

ROOT = Path(__file__).resolve().parents[2]
LAB_DIR = ROOT / "labs"
LINUX = sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(not (LAB_DIR / "lab1_budget").is_dir() or
                                not hasattr(os, "fork"), reason="needs lab 1 and os.fork")


class _Forger:
    """A runner that runs the graders, then does to the results file what an unconfined
    student's process could: every collected test given a "passed" record, the failed
    records deleted. It keeps the file as it was before, and whether this process was
    dumpable while the graders ran."""

    def __init__(self, server: Prefork) -> None:
        self.server = server
        self.original: list[str] = []
        self.dumpable_during: bool | None = None

    def run(self, args: list[str], cwd: str, env: dict[str, str], log: str,
            timeout_s: float) -> int:
        self.dumpable_during = signing.dumpable()
        status = self.server.run(args, cwd, env, log, timeout_s)
        path = Path(env[RESULTS_ENV])
        self.original = path.read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in self.original]
        kept = [r for r in records if r.get("outcome") != "failed"]
        collected = next(r for r in records if r.get("kind") == "collected")
        forged = [{"kind": "test", "nodeid": nodeid, "marker": marker, "outcome": "passed",
                   "text": "", "duration": 0.0, "mac": "0" * 64}
                  for nodeid, marker in collected["tests"].items()]
        path.write_text("".join(json.dumps(r) + "\n" for r in kept + forged), encoding="utf-8")
        return status


def test_forged_and_deleted_records_score_nothing(tmp_path: Path) -> None:
    lab = get_lab(1, LAB_DIR)
    folder = tmp_path / lab.folder
    folder.mkdir()
    for name, text in stripped_files(lab).items():
        (folder / name).write_text(text, encoding="utf-8")
    before = signing.dumpable()
    with Prefork() as server:
        forger = _Forger(server)
        result = grade(1, path=folder, labs_dir=LAB_DIR, runner=forger)
    assert result.score == 0, result.table()
    assert all(t.tests >= 1 and t.passed == 0 for t in result.tasks), result.table()
    assert "were not the graders' (not signed) and were ignored" in result.message
    # Every test failed on the starter; with its records deleted, it still counts.
    assert "no result was recorded" in result.tasks[0].output
    # The same file read without the signatures gives full marks: the forgery is real.
    records = [json.loads(line) for line in forger.original]
    tampered = [r for r in records if r.get("outcome") != "failed"] + [
        {"kind": "test", "nodeid": n, "marker": m, "outcome": "passed", "text": ""}
        for n, m in next(r for r in records if r.get("kind") == "collected")["tests"].items()]
    unchecked = grading._score(lab, lab.tasks, "forged", tampered, "", 0.0)
    assert unchecked.score == lab.max_score, unchecked.table()
    # This process was non-dumpable while the graders ran, and is as it was after.
    if LINUX:
        assert forger.dumpable_during is False and signing.dumpable() == before


# A process and its child, both of one non-root user (nobody when run as root): the child
# reads its parent's /proc/<pid>/environ while the parent is dumpable, then after the
# parent made itself non-dumpable as the graders do (pagedsim.labs.signing).
_SAME_USER = r'''
import ctypes, importlib.util, os, sys
spec = importlib.util.spec_from_file_location("signing", sys.argv[1])
signing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(signing)
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again (a change of user clears it)
go_r, go_w = os.pipe()
done_r, done_w = os.pipe()
if os.fork() == 0:
    seen = []
    for _ in range(2):
        os.read(go_r, 1)
        try:
            open(f"/proc/{os.getppid()}/environ", "rb").read()
            seen.append("read")
        except OSError as exc:
            seen.append(type(exc).__name__)
        os.write(done_w, b".")
    print(" ".join(seen), flush=True)
    os._exit(0)
os.write(go_w, b".")
os.read(done_r, 1)
signing.make_undumpable()
os.write(go_w, b".")
os.read(done_r, 1)
os.wait()
'''


@pytest.mark.skipif(not LINUX, reason="PR_SET_DUMPABLE and /proc are Linux's")
def test_a_non_dumpable_process_hides_its_environment_from_its_own_user() -> None:
    proc = subprocess.run([sys.executable, "-c", _SAME_USER,
                           str(ROOT / "pagedsim" / "labs" / "signing.py")],
                          capture_output=True, text=True, timeout=60, cwd="/")
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("cannot become a non-root user here")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["read", "PermissionError"], proc.stdout


def test_a_signed_record_is_bound_to_its_key_and_content() -> None:
    key, other = b"k" * 32, b"o" * 32
    record = signing.sign({"kind": "test", "nodeid": "t", "outcome": "failed"}, key)
    assert signing.signed(record, key) and not signing.signed(record, other)
    assert not signing.signed({**record, "outcome": "passed"}, key)
    assert not signing.signed({k: v for k, v in record.items() if k != "mac"}, key)
