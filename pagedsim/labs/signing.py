"""Records the student's process cannot forge, even where it can write the results file.

Where the worker is confined (Landlock, or the user ``nobody`` under root) it cannot open
the graders' results file. A non-root grader on a kernel without Landlock runs it with the
grader's own user, which may write that file: append "passed" records, or delete the
failed ones. So every record :mod:`pagedsim.labs.plugin` writes carries an HMAC-SHA256
(:func:`sign`) under a key that :func:`pagedsim.labs.grade` makes for the run and hands to
the graders' pytest in its environment; grading keeps only the records whose MAC checks
(:func:`signed`), and the plugin's list of every collected test lets a test whose record
is missing count as failed.

The key is in two processes: the graders' pytest (which drops it from its environment)
and the grading one. :func:`no_dumps` makes both non-dumpable while the run lasts, so that
another process of the same user can neither read their memory, environment or open files
through ``/proc`` nor ``ptrace`` them (Linux; elsewhere it does nothing).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator

#: Environment variable: the run's key (hex), for :mod:`pagedsim.labs.plugin`.
KEY_ENV = "PAGEDSIM_LABS_KEY"
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4
_lock = threading.Lock()
_holders = [0, 1]  # grading runs under way in this process; dumpable before the first


def _mac(record: dict, key: bytes) -> str:
    body = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True)
    return hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()


def sign(record: dict, key: bytes) -> dict:
    """``record`` with its MAC under ``key``."""
    return {**record, "mac": _mac(record, key)}


def signed(record: object, key: bytes) -> bool:
    """Does ``record`` carry a valid MAC under ``key``?"""
    return isinstance(record, dict) and isinstance(record.get("mac"), str) and \
        hmac.compare_digest(record["mac"], _mac(record, key))


def _prctl(option: int, value: int = 0) -> int:
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0))
    except (OSError, AttributeError):  # not Linux
        return -1


def dumpable() -> bool | None:
    """Is this process dumpable (None where that cannot be asked: not Linux)?"""
    state = _prctl(_PR_GET_DUMPABLE)
    return None if state < 0 else state == 1


def make_undumpable() -> None:
    """Make this process non-dumpable for good (the graders' pytest process)."""
    _prctl(_PR_SET_DUMPABLE, 0)


@contextlib.contextmanager
def no_dumps() -> Iterator[None]:
    """This process non-dumpable while the block runs (nested and threaded runs
    included: the state it had comes back when the last one ends)."""
    with _lock:
        if _holders[0] == 0:
            _holders[1] = 1 if dumpable() else 0
            make_undumpable()
        _holders[0] += 1
    try:
        yield
    finally:
        with _lock:
            _holders[0] -= 1
            if _holders[0] == 0 and _holders[1]:
                _prctl(_PR_SET_DUMPABLE, 1)
