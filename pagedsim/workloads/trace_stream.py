"""Reading a trace file lazily: its requests one at a time, in file (= arrival) order, and
what reading changed or left out counted as the rows go by.

:func:`open_trace` checks the file and its header at once and returns a
:class:`TraceCounts` and an iterator of :class:`~pagedsim.workloads.workload.Request`;
rows are parsed (and a bad one raises :class:`~pagedsim.workloads.trace_rows.TraceError`)
only as the iterator reaches them, so a trace of millions of rows never sits in memory
whole. :func:`pagedsim.workloads.traces.load_trace` is this iterator read into a list;
the rules of both schemas are in :mod:`pagedsim.workloads.traces`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TextIO

from ..user_files import LineTooLongError, NotRegularFileError, bounded_lines, open_regular
from ..validate import check_choice, check_int
from .trace_fields import (
    json_number,
    parse_arrival,
    parse_int,
    parse_len,
    parse_prefix_id,
    timestamp_parser,
)
from .trace_rows import (
    TraceError,
    chain_first,
    csv_rows,
    jsonl_rows,
    more_lines_than,
    not_utf8_error,
)
from .workload import MAX_NUM_REQUESTS, Request, clip_lengths

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
