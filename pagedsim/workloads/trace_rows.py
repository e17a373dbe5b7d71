"""Reading a trace file's rows for :mod:`pagedsim.workloads.traces`: the error type, CSV and
JSONL row sources, and where a file stops being UTF-8.

A row source yields each row's fields as text (CSV) or JSON values, with its line number;
:mod:`pagedsim.workloads.trace_fields` parses the fields (and says what a field may
hold), and the row loop in :mod:`pagedsim.workloads.trace_stream` turns a field's
``ValueError`` into a :class:`TraceError` naming the file, line, column and value.
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Iterable, Iterator

from ..user_files import (
    MAX_LINE_CHARS,
    DuplicateKeyError,
    LineTooLongError,
    bounded_lines,
    json_depth,
    open_regular,
)
from ..user_files import no_duplicate_keys as _no_duplicate_keys

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
