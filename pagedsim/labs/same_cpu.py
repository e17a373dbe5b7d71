"""Hold a grader's requesting thread and its worker on one CPU: their requests are a
ping-pong.

Every request to the student's code (:mod:`pagedsim.labs.remote`) is synchronous: the
grader writes it and waits, the worker answers and waits. When the two wait on different
CPUs, every message wakes a sleeping CPU, and on a virtual machine waking one costs far
more than the message itself (on this project's 2-core CI machine, an echo of 20 bytes
between two processes took about 20 times as long across CPUs as on one). Only one of the
two runs at a time, so holding both on one CPU loses no parallelism; the labs' timings
(labs/INSTRUCTORS.md) show what it saves. :meth:`remote.Worker._start` holds the
requesting thread on the CPU it runs on (:func:`hold_here`) just before it starts the
worker, which inherits the hold; :meth:`remote.Worker.close` gives the thread its CPUs
back (:meth:`Held.release`). Not for the kernel labs (their config's ``same_cpu`` is
False): a worker running torch may use several CPUs at once. Where the platform has no
CPU affinity (macOS, Windows), nothing is held.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass


def current_cpu() -> int | None:
    """The CPU the calling thread runs on now (Linux: field 39 of
    ``/proc/thread-self/stat``), or None where that cannot be read."""
    try:
        with open("/proc/thread-self/stat", "rb") as f:
            stat = f.read()
        # The command name (field 2, in parentheses) may hold spaces: count after it.
        return int(stat[stat.rindex(b")") + 2:].split()[36])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(slots=True)
class Held:
    """A thread held on one CPU: ``thread_id`` (its native id) and the CPUs it had."""

    thread_id: int
    cpus: set[int]

    def release(self) -> None:
        """Give the thread back the CPUs it had."""
        try:
            os.sched_setaffinity(self.thread_id, self.cpus)
        except OSError:
            pass  # the thread has ended


def hold_here() -> Held | None:
    """Hold the calling thread on the CPU it runs on now (threads and processes it
    starts from now on inherit the hold); None where that cannot be done."""
    cpu = current_cpu()
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    thread_id = threading.get_native_id()
    try:
        cpus = os.sched_getaffinity(thread_id)
        os.sched_setaffinity(thread_id, {cpu})
    except OSError:
        return None
    return Held(thread_id, cpus)
