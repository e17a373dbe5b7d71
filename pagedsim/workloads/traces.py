"""Request traces as files: the Azure LLM inference trace and pagedsim's own schema, read
lazily and strictly, and pagedsim's written back.

Two schemas, told apart by the file's first line (not its name):

**Azure LLM inference trace 2023** (CSV, public, from Azure's production LLM service)::

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:15:46.6805900,4808,10

``TIMESTAMP`` is a wall-clock time with up to 9 fractional digits (the published files
have 7, i.e. 100 ns, more than Python 3.10's ``datetime`` parses, so we parse it
ourselves, exactly, in integer nanoseconds); ``arrival_s`` becomes seconds since the
first row (always: a date is no simulated time). ``ContextTokens`` -> ``prompt_len``,
``GeneratedTokens`` -> ``output_len``. Other columns, if a release adds any, are not
read (the report names them).

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

Rules for both: the file must be UTF-8 text (an Excel BOM is fine); numbers are plain
ASCII (``1_000``, ``١٠``, ``nan`` are errors; ASCII spaces and tabs around a CSV field
are ignored: *What a field may hold* below has the exact rules); arrivals must not
decrease from one row to the next; blank lines are skipped; a file with no data row is
an error. Limits, so that no file can hang a command or exhaust memory
(:mod:`pagedsim.user_files`): only regular files are read (a FIFO, device or directory
is refused at once), a line may hold at most 1 MiB, a JSON line may nest at most 8 deep
and name each key once, and a file may hold at most 10 million requests (more need
``max_requests``). Anything bad raises :class:`TraceError` (a ``ValueError``) whose one-line
message names the file, the line number, the column and the bad value (long values
shortened). Requests get ids 0, 1, ... in file order (after skipping).

What :func:`load_trace` can do on the way, each counted in :meth:`Trace.report`:

* ``rebase``: shift arrivals so that the first row arrives at t = 0 s. Azure always;
  pagedsim files when the first arrival is at or past :data:`AUTO_REBASE_FROM_S`
  (a wall-clock reading such as Unix seconds or microseconds; at 1.7e15 s a float's
  spacing is 0.25 s, which swallows every simulated step), or when asked. The simulator
  idles until the first arrival and metrics count from it, so rebasing changes no metric.
* ``on_too_long``: requests longer than ``max_model_len`` are never silently dropped:
  ``"error"`` (the default), ``"clip"`` (with :func:`pagedsim.workloads.workload.clip_lengths`:
  prompt to ``max_model_len - 1``, then output to what is left) or ``"skip"``.
* ``skip_zero_output``: skip rows with 0 output tokens (the Azure trace has some).
* ``max_requests``: stop reading after that many requests.

After loading, :meth:`Trace.head` keeps the first N requests and
:meth:`Trace.rescale_rate` rescales arrivals to a mean rate; both return new traces.


How the reading goes: :func:`open_trace` checks the file and its header at once and
returns a :class:`TraceCounts` and an iterator of
:class:`~pagedsim.workloads.workload.Request`; rows are parsed (a bad one raises
:class:`TraceError`) only as the iterator reaches them, so a trace of millions of rows
never sits in memory whole, and :func:`load_trace` is that iterator read into a list. A
row source (:func:`csv_rows`, :func:`jsonl_rows`) yields each row's fields as text (CSV)
or JSON values with its line number; the field parsers (:func:`parse_int`,
:func:`parse_len`, :func:`parse_arrival`, ...) take one field's text and return its value
or raise a plain ``ValueError``, which the row loop turns into a :class:`TraceError`
naming the file, line, column and value. :func:`save_trace` writes requests in
pagedsim's schema, the inverse of :func:`load_trace` for it: what is saved loads back bit
for bit.

What a field may hold (both schemas, CSV and JSONL alike):


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

Speed: the stdlib ``csv`` module plus one :class:`Request` per row loads 20,000 rows in
well under a second (``python -m pagedsim.bench_traces`` measures it); pandas would not
give line-accurate errors as simply.
"""

