"""What a process and everything below it use, as Linux counts it in ``/proc``.

The worker's own limits (:mod:`pagedsim.labs.sandbox`: ``RLIMIT_DATA``, ``RLIMIT_CPU``,
``RLIMIT_FSIZE``) hold per process and per file: each child it forks gets its own, a
shared mapping is no data, and many files each under the cap fill a disk. So the graders'
process also watches the whole tree (:class:`pagedsim.labs.remote.Worker` polls
:func:`usage`) and ends the worker when the tree together passes a limit:

- memory: the proportional set size (``Pss`` of ``smaps_rollup``: a page shared by n
  processes counts 1/n to each, so the sum is what the tree holds, shared mappings and
  copy-on-write pages included, each once);
- CPU: user and system time, each process's waited-for children's included;
- disk: the bytes of the files under the worker's folder (where Landlock keeps its writes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: Files and folders under the worker's folder past which its size is not summed further
#: (the walk stays cheap; that many is over the limit anyway).
MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class Usage:
    """What a process tree uses: ``processes`` (live ones), ``cpu_s`` (CPU seconds) and
    ``memory_bytes`` (proportional set size, bytes)."""

    processes: int
    cpu_s: float
    memory_bytes: int


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, CPU clock ticks, state letter) of ``pid``; None once it ended."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces
    except OSError:
        return None
    # state, ppid ... utime, stime, cutime, cstime (fields 3, 4, 14-17 of proc(5)).
    return int(fields[1]), sum(int(fields[i]) for i in (11, 12, 13, 14)), fields[0]


def _children(pid: int) -> list[int] | None:
    """The children of ``pid``, from each of its threads' ``children`` file (None where
    the kernel has no such file)."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found  # ended meanwhile
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None  # no CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return found


def _below_by_scan(root: int) -> list[int]:
    """:func:`below` by reading every process's parent (kernels without ``children``)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        stat = _stat(int(name)) if name.isdigit() else None
        if stat is not None:
            children.setdefault(stat[0], []).append(int(name))
    found, stack = [], list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack += children.get(pid, ())
    return found


def below(root: int) -> list[int]:
    """The pids of every descendant of ``root`` (not ``root`` itself)."""
    found, stack = [], [root]
    while stack:
        children = _children(stack.pop())
        if children is None:
            return _below_by_scan(root)
        found += children
        stack += children
    return found


def cpu_ticks_below(root: int) -> int:
    """CPU clock ticks of every descendant of ``root``."""
    return sum(stat[1] for stat in map(_stat, below(root)) if stat is not None)


def usage(root: int) -> Usage:
    """What ``root`` and every process below it use now (zombies: their CPU time only)."""
    stats = {pid: _stat(pid) for pid in [root, *below(root)]}
    known = {pid: stat for pid, stat in stats.items() if stat is not None}
    live = [pid for pid, stat in known.items() if stat[2] != "Z"]
    return Usage(len(live), sum(s[1] for s in known.values()) / os.sysconf("SC_CLK_TCK"),
                 sum(map(_pss_bytes, live)))


def _pss_bytes(pid: int) -> int:
    """A process's proportional set size (bytes; its resident size where the kernel has
    no ``smaps_rollup``, before 4.14; 0 once it ended)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def folder_bytes(folder: Path | str) -> int:
    """Bytes of the files under ``folder`` (links not followed); -1 once more than
    :data:`MAX_ENTRIES` entries were seen."""
    total, seen = 0, 0
    stack = [str(folder)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    return -1
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue
    return total
