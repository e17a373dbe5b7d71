"""Inter-token latencies (ITL) as vLLM's ``benchmark_serving`` counts them.

A client streaming a response sees each token when the step that sampled it ends. The
ITLs of a request are the gaps between its consecutive tokens (the first token's wait is
its TTFT, not an ITL), and ``benchmark_serving`` pools the gaps of every request into one
list before it takes their mean, median and 99th percentile; a request's mean gap is its
TPOT. Here a request's tokens are the ends of the steps in which it sampled: a decode
step, or the last chunk of a prefill (its first token, or the next one after a
recomputation). Every sequence of a request samples in the same steps, so its gaps are
counted once per request, as one stream.

The gaps are kept in compact form: for each step, each distinct gap with the number of
requests that had it (most steps have one or two distinct gaps however large the batch),
so a run's list of gaps costs a few entries a step rather than one a token; the mean and
percentiles come out as numpy's over the expanded list (to rounding: sums in another
order). Every run records them (:func:`pagedsim.engine.simulator.simulate`), at 16 bytes a
pair (the default ShareGPT load at 5 req/s, 20,000 requests, paged: 237,159 pairs over
214,627 steps). A step that samples the same requests as the step before (36,728 of the
92,202 steps recorded one by one in that run) costs one list comparison: their last
token times are written per request only when the set changes.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np


class TokenGaps:
    """The ITLs of a run, in seconds, as (gap, count) pairs; fed by the simulator."""

    __slots__ = ("_last_s", "_gaps_s", "_counts", "_run_ids", "_run_end_s")

    def __init__(self) -> None:
        self._last_s: dict[int, float] = {}  # request id -> when its last token came out
        self._gaps_s = array("d")
        self._counts = array("q")
        # The requests of the last step recorded, whose last token came out at _run_end_s:
        # kept as that list and written into _last_s only when a step's requests differ,
        # since most steps sample the same requests as the one before (then every gap is
        # the same, and the step costs one comparison, not a dictionary write a request).
        self._run_ids: list[int] = []
        self._run_end_s = 0.0

    def step(self, request_ids: Iterable[int], end_s: float) -> None:
        """``request_ids`` each sampled a token in a step that ended at ``end_s``."""
        rids = request_ids if type(request_ids) is list else list(request_ids)
        if rids == self._run_ids:  # the last step's requests again: one gap, n times
            if rids:
                self._gaps_s.append(end_s - self._run_end_s)
                self._counts.append(len(rids))
            self._run_end_s = end_s
            return
        self._settle()
        # Whole-list operations (C loops): when each had its last token -> how many.
        for prev, count in Counter(map(self._last_s.get, rids)).items():
            if prev is not None:  # None: the request's first token, no gap yet
                self._gaps_s.append(end_s - prev)
                self._counts.append(count)
        self._run_ids, self._run_end_s = list(rids), end_s  # a copy: the caller's may change

    def steps(self, request_ids: Sequence[int], ends_s: Sequence[float]) -> None:
        """``request_ids`` each sampled a token in every one of consecutive steps that
        ended at ``ends_s`` (a steady run: one pass over the requests, not one a step)."""
        if not ends_s:
            return
        self.step(request_ids, ends_s[0])
        n = len(request_ids)
        for prev, end in zip(ends_s[:-1], ends_s[1:], strict=True):  # as step() subtracts
            self._gaps_s.append(end - prev)
            self._counts.append(n)
        self._run_end_s = ends_s[-1]  # step() made request_ids the last step's

    def forget(self, request_ids: Iterable[int]) -> None:
        """Requests done for good: their last token's time is no longer needed."""
        self._settle()
        for rid in request_ids:
            self._last_s.pop(rid, None)

    def _settle(self) -> None:
        """Write the last step's requests' last token times into ``_last_s``."""
        if self._run_ids:
            self._last_s.update(dict.fromkeys(self._run_ids, self._run_end_s))
            self._run_ids = []

    @property
    def count(self) -> int:
        """Gaps recorded (tokens after each request's first)."""
        return int(np.frombuffer(self._counts, dtype=np.int64).sum()) if self._counts else 0

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(gaps_s, counts)``: each distinct-per-step gap and how many had it (copies)."""
        gaps, counts = self._views()
        return gaps.copy(), counts.copy()

    def _views(self) -> tuple[np.ndarray, np.ndarray]:
        """The pairs as views of the arrays, not copies (a million-request run holds
        millions of them), for this object's own calls that make new arrays from them. A
        view must be gone before the next append, which would otherwise fail: callers
        keep them only while they run."""
        return (np.frombuffer(self._gaps_s, dtype=np.float64),
                np.frombuffer(self._counts, dtype=np.int64))

    def values(self) -> np.ndarray:
        """Every gap, expanded (seconds; as many as :attr:`count`)."""
        gaps, counts = self._views()
        return np.repeat(gaps, counts)

    def stats(self, percentiles: Sequence[float] = (50, 99)) -> dict[str, float]:
        """``mean_s``, ``std_s`` and ``p<q>_s`` for each ``q`` in ``percentiles`` over
        every gap (NaN without one): numpy's ``mean``, ``std`` and ``percentile`` (linear
        interpolation) of :meth:`values` to rounding, without expanding them."""
        gaps, counts = self._views()  # the sort below makes the only new arrays
        total = int(counts.sum())
        out = {"mean_s": math.nan, "std_s": math.nan}
        out.update({f"p{q:g}_s": math.nan for q in percentiles})
        if total == 0:
            return out
        order = np.argsort(gaps, kind="stable")
        gaps, counts = gaps[order], counts[order]
        mean = float((gaps * counts).sum() / total)
        out["mean_s"] = mean
        out["std_s"] = math.sqrt(float((counts * (gaps - mean) ** 2).sum() / total))
        ends = np.cumsum(counts)  # the sorted, expanded list's index after each run

        def at(index: int) -> float:
            return float(gaps[np.searchsorted(ends, index, side="right")])

        for q in percentiles:
            pos = q / 100 * (total - 1)
            lo = math.floor(pos)
            frac = pos - lo
            low = at(lo)
            high = at(min(lo + 1, total - 1))
            out[f"p{q:g}_s"] = low + (high - low) * frac if frac else low
        return out