from __future__ import annotations

import codecs
import csv
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from typing import TextIO

from ..user_files import (
    MAX_LINE_CHARS,
    DuplicateKeyError,
    LineTooLongError,
    NotRegularFileError,
    bounded_lines,
    json_depth,
    open_regular,
)
from ..user_files import no_duplicate_keys as _no_duplicate_keys
from ..validate import check_choice, check_int
from .workload import MAX_NUM_REQUESTS, Request, check_rate_per_s, clip_lengths


@dataclass(frozen=True, slots=True)
class Trace:
    """A loaded trace.

    ``requests`` sorted by arrival (seconds); ``schema`` is ``"azure"``,
    ``"pagedsim-csv"`` or ``"pagedsim-jsonl"``. What loading did, for :meth:`report`:

    * ``too_long_lines``: 1-based file lines of the requests longer than
      ``max_model_len`` tokens, which were ``on_too_long``-ed (``"clip"`` or ``"skip"``;
      with ``"error"`` loading raised instead); ``clipped_tokens``: tokens that
      clipping removed from them (0 unless ``"clip"``).
    * ``zero_output_lines``: lines of the rows with 0 output tokens, skipped.
    * ``rebased_from``: the first row's arrival as written (an Azure timestamp, or
      ``"arrival_s 1.7e+15"``) when arrivals were shifted to make it t = 0 s; else ``None``.
    * ``transforms``: what was done after the rows were read (``max_requests``,
      :meth:`head`, :meth:`rescale_rate`), in order, one phrase each.
    """

    path: str
    schema: str
    requests: list[Request]
    max_model_len: int | None = None
    on_too_long: str = "error"
    too_long_lines: tuple[int, ...] = field(default=())
    clipped_tokens: int = 0
    zero_output_lines: tuple[int, ...] = field(default=())
    rebased_from: str | None = None
    transforms: tuple[str, ...] = field(default=())
    #: Mooncake rows with more ``hash_ids`` than their ``input_length`` needs (one per 512
    #: tokens), by line, and how many ids past the prompt were dropped in all.
    surplus_id_lines: tuple[int, ...] = field(default=())
    surplus_ids: int = 0
    #: Header columns the schema does not read (Azure's beyond its three), by name.
    ignored_columns: tuple[str, ...] = field(default=())

    @property
    def num_too_long(self) -> int:
        """How many rows were longer than ``max_model_len`` (clipped or skipped)."""
        return len(self.too_long_lines)

    @property
    def num_zero_output(self) -> int:
        """How many rows with 0 output tokens were skipped."""
        return len(self.zero_output_lines)

    @property
    def mean_rate_per_s(self) -> float:
        """Mean arrival rate in requests per second: ``(N - 1) / (last - first arrival)``,
        the inverse of the mean gap between consecutive arrivals. ``inf`` when all
        arrive at once; ``nan`` with fewer than 2 requests."""
        if len(self.requests) < 2:
            return math.nan
        span_s = self.requests[-1].arrival_s - self.requests[0].arrival_s
        return math.inf if span_s == 0 else (len(self.requests) - 1) / span_s

    def head(self, n: int) -> Trace:
        """A new trace with the first ``n`` requests (by arrival; ids stay 0 .. n-1).

        All of them when there are no more than ``n`` (then nothing is recorded);
        otherwise :meth:`report` says ``first n of N requests kept``. Loading counts
        (too long, zero output) still describe the whole file; to not read the rest of
        a large file at all, use ``load_trace(..., max_requests=n)``.
        """
        check_int("n", n, minimum=1)
        if n >= len(self.requests):
            return replace(self, requests=list(self.requests))
        note = f"first {n} of {len(self.requests)} requests kept"
        return replace(self, requests=self.requests[:n], transforms=(*self.transforms, note))

    def rescale_rate(self, rate_per_s: float) -> Trace:
        """A new trace whose arrivals have mean rate ``rate_per_s`` (requests per second).

        Every gap between consecutive arrivals is multiplied by the same factor, so the
        trace's bursts and lulls keep their shape; the first arrival stays where it is,
        and lengths and ids do not change. ``math.inf`` puts every request at the first
        arrival (an offline batch, as ``WorkloadConfig(rate_per_s=inf)``). The mean rate
        is :attr:`mean_rate_per_s`. Raises ``ValueError`` for a rate that is not > 0,
        for fewer than 2 requests, or for a finite rate when all arrive at once.
        """
        check_rate_per_s(rate_per_s)  # inf = all at the first arrival
        if len(self.requests) < 2:
            raise ValueError(f"cannot rescale the arrival rate of {len(self.requests)} "
                             "request(s): a rate needs at least 2 arrivals")
        first_s = self.requests[0].arrival_s
        span_s = self.requests[-1].arrival_s - first_s
        if span_s == 0 and math.isfinite(rate_per_s):
            raise ValueError(f"all {len(self.requests)} requests arrive at {first_s} s; "
                             "there is no gap to rescale")
        old_rate = self.mean_rate_per_s
        # (N - 1) / rate is the new span; multiplying each offset keeps arrivals sorted
        # (rounding is monotonic) and the first one exact.
        factor = 0.0 if math.isinf(rate_per_s) else (len(self.requests) - 1) / rate_per_s / span_s
        requests = [replace(r, arrival_s=first_s + (r.arrival_s - first_s) * factor)
                    for r in self.requests]
        note = (f"arrivals rescaled to {rate_per_s:g} requests/s (from {old_rate:.4g}; "
                f"every gap x{factor:.4g})")
        return replace(self, requests=requests, transforms=(*self.transforms, note))

    def report(self) -> str:
        """One line for users: requests loaded, and everything loading changed or left out."""
        return report_line(self.path, len(self.requests), self.schema, self.rebased_from,
                           self.on_too_long, self.max_model_len, self.too_long_lines,
                           self.num_too_long, self.clipped_tokens, self.zero_output_lines,
                           self.num_zero_output, self.surplus_id_lines,
                           len(self.surplus_id_lines), self.surplus_ids,
                           self.ignored_columns, self.transforms)


