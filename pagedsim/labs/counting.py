"""Counting comparisons: a machine-independent check that a queue operation is O(1).

A wall-clock limit passes a slow solution on a fast machine and fails a fast one on a
loaded machine. Lab 5's graders instead fill the student's free queue with
:class:`CountedBlock` ids (ints that count every ``==``, ``<``... they take part in) and
read :func:`comparisons` before and after: a dict-backed queue removes a block with one
comparison at most, a list scans up to every block before it.

When graded, the blocks live in the student's process (:mod:`pagedsim.labs.remote`); the
count is read from there.
"""

from __future__ import annotations

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
    """Comparisons counted so far, in the student's process when one runs their code."""
    from . import plugin

    worker = plugin._state.get("worker")
    return int(worker.request("count")) if worker is not None else _COUNT[0]
