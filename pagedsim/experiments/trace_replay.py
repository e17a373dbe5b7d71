"""How an :class:`~pagedsim.experiments.spec.Experiment` replays a trace file: its first
``num_requests``, arrivals shifted so that the first request arrives at t = 0 s, ``n`` or
``beam_width`` given to every request, arrivals rescaled to ``rate_per_s``; and the
report line that says so.

Two ways, one set of rules: :func:`load_replay` builds the whole
:class:`~pagedsim.workloads.traces.Trace` (``Experiment.trace()``), :func:`stream_replay`
yields the same requests one at a time from the file (what runs use: a large trace never
sits in memory whole), after :func:`scan_replay` has read the file once without keeping
a request, for the counts, the report and the rescaling factor (which needs the last
arrival).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..workloads.traces import Trace, TraceCounts, TraceError, open_trace, report_line, trace_of
from ..workloads.workload import Request, check_rate_per_s

if TYPE_CHECKING:  # pragma: no cover
    from .spec import Experiment


@dataclass(frozen=True, slots=True)
class ReplayScan:
    """One pass over an experiment's trace: the reading's counts, how many rows had an
    ``n`` / ``beam_width`` of their own that the experiment's replace, and what replaying
    does (``transforms``, for the report; ``factor``: every gap's multiplier, None
    without ``rate_per_s``)."""

    counts: TraceCounts
    own_multi: int
    transforms: tuple[str, ...]
    factor: float | None

    @property
    def num_requests(self) -> int:
        return self.counts.num_requests

    def report(self) -> str:
        """The report line, as :meth:`Trace.report` of ``Experiment.trace()`` gives it."""
        return _report(self.counts, self.transforms)


def _report(c: TraceCounts, transforms: tuple[str, ...]) -> str:
    return report_line(c.path, c.num_requests, c.schema, c.rebased_from, c.on_too_long,
                       c.max_model_len, c.too_long_lines, c.num_too_long, c.clipped_tokens,
                       c.zero_output_lines, c.num_zero_output, c.surplus_id_lines,
                       c.num_surplus, c.surplus_ids, c.ignored_columns, transforms)


def _open(exp: Experiment, keep_lines: bool) -> tuple[TraceCounts, Iterator[Request]]:
    return open_trace(exp.workload, exp.max_model_len, exp.on_too_long,
                      skip_zero_output=exp.skip_zero_output, rebase=None,
                      max_requests=exp.num_requests, keep_lines=keep_lines)


def _own(exp: Experiment, r: Request) -> bool:
    """Whether ``r`` had an n / beam width of its own that the experiment replaces."""
    return (r.n, r.beam_width) != (1, 1) and (r.n, r.beam_width) != (exp.n, exp.beam_width)


def _plan(exp: Experiment, counts: TraceCounts, own_multi: int
          ) -> tuple[tuple[str, ...], float | None]:
    """The transforms' notes (the loader's first) and the rescaling factor; raises
    ``TraceError`` for a trace that leaves no request and ``ValueError`` starting
    ``rate_per_s`` for a rate that cannot be applied, as ``Experiment.trace()`` does."""
    loaded = () if counts.stopped_at is None else (
        f"first {counts.num_requests} requests read (stopped at line {counts.stopped_at})",)
    if counts.num_requests == 0:
        raise TraceError(exp.workload, None,
                         f"no request left to simulate ({_report(counts, loaded)})")
    notes = list(loaded)
    first_s = counts.first_arrival_s
    assert first_s is not None and counts.last_arrival_s is not None
    if first_s != 0:  # the loader rebased only dates and wall-clock readings
        notes.append(f"arrivals shifted by -{first_s:.6g} s: t = 0 s is the first request's")
    n = counts.num_requests
    if exp.num_requests is not None and n < exp.num_requests:
        notes.append(f"num_requests {exp.num_requests:,} asked for, the trace holds {n:,}: "
                     "all taken")
    if exp.multi_sequence:  # n / beam_width given to every request, and said so
        given = f"n {exp.n}" if exp.n > 1 else f"beam_width {exp.beam_width}"
        notes.append(f"{given} given to every request" + (
            f", replacing the trace's own n / beam_width in {own_multi:,} rows"
            if own_multi else ""))
    if exp.rate_per_s is None:
        return tuple(notes), None
    rate = float(exp.rate_per_s)
    try:
        check_rate_per_s(rate)
        # As Trace.rescale_rate on the shifted arrivals: the first at 0 s.
        span_s = (counts.last_arrival_s - first_s) if first_s != 0 else counts.last_arrival_s
        if n < 2:
            raise ValueError(f"cannot rescale the arrival rate of {n} request(s): a rate "
                             "needs at least 2 arrivals")
        if span_s == 0 and math.isfinite(rate):
            raise ValueError(f"all {n} requests arrive at 0.0 s; there is no gap to rescale")
    except ValueError as exc:
        raise ValueError(f"rate_per_s {exp.rate_per_s:g} requests/s cannot be applied to "
                         f"trace {exp.workload!r}: {exc}") from None
    old_rate = math.inf if span_s == 0 else (n - 1) / span_s
    factor = 0.0 if math.isinf(rate) else (n - 1) / rate / span_s
    notes.append(f"arrivals rescaled to {rate:g} requests/s (from {old_rate:.4g}; "
                 f"every gap x{factor:.4g})")
    return tuple(notes), factor


def _replayed(exp: Experiment, requests: Iterator[Request], factor: float | None,
              counts: TraceCounts) -> Iterator[Request]:
    """Each request as the run sees it: shifted, given n / beam_width, rescaled (the
    same arithmetic as ``Experiment.trace()``'s); a trace that leaves none raises as
    ``Experiment.trace()`` does, once read."""
    first_s: float | None = None
    multi = exp.multi_sequence
    for r in requests:
        if first_s is None:
            first_s = r.arrival_s
        arrival = r.arrival_s - first_s if first_s != 0 else r.arrival_s
        if factor is not None:  # the first request is at 0.0 s now
            arrival = 0.0 + (arrival - 0.0) * factor
        changes: dict[str, object] = {}
        if arrival != r.arrival_s:
            changes["arrival_s"] = arrival
        if multi:
            changes.update(n=exp.n, beam_width=exp.beam_width)
        yield replace(r, **changes) if changes else r
    if first_s is None:
        _plan(exp, counts, 0)  # raises: no request left to simulate


def scan_replay(exp: Experiment) -> ReplayScan:
    """Read the trace once, keeping no request (every row is checked)."""
    counts, requests = _open(exp, keep_lines=False)
    own = 0
    for r in requests:
        own += _own(exp, r)
    transforms, factor = _plan(exp, counts, own)
    return ReplayScan(counts, own, transforms, factor)


def stream_replay(exp: Experiment, scan: ReplayScan | None = None) -> Iterator[Request]:
    """The requests a run replays, read lazily. Without ``rate_per_s`` the file is read
    once, as the iterator goes; with it, :func:`scan_replay` reads it first (``scan``,
    if the caller has one) for the rescaling factor."""
    factor = None
    if exp.rate_per_s is not None:
        factor = (scan or scan_replay(exp)).factor
    counts, requests = _open(exp, keep_lines=False)
    return _replayed(exp, requests, factor, counts)


def load_replay(exp: Experiment) -> Trace:
    """The whole trace as the runs see it (``Experiment.trace()``)."""
    counts, requests = _open(exp, keep_lines=True)
    raw = list(requests)
    transforms, factor = _plan(exp, counts, sum(_own(exp, r) for r in raw))
    trace = trace_of(counts, list(_replayed(exp, iter(raw), factor, counts)))
    return replace(trace, transforms=transforms)