def report_line(path: str, num_requests: int, schema: str, rebased_from: str | None,
                on_too_long: str, max_model_len: int | None,
                too_long_lines: tuple[int, ...] | list[int], num_too_long: int,
                clipped_tokens: int, zero_output_lines: tuple[int, ...] | list[int],
                num_zero_output: int, surplus_id_lines: tuple[int, ...] | list[int],
                num_surplus: int, surplus_ids: int, ignored_columns: tuple[str, ...],
                transforms: tuple[str, ...] | list[str]) -> str:
    """:meth:`Trace.report`'s line from counts (a lazy reading keeps the first lines of
    each kind and how many there were in all: the line shows no more)."""
    text = f"{path}: {num_requests} requests ({schema})"
    if rebased_from is not None:
        text += f"; arrivals rebased: t = 0 s is the first row's ({rebased_from})"
    if num_too_long:
        verb = "clipped" if on_too_long == "clip" else "skipped"
        text += (f"; {num_too_long} longer than max_model_len {max_model_len} "
                 f"{verb} (lines {_some_lines(too_long_lines, num_too_long)})")
        if on_too_long == "clip":
            text += f", {clipped_tokens:,} tokens cut"
    if num_zero_output:
        text += (f"; {num_zero_output} with 0 output tokens skipped "
                 f"(lines {_some_lines(zero_output_lines, num_zero_output)})")
    if num_surplus:
        text += (f"; {num_surplus} with more hash_ids than input_length "
                 f"needs (lines {_some_lines(surplus_id_lines, num_surplus)}): "
                 f"{surplus_ids:,} ids past the prompt dropped")
    if ignored_columns:
        names = ", ".join(repr(c) if c else "(empty)" for c in ignored_columns)
        text += f"; column(s) {names} not read"
    for note in transforms:
        text += f"; {note}"
    return text


