"""Load request traces from files: the Azure LLM inference trace and pagedsim's own schema.

Two schemas, told apart by the file's first line (not its name):

**Azure LLM inference trace 2023** (CSV, public, from Azure's production LLM service)::

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:15:46.6805900,4808,10

``TIMESTAMP`` is a wall-clock time with up to 9 fractional digits (the published files
have 7, i.e. 100 ns, more than Python 3.10's ``datetime`` parses, so we parse it
ourselves, exactly, in integer nanoseconds); ``arrival_s`` becomes seconds since the
first row. ``ContextTokens`` -> ``prompt_len``, ``GeneratedTokens`` -> ``output_len``.
Other columns, if a release adds any, are ignored.

**pagedsim** (CSV with a header, or JSONL with one object per line)::

    arrival_s,prompt_len,output_len,n
    0.0,161,338,1
    0.25,20,58,4

    {"arrival_s": 0.0, "prompt_len": 161, "output_len": 338}
    {"arrival_s": 0.25, "prompt_len": 20, "output_len": 58, "n": 4}

Required: ``arrival_s`` (seconds from the start of the run, finite, >= 0),
``prompt_len`` and ``output_len`` (tokens, integers >= 1). Optional: ``n`` (parallel
samples, default 1), ``beam_width`` (default 1) and ``prefix_id`` (an integer >= 0, or
empty / absent for none). Any other column or key is an error (most likely a typo). A
file whose first non-blank character is ``{`` is JSONL, anything else CSV.

Rules for both: arrivals must not decrease from one row to the next; blank lines are
skipped; any bad row raises :class:`TraceError` (a ``ValueError``) whose one-line message
names the file, the line number, the column and the bad value. Requests longer than
``max_model_len`` are never silently dropped: ``on_too_long`` chooses ``"error"``
(the default), ``"clip"`` (with :func:`pagedsim.workload.clip_lengths`: prompt to
``max_model_len - 1``, then output to what is left) or ``"skip"``, and the returned
:class:`Trace` reports how many there were and on which lines. Requests get ids 0, 1, ...
in file order (after skipping).

Speed: the stdlib ``csv`` module plus one :class:`Request` per row loads 20,000 rows in
well under a second (``python -m pagedsim.bench_traces`` measures it); pandas would not
give line-accurate errors as simply.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date

from .validate import check_choice, check_int
from .workload import Request, clip_lengths

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
PAGEDSIM_REQUIRED = ("arrival_s", "prompt_len", "output_len")
PAGEDSIM_OPTIONAL = ("n", "beam_width", "prefix_id")
ON_TOO_LONG = ("error", "clip", "skip")

# "2023-11-16 18:15:46.6805900": date, time, optional fraction of up to 9 digits.
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


_NO_VALUE = object()


class TraceError(ValueError):
    """A bad trace file or row; ``str()`` is one line naming file, line, column and value."""

    def __init__(self, path: str, line: int, message: str, column: str | None = None,
                 value: object = _NO_VALUE) -> None:
        where = f"{path}: line {line}"
        if column is not None:
            where += f": column {column!r}"
        if value is not _NO_VALUE:
            message = f"{message} (value {value!r})"
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.column, self.value = path, line, column, value


@dataclass(frozen=True, slots=True)
class Trace:
    """A loaded trace.

    ``requests`` sorted by arrival (seconds); ``schema`` is ``"azure"``,
    ``"pagedsim-csv"`` or ``"pagedsim-jsonl"``; ``too_long_lines`` are the 1-based file
    line numbers of the requests longer than ``max_model_len`` tokens, which were
    ``on_too_long``-ed (``"clip"`` or ``"skip"``; with ``"error"`` loading raised instead).
    """

    path: str
    schema: str
    requests: list[Request]
    max_model_len: int | None = None
    on_too_long: str = "error"
    too_long_lines: tuple[int, ...] = field(default=())

    @property
    def num_too_long(self) -> int:
        """How many rows were longer than ``max_model_len`` (clipped or skipped)."""
        return len(self.too_long_lines)

    def report(self) -> str:
        """One line for users: rows loaded, and what happened to the too-long ones."""
        text = f"{self.path}: {len(self.requests)} requests ({self.schema})"
        if self.too_long_lines:
            verb = "clipped" if self.on_too_long == "clip" else "skipped"
            text += (f"; {self.num_too_long} longer than max_model_len {self.max_model_len} "
                     f"{verb} (lines {_some_lines(self.too_long_lines)})")
        return text


def _some_lines(lines: tuple[int, ...] | list[int], limit: int = 10) -> str:
    shown = ", ".join(map(str, lines[:limit]))
    return shown + (f", ... ({len(lines) - limit} more)" if len(lines) > limit else "")


# ---------------------------------------------------------------- field parsers
# Each raises a plain ValueError with the problem; the row loop adds file/line/column.

def _parse_len(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("not an integer") from None
    if value < 1:
        raise ValueError("must be an integer >= 1")
    return value


def _parse_arrival(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be a finite number of seconds >= 0")
    return value


def _parse_prefix_id(text: str) -> int | None:
    if text.strip() == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError("not an integer") from None
    if value < 0:
        raise ValueError("must be an integer >= 0 or empty")
    return value


def _timestamp_parser() -> Callable[[str], int]:
    """A parser of Azure timestamps to integer nanoseconds since 0001-01-01 (exact).

    Caches each date's day number: a trace spans few days, and ``date.fromisoformat``
    is most of the cost otherwise.
    """
    day_cache: dict[str, int] = {}

    def parse(text: str) -> int:
        match = _TIMESTAMP.fullmatch(text.strip())
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


# ---------------------------------------------------------------- row sources

def _csv_rows(path: str, lines: Iterable[str], skipped: int
              ) -> tuple[str, Iterator[tuple[int, dict[str, str]]]]:
    """Detect the CSV schema from the header; yield ``(line_number, {column: text})``.

    ``skipped`` blank lines came before ``lines`` (csv counts only the lines it sees).
    """
    reader = csv.reader(lines)
    header = [name.strip() for name in next(reader)]
    header_line = reader.line_num + skipped
    if all(name in header for name in AZURE_COLUMNS):
        schema, columns = "azure", list(AZURE_COLUMNS)
    else:
        schema = "pagedsim-csv"
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
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # a blank line is not a row
            line = reader.line_num + skipped
            if len(row) != width:
                problem = "missing" if len(row) < width else "extra field(s)"
                raise TraceError(path, line,
                                 f"{problem}: row has {len(row)} fields, header has {width}",
                                 column=header[min(len(row), width - 1)] if len(row) < width
                                 else None, value=",".join(row) if len(row) > width
                                 else _NO_VALUE)
            yield line, {name: row[i] for name, i in zip(columns, index, strict=True)}

    return schema, rows()


def _jsonl_rows(path: str, lines: Iterable[str], skipped: int
                ) -> Iterator[tuple[int, dict[str, object]]]:
    valid = PAGEDSIM_REQUIRED + PAGEDSIM_OPTIONAL
    for line, text in enumerate(lines, start=skipped + 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(path, line, f"not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise TraceError(path, line, f"expected a JSON object, got {type(obj).__name__}")
        for name in PAGEDSIM_REQUIRED:
            if name not in obj:
                raise TraceError(path, line, "missing key", column=name)
        unknown = [key for key in obj if key not in valid]
        if unknown:
            raise TraceError(path, line, f"unknown key(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(valid)}")
        yield line, obj


def _json_number(value: object, integer: bool) -> str:
    """Turn a JSON value back into text for the shared parsers, rejecting bools/strings/floats
    where integers are due (``json`` gives ``1.5`` as float and ``true`` as bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number" if not integer else "not an integer")
    if integer and not isinstance(value, int):
        raise ValueError("not an integer")
    return repr(value)


# ---------------------------------------------------------------- load / save

def load_trace(path: str | os.PathLike[str], max_model_len: int | None = None,
               on_too_long: str = "error") -> Trace:
    """Load a trace file (Azure CSV, or pagedsim CSV/JSONL; see the module docstring).

    ``max_model_len`` (tokens) bounds ``prompt_len + output_len``; ``None`` checks nothing.
    ``on_too_long`` is ``"error"``, ``"clip"`` or ``"skip"``. Raises :class:`TraceError`
    (a ``ValueError``) naming file, line, column and value for any bad row.
    """
    check_choice("on_too_long", on_too_long, ON_TOO_LONG)
    if max_model_len is not None:
        check_int("max_model_len", max_model_len, minimum=2)
    name = os.fspath(path)
    with open(name, encoding="utf-8-sig", newline="") as file:  # -sig: drop an Excel BOM
        # Peek at the first non-blank line to tell JSONL from CSV, counting the blank
        # lines before it so that reported line numbers stay exact.
        skipped = 0
        first = ""
        for first in file:
            if first.strip():
                break
            skipped += 1
        if not first.strip():
            raise TraceError(name, skipped + 1, "empty file, expected a CSV header or JSONL")
        lines = _chain_first(first, file)
        rows: Iterator[tuple[int, dict]]
        if first.lstrip().startswith("{"):
            schema, rows = "pagedsim-jsonl", _jsonl_rows(name, lines, skipped)
        else:
            schema, rows = _csv_rows(name, lines, skipped)
        return _build(name, schema, rows, max_model_len, on_too_long)


def _chain_first(first: str, rest: Iterable[str]) -> Iterator[str]:
    yield first
    yield from rest


def _build(path: str, schema: str, rows: Iterator[tuple[int, dict]], max_model_len: int | None,
           on_too_long: str) -> Trace:
    parse_ts = _timestamp_parser() if schema == "azure" else None
    if schema == "azure":
        names = {"arrival": "TIMESTAMP", "prompt": "ContextTokens", "output": "GeneratedTokens"}
    else:
        names = {"arrival": "arrival_s", "prompt": "prompt_len", "output": "output_len"}
    is_json = schema == "pagedsim-jsonl"
    requests: list[Request] = []
    too_long: list[int] = []
    first_ns: int | None = None
    prev_arrival, prev_line = -math.inf, 0
    clip = on_too_long == "clip"
    raw: object = None
    column = ""
    for line, row in rows:
        try:
            column = names["arrival"]
            raw = row[column]
            if parse_ts is not None:
                nanos = parse_ts(raw)
                if first_ns is None:
                    first_ns = nanos
                # Integer nanoseconds until here: no rounding drift over long traces.
                arrival = (nanos - first_ns) / 1e9
                order_key: float = nanos
            else:
                arrival = _parse_arrival(_json_number(raw, False) if is_json else raw)
                order_key = arrival
            if order_key < prev_arrival:
                raise ValueError(f"earlier than the previous row's (line {prev_line}); "
                                 "arrivals must not decrease")
            column = names["prompt"]
            raw = row[column]
            prompt_len = _parse_len(_json_number(raw, True) if is_json else raw)
            column = names["output"]
            raw = row[column]
            output_len = _parse_len(_json_number(raw, True) if is_json else raw)
            extras: dict[str, int | None] = {}
            if schema != "azure":
                for column in ("n", "beam_width"):
                    if column in row:
                        raw = row[column]
                        extras[column] = _parse_len(_json_number(raw, True) if is_json else raw)
                column = "prefix_id"
                if column in row:
                    raw = row[column]
                    if is_json:
                        extras[column] = (None if raw is None else
                                          _parse_prefix_id(_json_number(raw, True)))
                    else:
                        extras[column] = _parse_prefix_id(raw)
        except ValueError as exc:
            raise TraceError(path, line, str(exc), column=column, value=raw) from None
        prev_arrival, prev_line = order_key, line
        if max_model_len is not None and prompt_len + output_len > max_model_len:
            if on_too_long == "error":
                raise TraceError(
                    path, line,
                    f"request of {prompt_len} + {output_len} = {prompt_len + output_len} tokens "
                    f"is longer than max_model_len {max_model_len}; pass on_too_long='clip' "
                    "or 'skip' to load such rows (they are reported)")
            too_long.append(line)
            if not clip:
                continue
            prompt_len, output_len = clip_lengths(prompt_len, output_len, max_model_len)
        try:
            requests.append(Request(len(requests), arrival, prompt_len, output_len, **extras))
        except (TypeError, ValueError) as exc:  # e.g. n > 1 together with beam_width > 1
            raise TraceError(path, line, str(exc)) from None
    return Trace(path, schema, requests, max_model_len, on_too_long, tuple(too_long))


def save_trace(requests: Iterable[Request], path: str | os.PathLike[str]) -> None:
    """Write requests in the pagedsim schema: JSONL if ``path`` ends in ``.jsonl``, else CSV.

    Optional columns (``n``, ``beam_width``, ``prefix_id``) are written only when some
    request needs them; arrivals use ``repr`` so they read back bit for bit. Request ids
    are not written (loading numbers requests 0, 1, ... in file order).
    """
    requests = list(requests)
    for before, after in zip(requests, requests[1:], strict=False):
        if after.arrival_s < before.arrival_s:
            raise ValueError(f"requests must be sorted by arrival_s: request {after.request_id} "
                             f"({after.arrival_s} s) comes after request {before.request_id} "
                             f"({before.arrival_s} s)")
    name = os.fspath(path)
    if name.endswith(".jsonl"):
        with open(name, "w", encoding="utf-8") as file:
            for r in requests:
                obj: dict[str, object] = {"arrival_s": r.arrival_s, "prompt_len": r.prompt_len,
                                          "output_len": r.output_len}
                if r.n != 1:
                    obj["n"] = r.n
                if r.beam_width != 1:
                    obj["beam_width"] = r.beam_width
                if r.prefix_id is not None:
                    obj["prefix_id"] = r.prefix_id
                file.write(json.dumps(obj) + "\n")
        return
    optional = [col for col, used in (
        ("n", any(r.n != 1 for r in requests)),
        ("beam_width", any(r.beam_width != 1 for r in requests)),
        ("prefix_id", any(r.prefix_id is not None for r in requests)),
    ) if used]
    with open(name, "w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(list(PAGEDSIM_REQUIRED) + optional)
        for r in requests:
            row: list[object] = [repr(r.arrival_s), r.prompt_len, r.output_len]
            for col in optional:
                value = getattr(r, col)
                row.append("" if value is None else value)
            writer.writerow(row)
