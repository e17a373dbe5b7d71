"""Reading files a user names (trace files): regular files only, lines of bounded length.

A path can name things that are no file to read: a FIFO (opening it waits for a writer,
reading it for data, forever), a device (``/dev/zero`` never ends), a directory. They are
refused at once, by what ``fstat`` says of the opened descriptor (opened non-blocking, so
that a FIFO without a writer cannot hang the open itself). A regular file can still hold
one endless line (1 GiB without a newline): lines are read at most
:data:`MAX_LINE_CHARS` characters at a time, and a longer line is an error naming it,
not a ``MemoryError``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import IO

#: Longest line a trace file may have, in characters (1 MiB). A trace row is a few dozen
#: characters; a Mooncake row lists one hash id per 512 prompt tokens, so even a
#: 1M-token prompt's row is about 15 kB.
MAX_LINE_CHARS = 1 << 20


def file_kind(mode: int) -> str:
    """What a ``st_mode`` that is not a regular file names, in words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class NotRegularFileError(ValueError):
    """The path names a directory, FIFO, device or socket (``kind`` says which)."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path}: is {kind}, not a regular file")
        self.path, self.kind = path, kind


def open_regular(path: str, binary: bool = False) -> IO:
    """Open ``path`` for reading (UTF-8 text with an optional BOM, newlines kept as
    written; or bytes): raises :class:`NotRegularFileError` at once for anything but a
    regular file, ``OSError`` if it cannot be opened."""
    nonblock = getattr(os, "O_NONBLOCK", 0)  # POSIX; Windows has no FIFOs to wait on
    fd = os.open(path, os.O_RDONLY | nonblock)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, file_kind(mode))
        if nonblock:
            os.set_blocking(fd, True)
        if binary:
            return open(fd, "rb")
        return open(fd, encoding="utf-8-sig", newline="")  # -sig: drop an Excel BOM
    except BaseException:
        os.close(fd)
        raise


class LineTooLongError(ValueError):
    """A line longer than the limit; ``line`` is its 1-based number."""

    def __init__(self, line: int, limit: int) -> None:
        super().__init__(f"line longer than {limit:,} characters; no trace row is that long "
                         "(is this a trace file?)")
        self.line, self.limit = line, limit


def bounded_lines(file: IO, limit: int = MAX_LINE_CHARS, first_line: int = 1
                  ) -> Iterator:
    """The lines of ``file`` (text or bytes, line ends kept), each read at most ``limit``
    characters at a time: a longer line raises :class:`LineTooLongError` instead of being
    read whole. ``first_line`` is the number of the first line yielded."""
    number = first_line
    while True:
        text = file.readline(limit + 1)
        if not text:
            return
        if len(text) > limit and text[-1:] not in ("\n", "\r", b"\n", b"\r"):
            raise LineTooLongError(number, limit)
        yield text
        number += 1
