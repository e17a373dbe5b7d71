"""Checks that a queue operation is O(1): a comparison count that says why a queue is
slow, and the CPU time the operating system counts, which the student's code cannot forge.

A wall-clock limit passes a slow solution on a fast machine and fails a fast one on a
loaded machine. Lab 5's graders first fill the student's free queue with
:class:`CountedBlock` ids (ints that count every ``==``, ``<``... they take part in) and
read :func:`comparisons` before and after: a dict-backed queue removes a block with one
comparison at most, a list scans up to every block before it. That count says *why* a
queue is slow, but when graded the blocks live in the student's process
(:mod:`pagedsim.labs.remote`) and so does the count: a submission can reset it, or give
the blocks' comparisons back to ``int``.

So the graders then check what the operating system counts: :func:`cpu_seconds`, the CPU
time of the student's processes (the worker and all it started), read from ``/proc`` by
the graders' own process. Removing
the last blocks of a long queue (and appending them again) must cost that process far
less than the list scans such removals would take, which :func:`list_scan_seconds`
measures here, in the graders' process, on the same machine (so the bound follows the
machine's speed). Neither number passes through the student's code.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from .tree import cpu_ticks_below

if TYPE_CHECKING:
    from .remote import Worker

#: Comparisons made by :class:`CountedBlock` in this process so far.
_COUNT = [0]


class CountedBlock(int):
    """A block id that counts the comparisons it takes part in."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        _COUNT[0] += 1
        return int(self) == other

    def __ne__(self, other: object) -> bool:
        _COUNT[0] += 1
        return int(self) != other

    def __lt__(self, other: int) -> bool:  # type: ignore[override]
        _COUNT[0] += 1
        return int(self) < other

    def __le__(self, other: int) -> bool:  # type: ignore[override]
        _COUNT[0] += 1
        return int(self) <= other

    def __gt__(self, other: int) -> bool:  # type: ignore[override]
        _COUNT[0] += 1
        return int(self) > other

    def __ge__(self, other: int) -> bool:  # type: ignore[override]
        _COUNT[0] += 1
        return int(self) >= other

    __hash__ = int.__hash__

    def __reduce__(self) -> tuple:
        return (CountedBlock, (int(self),))


def comparisons() -> int:
    """Comparisons counted so far, in the student's process when one runs their code (an
    answer of that process: see the module docstring)."""
    worker = _worker()
    return int(worker.request("count")) if worker is not None else _COUNT[0]


def cpu_seconds() -> float | None:
    """CPU seconds used so far by the processes that run the student's code, as Linux
    counts them (``/proc/<pid>/stat``, in clock ticks of 10 ms): every descendant of this
    process, each with its threads and the children it waited for; this process's own
    when the student's code runs here. None where it cannot be read (not Linux, or no
    worker started yet).

    Every descendant, not the worker alone: a helper the worker forks and never waits for
    spends its time in no ``cutime`` of the worker (a list scanned there passed the lab 5
    check). A helper orphaned from the worker still counts: the graders' process is a
    child subreaper (:mod:`pagedsim.labs.plugin`), so it becomes a child of this one."""
    worker = _worker()
    if worker is None:
        return time.process_time()
    if worker.pid is None or not os.path.isdir("/proc"):  # macOS: no /proc to read
        return None
    try:
        return cpu_ticks_below(os.getpid()) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None


def list_scan_seconds(num_blocks: int, scans: int) -> float:
    """CPU seconds this process takes for ``scans`` scans of a list of ``num_blocks`` ints
    to its last one (one comparison per element): what as many removals from the end of a
    list-backed queue of that length cost."""
    blocks = list(range(num_blocks))
    probe = int(str(num_blocks - 1))  # not the list's own object: each element compared
    start = time.process_time()
    for _ in range(scans):
        blocks.index(probe)
    return time.process_time() - start


def _worker() -> Worker | None:
    """The worker that runs the student's code in this grading run, if any."""
    from . import plugin

    return plugin._state.get("worker")
