"""The record of one run: what :func:`pagedsim.engine.simulator.simulate` hands back.

:data:`STEP_COLUMNS` names the fields of a per-step row, in order (the simulator writes
them; :mod:`.step_stats` sums them and :mod:`.step_keep` keeps the rows asked for), and
:class:`SimResult` holds the run's sums, the kept rows, one row per request
(:mod:`.request_log`), the inter-token gaps (:mod:`.token_gaps`) and a host tier's numbers
(:mod:`.host_stats`). Slot columns are in token slots, times in simulated seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .host_stats import HostStats
from .request_log import RequestLog
from .step_keep import KeepSteps
from .step_stats import StepStats
from .token_gaps import TokenGaps

__all__ = ["STEP_COLUMNS", "SimResult"]

STEP_COLUMNS = (
    "step", "time_s", "step_time_s", "running", "batched_requests", "waiting", "swapped",
    "token", "reserved", "internal_frag", "cached", "external_frag", "free", "capacity",
    "physical_blocks", "logical_blocks", "prefill_tokens", "decode_seqs",
    "preemptions", "swaps_out", "swaps_in", "cow_copies", "finished",
    "prefill_tokens_cached", "prefix_query_tokens", "prefix_hit_tokens", "evictions",
)  # fmt: skip


@dataclass(slots=True)
class SimResult:
    """What one run keeps; :mod:`.summary` turns it into summaries.

    ``step_rows``: the kept per-step tuples (:data:`STEP_COLUMNS`), all of them unless the
    run was asked to keep fewer (``steps_total`` says how many there were);
    ``stats``: the sums over every step (None for a result built by hand from
    ``step_rows``, whose sums are then computed from them); ``request_log``: one row per
    request (``request_rows`` as tuples).
    """

    scheme: str
    capacity_slots: int
    _step_rows: list[tuple] = field(default_factory=list)
    request_log: RequestLog = field(default_factory=RequestLog)
    stats: StepStats | None = None
    keep_steps: KeepSteps = field(default_factory=KeepSteps)
    num_preemptions: int = 0
    num_swaps_out: int = 0
    num_cow_copies: int = 0
    #: Requests that can never run, with the scheduler's reason: ``(request_id, reason)``.
    rejections: list[tuple[int, str]] = field(default_factory=list)
    #: The host tier's numbers (:mod:`.host_stats`), or None when the run had none.
    host: HostStats | None = None
    #: Inter-token latencies (:mod:`.token_gaps`); None only in a result built by hand.
    token_gaps: TokenGaps | None = None

    @property
    def step_rows(self) -> list[tuple]:
        """The kept per-step rows (tuples in :data:`STEP_COLUMNS` order)."""
        return self._step_rows

    @step_rows.setter
    def step_rows(self, rows: list[tuple]) -> None:
        # Rows set by hand are the whole run: its sums are recomputed from them.
        self._step_rows = rows
        self.stats = None
        self.keep_steps = KeepSteps.all()

    @property
    def request_rows(self) -> list[tuple]:
        """Per-request rows as tuples (:data:`REQUEST_COLUMNS`), by arrival then id."""
        return list(self.request_log.rows())

    @request_rows.setter
    def request_rows(self, rows: Iterable[tuple]) -> None:
        self.request_log = RequestLog(rows)

    @property
    def steps_total(self) -> int:
        """Steps the run took (kept or not)."""
        return self.stats.num_steps if self.stats is not None else len(self._step_rows)

    @property
    def steps_sampled(self) -> bool:
        """Whether :attr:`step_rows` holds fewer steps than the run took."""
        return len(self._step_rows) < self.steps_total

    def step_stats(self) -> StepStats:
        """The sums over every step (computed from ``step_rows`` for a hand-made result)."""
        if self.stats is None:
            return StepStats.from_rows(self._step_rows, STEP_COLUMNS)
        return self.stats

    def steps(self):
        """The kept per-step records as a pandas DataFrame (slot columns in token slots)."""
        import pandas as pd

        return pd.DataFrame.from_records(self._step_rows, columns=list(STEP_COLUMNS))

    def requests(self):
        """Per-request records as a pandas DataFrame (times in simulated seconds), with
        latency, normalized latency, TTFT and TPOT (:meth:`RequestLog.frame`)."""
        return self.request_log.frame()
