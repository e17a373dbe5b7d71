"""The graded code's whole process tree (issue 37).

Nothing it starts outlives its grade: a sleeper forked into a session of its own and
orphaned, and a process that keeps re-forking to a new pid, both end with the run, also
when the graders are stopped at the run's time limit (then the plugin's own cleanup never
runs). The worker is the first process of a PID namespace of its own
(:func:`pagedsim.labs.sandbox._own_processes`): when it ends, the kernel ends every
process in it.

Its limits hold for the tree, not per process: memory in a shared mapping or spread over
forked children, and files each under the per-file cap, are stopped together
(:mod:`pagedsim.labs.tree`, watched by :class:`pagedsim.labs.remote.Worker`).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import pytest

from pagedsim.labs import grade, grading

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

#: The graded code: a sleeper (forked twice, in a new session, orphaned) and a re-forker
#: (a new pid every generation, each parent gone at once), both named by a tag (their
#: ``comm``) so that the test can look for them.
_TOY = '''\
import ctypes
import os
import time


def value():
    # BEGIN SOLUTION lab 1.1: one
    return 1
    # END SOLUTION


def _named(tag):
    ctypes.CDLL(None).prctl(15, tag.encode(), 0, 0, 0)  # PR_SET_NAME: /proc/<pid>/comm


def sleeper(tag):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            _named(tag)
            time.sleep(600)
        os._exit(0)
    return 1


def reforker(tag):
    if os.fork() == 0:
        os.setsid()
        _named(tag)
        while True:  # a new pid every generation, its parent gone at once
            if os.fork():
                os._exit(0)
            time.sleep(0.02)  # (slow enough that the test sees every generation)
    return 1
'''

_TESTS = '''\
import time

import adapters
import pytest

TAG = {tag!r}


@pytest.mark.lab1_1
def test_starts_a_sleeper():
    assert adapters.toy.sleeper(TAG) == 1


@pytest.mark.lab1_2
def test_starts_a_reforker():
    assert adapters.toy.reforker(TAG) == 1
    time.sleep({hang_s})  # the graders themselves hang past the run's time limit
'''


def _lab(root: Path, tag: str, hang_s: float) -> Path:
    lab = root / "lab1_toy"
    lab.mkdir(parents=True)
    (lab / "lab.json").write_text(json.dumps({
        "id": 1, "title": "Toy", "hours": 1, "notebook": "notebooks/01_kv_cache.ipynb",
        "student_files": ["toy.py"], "forbidden_imports": [],
        "tasks": [{"marker": "lab1_1", "title": "one", "points": 1},
                  {"marker": "lab1_2", "title": "two", "points": 1}]}))
    (lab / "toy.py").write_text(_TOY)
    (lab / "adapters.py").write_text("import toy\n")
    (lab / "test_lab1.py").write_text(_TESTS.format(tag=tag, hang_s=hang_s))
    return root


def _alive(tag: str) -> list[int]:
    """Processes named ``tag`` (zombies aside: they hold no memory and run nothing)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            name, rest = (proc / "stat").read_text().rsplit(")", 1)
            if name.split("(", 1)[1] == tag and rest.split()[0] != "Z":
                found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found


def _kill(pids: list[int]) -> None:
    """SIGKILL the process groups of ``pids`` (a re-forker's new pid stays in its group)."""
    import os
    import signal

    for pid in pids:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.parametrize("hang_s", [0, pytest.param(600, marks=pytest.mark.slow)])
def test_a_sleeper_and_a_reforker_end_with_the_grade(tmp_path: Path, hang_s: float) -> None:
    """hang_s 0: the run ends normally; 600: the graders are stopped at 15 s."""
    tag = f"pgs{uuid.uuid4().hex[:12]}"  # comm: 15 characters at most
    result = grade(1, labs_dir=_lab(tmp_path, tag, hang_s), timeout_s=15)
    assert result.tasks[0].passed == 1, result.table()
    if hang_s:
        assert "ran longer than 15 s" in result.message, result.table()
    deadline = time.monotonic() + 3  # the kernel's kill of a namespace is asynchronous
    while (left := _alive(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    _kill(left)  # (this machine stays clean should the test fail)
    assert not left, f"{len(left)} process(es) of the graded code outlived the grade"


_HOGS = '''\
import mmap
import os
import time

MiB = 2**20


def value():
    # BEGIN SOLUTION lab 1.1: one
    return 1
    # END SOLUTION


def shared(mib):
    """A shared mapping (no data segment) written in full."""
    area = mmap.mmap(-1, mib * MiB, flags=mmap.MAP_SHARED)
    for i in range(0, mib * MiB, 4096):
        area[i] = 1
    time.sleep(5)
    return 1


def children(count, mib):
    """``count`` forked children, each writing ``mib`` MiB of its own (under its own data
    limit), all alive together."""
    for _ in range(count):
        if os.fork() == 0:
            data = bytearray(mib * MiB)
            for i in range(0, len(data), 4096):
                data[i] = 1
            time.sleep(30)
            os._exit(0)
    time.sleep(5)
    return 1


def files(count, mib):
    """``count`` files of ``mib`` MiB each in its folder (each under the per-file cap)."""
    for i in range(count):
        with open(f"filler{i}.bin", "wb") as f:
            f.write(os.urandom(mib * MiB))
    time.sleep(2)
    return 1
'''

_HOG_TESTS = '''\
import adapters
import pytest


@pytest.mark.lab1_1
def test_shared_mapping():
    assert adapters.toy.shared(384) == 1


@pytest.mark.lab1_1
def test_children():
    assert adapters.toy.children(4, 64) == 1


@pytest.mark.lab1_2
def test_small_is_fine():
    assert adapters.toy.value() == 1


@pytest.mark.lab1_2
def test_files():
    assert adapters.toy.files(8, 8) == 1
'''


def test_memory_and_disk_are_limited_over_the_tree(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a 192 MiB memory and a 32 MiB disk limit: a 384 MiB shared mapping, four
    children of 64 MiB each, and eight 8 MiB files are each stopped, saying which limit;
    a call within the limits passes."""
    monkeypatch.setattr(grading, "WORKER_MEMORY_BYTES", 192 * 2**20)
    monkeypatch.setattr(grading, "WORKER_DISK_BYTES", 32 * 2**20)
    root = _lab(tmp_path, "unused", 0)
    (root / "lab1_toy" / "toy.py").write_text(_HOGS)
    (root / "lab1_toy" / "test_lab1.py").write_text(_HOG_TESTS)
    result = grade(1, labs_dir=root, timeout_s=120)
    memory, disk = result.tasks
    assert (memory.passed, disk.passed, disk.tests) == (0, 1, 2), result.table()
    for name in ("test_shared_mapping", "test_children"):
        line = next(x for x in memory.output.splitlines() if name in x)
        assert "of memory together, over the limit of 0.1875 GiB" in line, line
    assert "over the limit of 32 MiB, and was stopped" in disk.output, disk.output
