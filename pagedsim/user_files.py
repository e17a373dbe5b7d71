"""Reading files a user names (trace files, model configs and their weights index): regular
files only, lines of bounded length, JSON of bounded size and depth with each key once.

A path can name things that are no file to read: a FIFO (opening it waits for a writer,
reading it for data, forever), a device (``/dev/zero`` never ends), a directory. They are
refused at once, by what ``fstat`` says of the opened descriptor (opened non-blocking, so
that a FIFO without a writer cannot hang the open itself). A regular file can still hold
one endless line (1 GiB without a newline): lines are read at most
:data:`MAX_LINE_CHARS` characters at a time, and a longer line is an error naming it,
not a ``MemoryError``.

A whole JSON file (a Hugging Face ``config.json``, a ``model.safetensors.index.json``) is
read by :func:`read_json_file`: a regular file of at most a given size, UTF-8 text without
NUL bytes, nested at most a given depth (Python's parser recurses: 100,000 deep raises
``RecursionError``), each key of an object given once (``json`` keeps the last silently),
and no ``NaN``, ``Infinity`` or float that overflows to infinity. Every refusal is a
:class:`JsonFileError` (a ``ValueError``) saying what is wrong; the caller names the file.
"""

from __future__ import annotations

import json
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


def json_depth(text: str) -> int:
    """How deep ``{`` and ``[`` nest in ``text`` (brackets inside JSON strings ignored)."""
    depth = most = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
            most = max(most, depth)
        elif char in "}]":
            depth -= 1
    return most


class DuplicateKeyError(ValueError):
    """A JSON object names the same key twice (``json`` would keep the last silently)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An ``object_pairs_hook`` for ``json.loads``: the object, or
    :class:`DuplicateKeyError` naming the first key given twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


class JsonFileError(ValueError):
    """A file that is not the JSON :func:`read_json_file` takes; ``str()`` says what is
    wrong, without the path (the caller names the file and what it is for)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # 1e400: json gives inf, unsaid
        raise JsonFileError(f"number {text[:40]} is too large for a float")
    return value


def _no_constant(name: str) -> object:
    raise JsonFileError(f"{name} is not JSON (a number must be finite)")


def read_json_file(path: str | os.PathLike[str], max_bytes: int, max_depth: int) -> object:
    """The JSON value in file ``path``, read as the module docstring says: at most
    ``max_bytes`` bytes, nested at most ``max_depth`` deep. Raises
    :class:`NotRegularFileError` (a FIFO, ``/dev/zero``, a directory: at once, never
    read), ``OSError`` (cannot be opened) or :class:`JsonFileError`."""
    with open_regular(os.fspath(path), binary=True) as file:
        size = os.fstat(file.fileno()).st_size
        if size > max_bytes:
            raise JsonFileError(f"{size:,} bytes, more than the {max_bytes:,} this reader "
                                "takes")
        raw = file.read(max_bytes + 1)  # + 1: a file that grew since fstat is still caught
    if len(raw) > max_bytes:
        raise JsonFileError(f"more than the {max_bytes:,} bytes this reader takes")
    if not raw.strip():
        raise JsonFileError(f"empty ({len(raw):,} bytes of whitespace or none), not JSON")
    nul = raw.find(b"\x00")
    if nul >= 0:  # JSON text never holds a NUL: a binary file, or one of zeros
        share = raw.count(0) / len(raw)
        raise JsonFileError(f"a binary file, not JSON text: {len(raw):,} bytes, "
                            f"{share:.0%} of them NUL (0x00), the first at byte offset {nul:,}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise JsonFileError(f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at byte offset "
                            f"{exc.start:,}") from None
    # Counting brackets is fast; the exact depth (a Python loop) only when it could be over.
    if text.count("{") + text.count("[") > max_depth:
        depth = json_depth(text)
        if depth > max_depth:
            raise JsonFileError(f"JSON nested {depth:,} deep, more than the {max_depth} "
                                "this file may have")
    try:
        return json.loads(text, object_pairs_hook=no_duplicate_keys,
                          parse_float=_finite_float, parse_constant=_no_constant)
    except DuplicateKeyError as exc:
        raise JsonFileError(f"key {exc.key!r} given twice in one object; give each key once "
                            "(which value was meant?)") from None
    except JsonFileError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonFileError(f"not valid JSON: {exc.msg} at line {exc.lineno}, column "
                            f"{exc.colno}") from None
    except ValueError as exc:  # an integer of over 4,300 digits, which json refuses
        raise JsonFileError(f"not valid JSON ({str(exc).split(':')[0]})") from None
