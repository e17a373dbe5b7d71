"""Reading a trace file's rows for :mod:`pagedsim.workloads.traces`: the error type, strict field
parsers, CSV and JSONL row sources, and where a file stops being UTF-8.

Each field parser takes the text of one field and returns its value or raises a plain
``ValueError`` saying what is wrong; the row loop in ``traces`` adds the file, line,
column and value.

What a field may hold (both trace schemas, CSV and JSONL alike):

* **Integers** (lengths in tokens, ``n``, ``beam_width``, ``prefix_id``): ASCII digits
  ``0-9``, at most 18 of them, with an optional leading ``-`` (so that ``-4`` is reported
  as "must be >= 1", not as "not an integer"). Rejected although Python's ``int()``
  accepts them: ``1_000`` (digit grouping), ``+5``, ``١٠`` and every other non-ASCII digit.
  Also rejected: ``10.0`` and ``1e3``.
* **Decimal numbers** (``arrival_s``): an optional sign, ASCII digits with an optional
  decimal point, an optional exponent: ``0``, ``0.25``, ``.5``, ``3.``, ``1e-3``.
  Rejected although ``float()`` accepts them: ``1_0.5``, ``nan``, ``inf``, ``infinity``,
  non-ASCII digits.
* **Whitespace**: ASCII spaces and tabs around a CSV field are ignored, so a hand-written
  ``0.25, 20, 58`` loads (the header's column names have always been read that way).
  Any other whitespace around a field (a no-break space, an em space, ...), and any
  whitespace inside one (``1 000``), is an error.
"""

from __future__ import annotations

import codecs
import csv
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import date

from ..user_files import MAX_LINE_CHARS, LineTooLongError, bounded_lines, open_regular

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
PAGEDSIM_REQUIRED = ("arrival_s", "prompt_len", "output_len")
PAGEDSIM_OPTIONAL = ("n", "beam_width", "prefix_id")

_NO_VALUE = object()


def _short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (a bad field can be 100 kB)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = (f" ({len(value):,} {'characters' if isinstance(value, str) else 'bytes'})"
            if isinstance(value, (str, bytes)) else "")
    return f"{text[:limit]}...{size}"


class TraceError(ValueError):
    """A bad trace file or row; ``str()`` is one line naming file, line, column and value.

    ``line`` is 1-based, or ``None`` for a problem with the file as a whole.
    """

    def __init__(self, path: str, line: int | None, message: str, column: str | None = None,
                 value: object = _NO_VALUE) -> None:
        where = path if line is None else f"{path}: line {line}"
        if column is not None:
            where += f": column {column!r}"
        if value is not _NO_VALUE:
            message = f"{message} (value {_short_repr(value)})"
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.column, self.value = path, line, column, value


# ASCII only, spelled out: in a str pattern "\d" also matches "١" and every other
# Unicode decimal digit.
_INT = re.compile(r"-?[0-9]{1,18}")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# "2023-11-16 18:15:46.6805900": date, time, optional fraction of up to 9 digits.
_TIMESTAMP = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?")
_BLANKS = " \t"  # the only whitespace a field may carry around it


def _unpad(text: str) -> str:
    return text.strip(_BLANKS)


def parse_int(text: str) -> int:
    """An integer written in plain ASCII digits (see the module docstring); no range check."""
    # Fast path: the common field is bare digits; isascii() keeps out "١٠" etc.
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    stripped = _unpad(text)
    if _INT.fullmatch(stripped):
        return int(stripped)
    if stripped.isascii() and stripped.lstrip("-").isdigit():
        raise ValueError("integer too large (more than 18 digits)")
    if stripped == "":
        raise ValueError("empty, expected an integer")
    raise ValueError("not an integer in plain ASCII digits")


def parse_len(text: str) -> int:
    """A length in tokens (or ``n`` / ``beam_width``): an integer >= 1."""
    # parse_int's fast path inlined: two to three of these run per row.
    value = (int(text) if text.isascii() and text.isdigit() and len(text) <= 18
             else parse_int(text))
    if value < 1:
        raise ValueError("must be an integer >= 1")
    return value


