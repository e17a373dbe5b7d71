"""Load request traces from files: the Azure LLM inference trace and pagedsim's own schema.

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
are ignored: :mod:`pagedsim.workloads.trace_fields` has the exact rules); arrivals must not
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

Speed: the stdlib ``csv`` module plus one :class:`Request` per row loads 20,000 rows in
well under a second (``python -m pagedsim.bench_traces`` measures it); pandas would not
give line-accurate errors as simply.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

from ..validate import check_int
from .trace_rows import AZURE_COLUMNS, PAGEDSIM_OPTIONAL, PAGEDSIM_REQUIRED, TraceError
from .trace_save import save_trace  # re-exported: saving lives in its own module
from .trace_stream import AUTO_REBASE_FROM_S, ON_TOO_LONG, TraceCounts, open_trace
from .workload import Request, check_rate_per_s

__all__ = ["AUTO_REBASE_FROM_S", "AZURE_COLUMNS", "ON_TOO_LONG", "PAGEDSIM_OPTIONAL",
           "PAGEDSIM_REQUIRED", "Trace", "TraceCounts", "TraceError", "load_trace",
           "open_trace", "report_line", "save_trace"]


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
