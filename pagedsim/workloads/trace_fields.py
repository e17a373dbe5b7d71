"""A trace file's fields, parsed strictly: integers, lengths, arrival times, prefix ids,
Azure timestamps, and JSON numbers given back as text for the same parsers.

Each field parser takes the text of one field and returns its value or raises a plain
``ValueError`` saying what is wrong; the row loop in :mod:`pagedsim.workloads.trace_stream`
adds the file, line, column and value (:class:`~pagedsim.workloads.trace_rows.TraceError`).

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

import math
import re
from collections.abc import Callable
from datetime import date

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