def _some_lines(lines: tuple[int, ...] | list[int], total: int, limit: int = 10) -> str:
    """The first ``limit`` of ``total`` lines (``lines`` holds at least those)."""
    shown = ", ".join(map(str, lines[:limit]))
    return shown + (f", ... ({total - limit} more)" if total > limit else "")


# ---------------------------------------------------------------- load / save

def load_trace(path: str | os.PathLike[str], max_model_len: int | None = None,
               on_too_long: str = "error", *, skip_zero_output: bool = False,
               rebase: bool | None = None, max_requests: int | None = None) -> Trace:
    """Load a trace file (Azure CSV, or pagedsim CSV/JSONL; see the module docstring).

    * ``max_model_len`` (tokens) bounds ``prompt_len + output_len``; ``None`` checks
      nothing. ``on_too_long`` is ``"error"``, ``"clip"`` or ``"skip"``.
    * ``skip_zero_output``: skip rows with 0 output tokens (``GeneratedTokens`` or
      ``output_len``) instead of raising; they are counted in the report.
    * ``rebase``: ``True`` shifts arrivals so the first row's is t = 0 s; ``False``
      keeps pagedsim arrivals as written (an error for Azure, whose dates are always
      rebased); ``None`` rebases Azure, and pagedsim files whose first arrival is
      >= :data:`AUTO_REBASE_FROM_S` seconds.
    * ``max_requests``: stop reading once that many requests are kept (rows after
      them are not read, nor checked). Without it, a file of more than
      :data:`pagedsim.workloads.workload.MAX_NUM_REQUESTS` requests is an error at the row past it.

    Raises :class:`TraceError` (a ``ValueError``) naming file, line, column and value for
    any bad row, and for a directory, a file that is not UTF-8 text, or one without rows.
    """
    counts, requests = open_trace(path, max_model_len, on_too_long,
                                  skip_zero_output=skip_zero_output, rebase=rebase,
                                  max_requests=max_requests, keep_lines=True)
    return trace_of(counts, list(requests))


def trace_of(counts: TraceCounts, requests: list[Request]) -> Trace:
    """The :class:`Trace` of a reading read to its end (``counts`` kept every line)."""
    transforms = () if counts.stopped_at is None else (
        f"first {counts.num_requests} requests read (stopped at line {counts.stopped_at})",)
    return Trace(counts.path, counts.schema, requests, counts.max_model_len,
                 counts.on_too_long, tuple(counts.too_long_lines), counts.clipped_tokens,
                 tuple(counts.zero_output_lines), counts.rebased_from, transforms,
                 tuple(counts.surplus_id_lines), counts.surplus_ids, counts.ignored_columns)

# --------------------------------------------------------------------------------------
# Reading lazily: the requests one at a time, counting what reading changed or left out.
# --------------------------------------------------------------------------------------

ON_TOO_LONG = ("error", "clip", "skip")
#: ``rebase=None`` rebases a pagedsim trace whose first arrival is at least this many
#: seconds (11.6 days). Below it float64 arrivals are exact to 1.2e-10 s and kept as
#: written (so save/load round trips stay bit for bit); no real run idles that long
#: before its first request, so larger values are wall-clock readings.
AUTO_REBASE_FROM_S = 1e6
#: Line numbers a lazy reading keeps of each kind of row it counts (a report shows 10).
LINES_KEPT = 10


