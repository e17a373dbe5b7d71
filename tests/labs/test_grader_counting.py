"""Lab 5's O(1) check against a submission that forges its comparison count (issue 21).

The graders count the comparisons of block ids in the student's process
(:func:`pagedsim.labs.counting.comparisons`), where the student's code can reset the
count. The cheat is lab 5's released starter with a list-backed free queue (every
removal a scan) that puts the count back after each removal, and nothing else: it earns
points only if the constant-time test passes. Graded with that test's count alone, it
does (:func:`test_the_count_alone_is_fooled`); with the CPU time the graders read from
the operating system (:func:`pagedsim.labs.counting.cpu_seconds`), it scores 0, locally
and through ``run_autograder``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pagedsim.labs import build_autograder, get_lab, grade
from pagedsim.labs.release import stripped_files

ROOT = Path(__file__).resolve().parents[2]
LAB_DIR = ROOT / "labs"
pytestmark = pytest.mark.skipif(not (LAB_DIR / "lab5_prefix").is_dir() or
                                not sys.platform.startswith("linux"),
                                reason="needs lab 5 and Linux's /proc")
TEST = "test_free_queue_remove_and_append_take_constant_time"

CHEAT = '''
import pagedsim.labs.counting as _counting


class FreeQueue(FreeQueue):
    """A list: remove scans it (O(n)); the comparisons it makes are taken off the count."""

    def __init__(self, blocks):
        self._blocks = list(blocks)

    def __len__(self):
        return len(self._blocks)

    def popleft(self):
        return self._blocks.pop(0)

    def append(self, block):
        self._blocks.append(block)

    def remove(self, block):
        made = _counting._COUNT[0]
        self._blocks.remove(block)
        _counting._COUNT[0] = made
'''


#: The same list-backed queue, its list kept in a forked helper process the worker never
#: waits for (whose CPU time no ``cutime`` of the worker holds), fed plain ints through a
#: pipe (so no counted block id is ever compared).
HELPER_CHEAT = '''
import os as _os


def _int8(value):
    return int(value).to_bytes(8, "little", signed=True)


class FreeQueue(FreeQueue):
    """A list in a helper process: remove scans it there (O(n)), out of the worker."""

    def __init__(self, blocks):
        blocks = [int(b) for b in blocks]  # plain ints: no comparison is counted
        self._n = len(blocks)
        requests, replies = _os.pipe(), _os.pipe()
        if _os.fork() == 0:
            incoming = _os.fdopen(requests[0], "rb")
            outgoing = _os.fdopen(replies[1], "wb", buffering=0)
            while True:
                message = incoming.read(9)
                if len(message) < 9:
                    _os._exit(0)
                block = int.from_bytes(message[1:], "little", signed=True)
                if message[:1] == b"r":
                    blocks.remove(block)
                elif message[:1] == b"a":
                    blocks.append(block)
                else:
                    outgoing.write(_int8(blocks.pop(0)))
        _os.close(requests[0])
        _os.close(replies[1])
        self._to = _os.fdopen(requests[1], "wb", buffering=0)
        self._from = _os.fdopen(replies[0], "rb")

    def __len__(self):
        return self._n

    def popleft(self):
        self._to.write(b"p" + _int8(0))
        self._n -= 1
        return int.from_bytes(self._from.read(8), "little", signed=True)

    def append(self, block):
        self._to.write(b"a" + _int8(block))
        self._n += 1

    def remove(self, block):
        self._to.write(b"r" + _int8(block))
        self._n -= 1
'''

#: A list-backed queue of plain ints, in the worker: it dodges the count (nothing counted
#: is compared), not the CPU time.
PLAIN_INT_CHEAT = '''
class FreeQueue(FreeQueue):
    """A list of plain ints: remove scans it (O(n)) with no counted comparison."""

    def __init__(self, blocks):
        self._blocks = [int(b) for b in blocks]

    def __len__(self):
        return len(self._blocks)

    def popleft(self):
        return self._blocks.pop(0)

    def append(self, block):
        self._blocks.append(int(block))

    def remove(self, block):
        self._blocks.remove(int(block))
'''


def _submission(root: Path, cheat_text: str) -> Path:
    folder = root / "lab5_prefix"
    folder.mkdir(parents=True)
    starter = stripped_files(get_lab(5, LAB_DIR))["prefix_lab.py"]
    (folder / "prefix_lab.py").write_text(starter + "\n" + cheat_text, encoding="utf-8")
    return folder


@pytest.mark.parametrize("which", ["helper", "plain-int"])
def test_a_list_out_of_sight_fails_the_constant_time_test(which: str, tmp_path: Path) -> None:
    """A list scanned in a forked helper, or compared as plain ints, fails on the CPU time
    of the worker's whole process tree (the helper's included)."""
    text = HELPER_CHEAT if which == "helper" else PLAIN_INT_CHEAT
    result = grade(5, path=_submission(tmp_path, text), labs_dir=LAB_DIR, tasks=["lab5_2"])
    line = _constant_time_test(result)
    assert "of CPU" in line and "not O(1)" in line, result.table()


@pytest.fixture(scope="module")
def cheat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A submission folder holding the cheat."""
    folder = tmp_path_factory.mktemp("counting") / "lab5_prefix"
    folder.mkdir()
    starter = stripped_files(get_lab(5, LAB_DIR))["prefix_lab.py"]
    (folder / "prefix_lab.py").write_text(starter + "\n" + CHEAT, encoding="utf-8")
    return folder


def _constant_time_test(result) -> str:
    (task,) = result.tasks
    return next((line for line in task.output.splitlines() if TEST in line), "")


def test_the_count_alone_is_fooled(cheat: Path, tmp_path: Path) -> None:
    """With lab 5's graders cut back to the count (the CPU check skipped), the cheat
    passes the constant-time test and scores: the forgery is real."""
    labs = tmp_path / "labs"
    shutil.copytree(LAB_DIR / "lab5_prefix", labs / "lab5_prefix")
    graders = labs / "lab5_prefix" / "test_lab5.py"
    text = graders.read_text(encoding="utf-8")
    check = "    if before is not None and after is not None:"
    assert text.count(check) == 1, "the CPU check of test_lab5.py moved: update this test"
    graders.write_text(text.replace(check, "    if False:"), encoding="utf-8")
    result = grade(5, path=cheat, labs_dir=labs, tasks=["lab5_2"])
    assert result.score > 0 and not _constant_time_test(result), result.table()


def test_a_forged_count_scores_zero(cheat: Path) -> None:
    result = grade(5, path=cheat, labs_dir=LAB_DIR, tasks=["lab5_2"])
    assert result.score == 0, result.table()
    # It failed on the CPU time, past the count it forged.
    assert "of CPU" in _constant_time_test(result) and "not O(1)" in _constant_time_test(
        result), result.table()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_forged_count_scores_zero_through_run_autograder(cheat: Path,
                                                          tmp_path: Path) -> None:
    root = tmp_path / "autograder"
    with zipfile.ZipFile(build_autograder(5, tmp_path / "ag.zip", labs_dir=LAB_DIR)) as zf:
        zf.extractall(root / "source")
    (root / "submission").mkdir(parents=True)
    shutil.copyfile(cheat / "prefix_lab.py", root / "submission" / "prefix_lab.py")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0, results["output"]
    assert any("of CPU" in t.get("output", "") for t in results["tests"]), results["tests"]