def parse_arrival(text: str) -> float:
    """An arrival time in seconds: a plain decimal number, finite and >= 0."""
    stripped = _unpad(text)
    if not _DECIMAL.fullmatch(stripped):
        raise ValueError("not a plain decimal number of seconds (like 0.25 or 1e-3)")
    value = float(stripped)
    if not math.isfinite(value) or value < 0:  # 1e999 parses to inf
        raise ValueError("must be a finite number of seconds >= 0")
    return value


def parse_prefix_id(text: str) -> int | None:
    """A shared-prefix id: an integer >= 0, or an empty field for none."""
    if _unpad(text) == "":
        return None
    value = parse_int(text)
    if value < 0:
        raise ValueError("must be an integer >= 0 or empty")
    return value


def json_number(value: object, integer: bool) -> str:
    """Turn a JSON value back into text for the shared parsers, rejecting bools, strings
    and, where integers are due, floats (``json`` gives ``1.5`` as float, ``true`` as bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number" if not integer else "not an integer")
    if integer and not isinstance(value, int):
        raise ValueError("not an integer")
    return repr(value)


def timestamp_parser() -> Callable[[str], int]:
    """A parser of Azure timestamps to integer nanoseconds since 0001-01-01 (exact).

    Caches each date's day number: a trace spans few days, and ``date.fromisoformat``
    is most of the cost otherwise.
    """
    day_cache: dict[str, int] = {}

    def parse(text: str) -> int:
        match = _TIMESTAMP.fullmatch(_unpad(text))
        if match is None:
            raise ValueError("not a timestamp like 2023-11-16 18:15:46.6805900")
        day_text, hh, mm, ss, frac = match.groups()
        day = day_cache.get(day_text)
        if day is None:
            try:
                day = day_cache[day_text] = date.fromisoformat(day_text).toordinal()
            except ValueError:
                raise ValueError("not a valid date") from None
        hour, minute, second = int(hh), int(mm), int(ss)
        if hour > 23 or minute > 59 or second > 60:  # 60: a leap second
            raise ValueError("not a valid time of day")
        nanos = int(frac.ljust(9, "0")) if frac else 0
        return (day * 86400 + hour * 3600 + minute * 60 + second) * 1_000_000_000 + nanos

    return parse


def csv_rows(path: str, lines: Iterable[str], skipped: int
             ) -> tuple[str, int, Iterator[tuple[int, dict[str, str]]], tuple[str, ...]]:
    """Detect the CSV schema from the header; return it, the header's line number, the
    rows as ``(line_number, {column: text})``, and the header's columns the schema does
    not read (Azure's beyond its three; for the report: nothing is dropped unsaid).

    ``skipped`` blank lines came before ``lines`` (csv counts only the lines it sees).
    """
    reader = csv.reader(lines)
    try:
        header = [name.strip() for name in next(reader)]
    except csv.Error as exc:
        raise _csv_error(path, exc, skipped + 1, reader.line_num + skipped) from None
    header_line = reader.line_num + skipped
    ignored: tuple[str, ...] = ()
    if all(name in header for name in AZURE_COLUMNS):
        schema, columns = "azure", list(AZURE_COLUMNS)
        ignored = tuple(name for name in header if name not in AZURE_COLUMNS)
    else:
        schema = "pagedsim-csv"
        if "" in header:
            where = ("a trailing comma" if header[-1] == "" else
                     f"column {header.index('') + 1} of {len(header)}")
            raise TraceError(path, header_line, f"header {','.join(header)!r} has an empty "
                             f"column name ({where}); remove it")
        missing = [name for name in PAGEDSIM_REQUIRED if name not in header]
        if missing:
            raise TraceError(path, header_line,
                             f"header {','.join(header)!r} is missing column(s) "
                             f"{', '.join(missing)}; expected {','.join(AZURE_COLUMNS)} "
                             f"(Azure) or {','.join(PAGEDSIM_REQUIRED)}[,n] (pagedsim)")
        unknown = [name for name in header if name not in PAGEDSIM_REQUIRED + PAGEDSIM_OPTIONAL]
        if unknown:
            raise TraceError(path, header_line,
                             f"unknown column(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(PAGEDSIM_REQUIRED + PAGEDSIM_OPTIONAL)}")
        columns = header
    if len(set(header)) != len(header):
        raise TraceError(path, header_line, f"duplicate column in header {','.join(header)!r}")
    index = [header.index(name) for name in columns]
    width = len(header)

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        start = reader.line_num  # lines consumed before the row being read
        try:
            for row in reader:
                line = reader.line_num + skipped
                if row and not (len(row) == 1 and not row[0].strip()):  # blank: no row
                    if len(row) != width:
                        problem = "missing" if len(row) < width else "extra field(s)"
                        raise TraceError(
                            path, line, f"{problem}: row has {len(row)} fields, header has "
                            f"{width}", column=header[min(len(row), width - 1)]
                            if len(row) < width else None,
                            value=",".join(row) if len(row) > width else _NO_VALUE)
                    yield line, {name: row[i] for name, i in zip(columns, index, strict=True)}
                start = reader.line_num
        except csv.Error as exc:
            raise _csv_error(path, exc, start + 1 + skipped, reader.line_num + skipped) from None

    return schema, header_line, rows(), ignored


def _csv_error(path: str, exc: csv.Error, first_line: int, last_line: int) -> TraceError:
    """The TraceError for what Python's csv module refused (a field over its 131,072-character
    limit, typically an unclosed quote swallowing the rest of the file), at the row's first
    line, which is read again to show it (cheaper than keeping every row's text)."""
    if "field larger than field limit" in str(exc):
        message = (f"a CSV field longer than {csv.field_size_limit():,} characters (the csv "
                   "module's limit); no trace field is that long")
    else:
        message = f"not valid CSV ({exc})"
    text = _read_line(path, first_line)
    if last_line > first_line and text is not None and '"' in text:
        message += (f"; the row runs on to line {last_line}: is a double quote on line "
                    f"{first_line} never closed?")
    return TraceError(path, first_line, message,
                      value=_NO_VALUE if text is None else text.rstrip("\r\n"))


def _read_line(path: str, line: int) -> str | None:
    """Line ``line`` (1-based) of a UTF-8 text file, or ``None`` past its end (or where
    a line before it is longer than the reader's limit)."""
    with open_regular(path) as file:
        try:
            for number, text in enumerate(bounded_lines(file), start=1):
                if number == line:
                    return text
        except LineTooLongError:
            return None
    return None


#: Mooncake's trace schema (FAST'25): ``timestamp`` in ms, lengths, ``hash_ids``.
MOONCAKE_REQUIRED = ("timestamp", "input_length", "output_length", "hash_ids")


def jsonl_rows(path: str, lines: Iterable[str], skipped: int, mooncake: bool = False
               ) -> Iterator[tuple[int, dict[str, object]]]:
    required = MOONCAKE_REQUIRED if mooncake else PAGEDSIM_REQUIRED
    valid = required if mooncake else PAGEDSIM_REQUIRED + PAGEDSIM_OPTIONAL
    for line, text in enumerate(lines, start=skipped + 1):
        if not text.strip():
            continue
        if text.count("{") + text.count("[") > MAX_JSON_DEPTH:  # else it cannot be deeper
            depth = json_depth(text)
            if depth > MAX_JSON_DEPTH:
                raise TraceError(path, line, f"JSON nested {depth:,} deep; a trace row is a "
                                 f"flat object (at most {MAX_JSON_DEPTH} deep)")
        try:
            obj = json.loads(text)
            # Every key is followed by a colon: with no more colons than keys, none was
            # given twice. Otherwise parse again, keeping every pair (half as fast).
            if isinstance(obj, dict) and text.count(":") > len(obj):
                obj = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except DuplicateKeyError as exc:
            raise TraceError(path, line, f"key {exc.key!r} given twice; each key once "
                             "(which value was meant?)", column=exc.key) from None
        except json.JSONDecodeError as exc:
            raise TraceError(path, line, f"not valid JSON ({exc.msg})") from None
        except ValueError as exc:  # an integer of over 4,300 digits, which json refuses
            raise TraceError(path, line, f"not valid JSON ({str(exc).split(':')[0]})") from None
        if not isinstance(obj, dict):
            raise TraceError(path, line, f"expected a JSON object, got {type(obj).__name__}")
        for name in required:
            if name not in obj:
                raise TraceError(path, line, "missing key", column=name)
        unknown = [key for key in obj if key not in valid]
        if unknown:
            raise TraceError(path, line, f"unknown key(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(valid)}")
        yield line, obj


#: Deepest JSON nesting a trace line may have: rows are flat objects (Mooncake's hash_ids
#: one list inside), so 8 leaves room; 5,000 deep would exhaust Python's recursion limit.
MAX_JSON_DEPTH = 8


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


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


def chain_first(first: str, rest: Iterable[str]) -> Iterator[str]:
    """``first``, then the rest: the line peeked at to tell JSONL from CSV put back."""
    yield first
    yield from rest


def not_utf8_error(path: str, exc: UnicodeDecodeError) -> TraceError:
    """Name the line and byte offset of the first byte that is not UTF-8."""
    found = find_undecodable(path)
    if found is None:  # the file changed while we read it
        return TraceError(path, None, f"not UTF-8 text ({exc.reason}); trace files must be "
                          "UTF-8")
    line, offset, index, raw, hint = found
    return TraceError(path, line, f"byte 0x{raw[index]:02x} at byte offset {offset:,} of the "
                      f"file is not UTF-8; trace files must be UTF-8 text ({hint})",
                      value=raw.rstrip(b"\r\n"))


def find_undecodable(path: str) -> tuple[int, int, int, bytes, str] | None:
    """Where ``path`` first fails to decode as UTF-8, or ``None`` if it all decodes.

    Returns ``(line, byte_offset, index, line_bytes, hint)``: the 1-based line, the
    offset in bytes of the first bad byte from the start of the file, its index in the
    line, that line's bytes, and a short guess at what the file is.

    Decoding line by line is exact for UTF-8: byte 0x0A never occurs inside a multi-byte
    sequence. (The error Python raises while reading text mode gives a position inside
    its current read buffer, which is neither a line nor a file offset.)
    """
    offset = 0
    with open_regular(path, binary=True) as file:
        # Lines cut at the reader's limit: a long line is then decoded piece by piece, and
        # a cut inside a multi-byte character reads as undecodable (the text reader would
        # have refused that line as too long first).
        for line, raw in enumerate(_cut_lines(file), start=1):
            body = raw[3:] if line == 1 and raw.startswith(codecs.BOM_UTF8) else raw
            try:
                body.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad = exc.start + len(raw) - len(body)
                return line, offset + bad, bad, raw, _guess_encoding(raw, line)
            offset += len(raw)
    return None


def more_lines_than(path: str, limit: int) -> int | None:
    """The number of the first non-blank line past ``limit`` of them, or ``None`` if the
    file has at most ``limit``: one pass over its bytes in constant memory that stops
    there, so that a file of more rows than a run takes is refused before any is built
    (10 million requests take about 1.5 GB)."""
    count = 0
    with open_regular(path, binary=True) as file:
        for number, raw in enumerate(_cut_lines(file), start=1):
            if not raw.isspace():
                count += 1
                if count > limit:
                    return number
    return None


def _cut_lines(file) -> Iterator[bytes]:
    """The file's lines, those longer than :data:`MAX_LINE_CHARS` bytes cut to it."""
    while raw := file.readline(MAX_LINE_CHARS):
        yield raw


def _guess_encoding(raw: bytes, line: int) -> str:
    if line == 1 and raw.startswith(b"\x1f\x8b"):
        return "it looks gzip-compressed: decompress it first (gunzip)"
    if line == 1 and raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "it looks like UTF-16 text (Excel's 'Unicode Text'): save it as UTF-8"
    if b"\x00" in raw:
        return "it looks like a binary file, not a text trace"
    return "if it is Latin-1 text, convert it with: iconv -f latin1 -t utf-8"