@dataclass(slots=True)
class TraceCounts:
    """What reading a trace did so far; complete once its iterator is exhausted.

    ``*_lines``: 1-based file lines of rows longer than ``max_model_len`` (clipped or
    skipped), with 0 output tokens (skipped), with more Mooncake ``hash_ids`` than the
    prompt needs: every one, or (``keep_lines=False``) the first :data:`LINES_KEPT`,
    while ``num_*`` counts them all. ``clipped_tokens``: tokens clipping cut;
    ``surplus_ids``: ids dropped. ``rebased_from``: the first row's arrival as written,
    when arrivals were shifted to make it 0 s. ``stopped_at``: the line where
    ``max_requests`` stopped reading. ``num_requests``, ``first_arrival_s`` and
    ``last_arrival_s`` (seconds, after any rebase): the requests read.
    """

    path: str
    schema: str
    max_model_len: int | None
    on_too_long: str
    keep_lines: bool = True
    ignored_columns: tuple[str, ...] = ()
    too_long_lines: list[int] = field(default_factory=list)
    num_too_long: int = 0
    clipped_tokens: int = 0
    zero_output_lines: list[int] = field(default_factory=list)
    num_zero_output: int = 0
    surplus_id_lines: list[int] = field(default_factory=list)
    num_surplus: int = 0
    surplus_ids: int = 0
    rebased_from: str | None = None
    stopped_at: int | None = None
    num_requests: int = 0
    first_arrival_s: float | None = None
    last_arrival_s: float | None = None

    def note(self, lines: list[int], line: int) -> None:
        """Remember ``line`` in ``lines`` (all of them, or the first few)."""
        if self.keep_lines or len(lines) < LINES_KEPT:
            lines.append(line)


def open_trace(path: str | os.PathLike[str], max_model_len: int | None = None,
               on_too_long: str = "error", *, skip_zero_output: bool = False,
               rebase: bool | None = None, max_requests: int | None = None,
               keep_lines: bool = False) -> tuple[TraceCounts, Iterator[Request]]:
    """Open a trace file; returns its counts and an iterator of its requests (ids 0, 1,
    ... in file order). The arguments are :func:`~pagedsim.workloads.traces.load_trace`'s;
    ``keep_lines`` keeps every counted row's line number, not only the first few.

    The file, its size limit and its header are checked now; each row when the iterator
    reaches it (then the counts describe the rows read so far). The file is closed when
    the iterator is exhausted or raises.
    """
    check_choice("on_too_long", on_too_long, ON_TOO_LONG)
    if max_model_len is not None:
        check_int("max_model_len", max_model_len, minimum=2)
    if max_requests is not None:
        check_int("max_requests", max_requests, minimum=1)
    for flag, value in (("skip_zero_output", skip_zero_output), ("rebase", rebase)):
        if not isinstance(value, bool) and not (flag == "rebase" and value is None):
            raise TypeError(f"{flag} must be True or False, got {value!r}")
    name = os.fspath(path)
    try:
        file = open_regular(name)
    except NotRegularFileError as exc:
        raise TraceError(name, None, f"is {exc.kind}, not a trace file (a regular .csv or "
                         ".jsonl file)") from None
    try:
        if max_requests is None:
            # A header, then at most MAX_NUM_REQUESTS rows: counted before any is parsed.
            past = more_lines_than(name, MAX_NUM_REQUESTS + 1)
            if past is not None:
                raise TraceError(name, past, f"more than {MAX_NUM_REQUESTS:,} rows, the most "
                                 "a run simulates; read the first N with max_requests")
        schema, header_line, rows, ignored = _open_rows(name, file)
        if schema == "azure" and rebase is False:
            raise TraceError(name, header_line, "rebase=False applies to pagedsim "
                             "traces only: Azure timestamps are dates, always rebased "
                             "to the first row's")
    except UnicodeDecodeError as exc:
        file.close()
        raise not_utf8_error(name, exc) from None
    except LineTooLongError as exc:
        file.close()
        raise TraceError(name, exc.line, str(exc)) from None
    except BaseException:
        file.close()
        raise
    counts = TraceCounts(name, schema, max_model_len, on_too_long, keep_lines, ignored)
    requests = _requests(file, counts, rows, header_line, skip_zero_output, rebase,
                         max_requests)
    return counts, requests


