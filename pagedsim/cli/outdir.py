"""``--out``: the folder a command writes, made ready before any simulation starts.

:func:`prepare_out` refuses what could only fail after the run (which can take minutes):
a path that is a file or lies under one, a dangling symbolic link, a folder that cannot
be created (``/proc/x``) or written in, and, inside the folder, a directory, dangling
link or read-only file where one of the command's output files goes (a folder named
``compare_summary.csv``). It creates the folder and writes and removes a probe file, so
"writable" is tested, not guessed from permission bits (which say yes to root even on
read-only file systems). Every error is one line naming ``--out`` and the path.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path

from .base import CliError


def _fail(flag: str, message: str) -> CliError:
    return CliError(f"argument {flag}: {message}")


def prepare_out(out: str, outputs: Sequence[str], flag: str = "--out") -> Path:
    """Check and create the folder ``out`` for files named by the glob patterns
    ``outputs`` (``compare_summary.csv``, ``compare_timeline_*.png``); returns it.

    Paths are shown whole (not cut short like other values): a path is what the user
    needs to see to find the file in the way.
    """
    path = Path(out)
    if path.is_symlink() and not path.exists():
        raise _fail(flag, f"{out!r} is a symbolic link to {os.readlink(path)!r}, which does "
                    "not exist")
    absolute = path.absolute()
    existing = next(p for p in (absolute, *absolute.parents) if p.exists())
    if not existing.is_dir():
        what = "exists" if existing == absolute else f"is under the file {str(existing)!r}"
        raise _fail(flag, f"{out!r} {what} and is not a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise _fail(flag, f"cannot create the folder {out!r}: {exc.strerror or exc}") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".pagedsim-write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _fail(flag, f"cannot write in {out!r}: {exc.strerror or exc}") from None
    with os.scandir(path) as entries:
        for entry in entries:
            if not any(fnmatch(entry.name, pattern) for pattern in outputs):
                continue
            where = os.path.join(out, entry.name)
            if entry.is_symlink() and not os.path.exists(entry.path):
                problem = "is a dangling symbolic link"
            elif entry.is_dir():
                problem = "is a directory"
            elif not entry.is_file():
                problem = "is not a regular file"
            elif not os.access(entry.path, os.W_OK):
                problem = "is read-only"
            else:
                continue
            raise _fail(flag, f"{where!r} {problem}, where this command writes a file; move "
                        f"it away or choose another {flag}")
    return path
