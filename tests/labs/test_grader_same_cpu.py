"""A grader's requesting thread and its worker share one CPU while the worker lives
(pagedsim.labs.same_cpu): every request is a round trip, and on a virtual machine a
round trip across CPUs costs many times one on a single CPU. The hold starts with the
worker, the worker inherits it, and the thread gets its CPUs back when the worker ends;
the kernel labs' workers (torch) are not held."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from pagedsim.labs import get_lab
from pagedsim.labs.same_cpu import current_cpu, hold_here

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or current_cpu() is None
    or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux CPU affinity and two CPUs or more")


def _mine() -> set[int]:
    return os.sched_getaffinity(threading.get_native_id())


def test_the_current_cpu_is_one_this_thread_may_run_on() -> None:
    assert current_cpu() in _mine()


def test_a_hold_keeps_the_thread_on_one_cpu_until_released() -> None:
    before = _mine()
    held = hold_here()
    assert held is not None
    try:
        assert _mine() == {current_cpu()} and held.cpus == before
    finally:
        held.release()
    assert _mine() == before


@pytest.fixture
def worker_for(tmp_path: Path):
    """A function making a lab 1 worker (``same_cpu`` as given), each closed at the end."""
    from pagedsim.labs.grading import _worker_config
    from pagedsim.labs.remote import Worker

    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "budget_lab.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    made = []

    def make(same_cpu: bool) -> Worker:
        config = {**_worker_config(get_lab(1, LABS), folder, 60), "same_cpu": same_cpu}
        made.append(Worker(config))
        return made[-1]

    yield make
    for worker in made:
        worker.close()


@pytest.mark.skipif(not (LABS / "lab1_budget").is_dir(), reason="needs lab 1")
def test_the_worker_runs_on_the_requesting_threads_cpu_while_it_lives(worker_for) -> None:
    before = _mine()
    worker = worker_for(True)
    assert worker.request("import", "budget_lab").f() == 1
    cpu = current_cpu()
    assert _mine() == {cpu}
    assert os.sched_getaffinity(worker.pid) == {cpu}
    worker.close()
    assert _mine() == before
    # A worker that ends (a restart) is held again, on the CPU of the moment.
    assert worker.request("import", "budget_lab").f() == 1
    assert os.sched_getaffinity(worker.pid) == _mine() == {current_cpu()}


@pytest.mark.skipif(not (LABS / "lab1_budget").is_dir(), reason="needs lab 1")
def test_a_worker_told_not_to_is_not_held(worker_for) -> None:
    before = _mine()
    worker = worker_for(False)
    assert worker.request("import", "budget_lab").f() == 1
    assert _mine() == before and os.sched_getaffinity(worker.pid) == before


def test_the_kernel_labs_workers_are_not_held() -> None:
    """A worker running torch may use several CPUs at once: labs 6 and 7 are not held."""
    from pagedsim.labs.grading import _worker_config
    from pagedsim.labs.requirements import lab_requirements

    labs = [get_lab(n, LABS) for n in range(1, 9) if any(LABS.glob(f"lab{n}_*"))]
    if not labs:
        pytest.skip("needs the labs")
    for lab in labs:
        config = _worker_config(lab, LABS, 60)
        assert config["same_cpu"] is not lab_requirements(lab)[1], lab.id
    assert any(not _worker_config(lab, LABS, 60)["same_cpu"] for lab in labs)