def _open_rows(name: str, file: TextIO) -> tuple[str, int | None, Iterator[tuple[int, dict]],
                                                 tuple[str, ...]]:
    """Tell the schema from the first non-blank line; return it, the header's line, the
    rows as ``(line, {column: value})`` and the header columns not read."""
    # Count the blank lines before the first one so that reported line numbers stay exact.
    skipped = 0
    first = ""
    lines_in = bounded_lines(file)
    for first in lines_in:
        if first.strip():
            break
        skipped += 1
    if not first.strip():
        raise TraceError(name, skipped + 1, "empty file, expected a CSV header or JSONL")
    lines = chain_first(first, lines_in)
    if first.lstrip().startswith("{"):
        # Mooncake's schema (timestamp in ms, input/output_length, hash_ids) or ours.
        schema = "mooncake" if '"input_length"' in first else "pagedsim-jsonl"
        return schema, None, jsonl_rows(name, lines, skipped, mooncake=schema == "mooncake"), ()
    return csv_rows(name, lines, skipped)


def _requests(file: TextIO, counts: TraceCounts, rows: Iterator[tuple[int, dict]],
              header_line: int | None, skip_zero_output: bool, rebase: bool | None,
              max_requests: int | None) -> Iterator[Request]:
    """The requests of ``rows``, counting into ``counts``; closes ``file`` at the end."""
    path = counts.path
    try:
        with file:
            yield from _parse(counts, rows, header_line, skip_zero_output, rebase,
                              max_requests)
    except UnicodeDecodeError as exc:
        raise not_utf8_error(path, exc) from None
    except LineTooLongError as exc:
        raise TraceError(path, exc.line, str(exc)) from None


