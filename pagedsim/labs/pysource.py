"""Python source parsed behind one lock.

CPython 3.11's parser keeps a process-wide recursion counter for building syntax trees,
so two threads parsing at once can fail with ``SystemError: AST constructor recursion
depth mismatch`` (seen when the test suite grades several labs from threads). Every
parse in the lab machinery goes through :func:`parse`.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """:func:`ast.parse` of ``source``, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename)