def _parse(counts: TraceCounts, rows: Iterator[tuple[int, dict]], header_line: int | None,
           skip_zero_output: bool, rebase: bool | None, max_requests: int | None
           ) -> Iterator[Request]:
    path, schema = counts.path, counts.schema
    max_model_len, on_too_long = counts.max_model_len, counts.on_too_long
    azure = schema == "azure"
    parse_ts = timestamp_parser() if azure else None
    mooncake = schema == "mooncake"
    if azure:
        names = {"arrival": "TIMESTAMP", "prompt": "ContextTokens", "output": "GeneratedTokens"}
    elif mooncake:  # timestamps in milliseconds; hash_ids name the prompt's 512-token pieces
        names = {"arrival": "timestamp", "prompt": "input_length", "output": "output_length"}
    else:
        names = {"arrival": "arrival_s", "prompt": "prompt_len", "output": "output_len"}
    is_json = schema in ("pagedsim-jsonl", "mooncake")
    num_rows = 0
    # The first row's arrival (integer ns for Azure, seconds otherwise), subtracted from
    # every arrival when rebasing; whether to rebase is settled on that first row.
    base: float = 0.0
    prev_key, prev_line = -math.inf, 0
    clip = on_too_long == "clip"
    raw: object = None
    column = ""
    for line, row in rows:
        num_rows += 1
        try:
            column = names["arrival"]
            raw = row[column]
            key: float = (parse_ts(raw) if parse_ts is not None else
                          parse_arrival(json_number(raw, False) if is_json else raw))
            if mooncake:
                key /= 1000.0  # ms -> s
            if key < prev_key:
                raise ValueError(f"earlier than the previous row's (line {prev_line}); "
                                 "arrivals must not decrease")
            if num_rows == 1:
                if rebase is None:
                    rebase = azure or key >= AUTO_REBASE_FROM_S
                if rebase:
                    base = key
                    counts.rebased_from = (str(raw).strip() if azure else f"arrival_s {raw}")
            prev_key, prev_line = key, line
            # Azure: integer nanoseconds until here, so no rounding drift over long traces.
            arrival = (key - base) / 1e9 if azure else key - base
            column = names["prompt"]
            raw = row[column]
            prompt_len = parse_len(json_number(raw, True) if is_json else raw)
            column = names["output"]
            raw = row[column]
            output_len = parse_int(json_number(raw, True) if is_json else raw)
            if output_len == 0 and skip_zero_output:
                counts.num_zero_output += 1
                counts.note(counts.zero_output_lines, line)
                continue
            if output_len < 1:
                raise ValueError("must be an integer >= 1" + (
                    " (skip_zero_output=True skips rows with 0 output tokens)"
                    if output_len == 0 else ""))
            extras: dict[str, object] = {}
            row_surplus = 0
            if mooncake:
                column = "hash_ids"
                raw = row[column]
                if not isinstance(raw, list):
                    raise ValueError("must be a JSON list of prompt piece ids")
                extras["prompt_pieces"] = tuple(parse_int(json_number(h, True)) for h in raw)
                # Ids past ceil(prompt / 512): Request keeps only the prompt's; counted.
                row_surplus = len(raw) + (-prompt_len // 512)
            elif not azure:
                for column in ("n", "beam_width"):
                    if column in row:
                        raw = row[column]
                        extras[column] = parse_len(json_number(raw, True) if is_json else raw)
                column = "prefix_id"
                if column in row:
                    raw = row[column]
                    if is_json:
                        extras[column] = (None if raw is None else
                                          parse_prefix_id(json_number(raw, True)))
                    else:
                        extras[column] = parse_prefix_id(raw)
        except ValueError as exc:
            raise TraceError(path, line, str(exc), column=column, value=raw) from None
        if max_model_len is not None and prompt_len + output_len > max_model_len:
            if on_too_long == "error":
                raise TraceError(
                    path, line,
                    f"request of {prompt_len} + {output_len} = {prompt_len + output_len} tokens "
                    f"is longer than max_model_len {max_model_len}; pass on_too_long='clip' "
                    "or 'skip' to load such rows (they are reported)")
            counts.num_too_long += 1
            counts.note(counts.too_long_lines, line)
            if not clip:
                continue
            total = prompt_len + output_len
            prompt_len, output_len = clip_lengths(prompt_len, output_len, max_model_len)
            counts.clipped_tokens += total - prompt_len - output_len
        try:
            request = Request(counts.num_requests, arrival, prompt_len, output_len, **extras)
        except (TypeError, ValueError) as exc:  # e.g. n > 1 together with beam_width > 1
            raise TraceError(path, line, str(exc)) from None
        if row_surplus > 0:
            counts.num_surplus += 1
            counts.note(counts.surplus_id_lines, line)
            counts.surplus_ids += row_surplus
        counts.num_requests += 1
        if counts.first_arrival_s is None:
            counts.first_arrival_s = arrival
        counts.last_arrival_s = arrival
        yield request
        if max_requests is not None and counts.num_requests >= max_requests:
            counts.stopped_at = line
            return
        if counts.num_requests > MAX_NUM_REQUESTS:  # checked here, before the rest is read
            raise TraceError(path, line, f"more than {MAX_NUM_REQUESTS:,} requests, the most "
                             "a run simulates; read the first N with max_requests")
    if num_rows == 0:
        raise TraceError(path, header_line, "no data rows after the header")

# --------------------------------------------------------------------------------------
# Row sources: CSV and JSONL rows with their line numbers; the error type; UTF-8 checks.
# --------------------------------------------------------------------------------------

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

# --------------------------------------------------------------------------------------
# Fields: each parser takes one field's text and returns its value or raises ValueError.
# --------------------------------------------------------------------------------------

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

# --------------------------------------------------------------------------------------
# Writing: requests as a trace file in pagedsim's schema.
# --------------------------------------------------------------------------------------

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
