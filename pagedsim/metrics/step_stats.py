"""Per-step sums kept as a run goes, so that a run's summary needs no per-step record.

:class:`StepStats` takes the simulator's per-step rows (tuples in the order of
:data:`.sim_result.STEP_COLUMNS`) in chunks and keeps only what
:func:`.summary.summarize` reads: for the whole run, for the
saturated steps (requests waiting) and for the steps that hold blocks, the sums of
``step_time_s``, of each slot category times ``step_time_s`` and unweighted, of the
batch sizes, of the prefix-cache and prefill counters, and the last row.

Exact sums, bounded memory
--------------------------
Integer sums are exact (Python ints). A float sum depends on the order of its additions,
and summaries used to be numpy's pairwise sums over every step of the run at once. So
the rows wait in a buffer of :data:`BLOCK_STEPS` steps (about 11 MB of float64 columns);
each full block is summed by numpy as the whole-run frame was, and block sums are added
in order. A run of at most :data:`BLOCK_STEPS` steps (every committed figure's: the
longest has 98,946) therefore gets exactly the numbers the whole-run frame gave; a longer
one differs from a whole-run pairwise sum by rounding only (relative 1e-15), and is the
same whether or not its steps are kept, since every summary comes from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

#: Steps per block of exact (numpy pairwise) float sums; see the module docstring.
BLOCK_STEPS = 1 << 17
#: The slot categories, then capacity, as STEP_COLUMNS names them (capacity last).
SLOT_COLUMNS = ("token", "reserved", "internal_frag", "cached", "external_frag", "free",
                "capacity")
#: Counters summed exactly over every step.
COUNT_COLUMNS = ("prefill_tokens", "prefill_tokens_cached", "prefix_query_tokens",
                 "prefix_hit_tokens", "evictions", "cow_copies")
#: Every column a block keeps, in its order (float64: the step counts are far below 2**53).
_KEPT = ("step_time_s", "waiting", "batched_requests", "physical_blocks", "logical_blocks",
         *SLOT_COLUMNS, *COUNT_COLUMNS)


@dataclass(slots=True)
class PartSums:
    """Sums over one part of a run's steps (all of them, or the saturated ones).

    ``time_s``: the sum of ``step_time_s`` (seconds); ``weighted[c]``: of ``c`` slots x
    ``step_time_s`` (slot-seconds); ``plain[c]``: of ``c`` slots (as float64, the
    equal-weight fallback when every step lasted 0 s); ``steps``: how many;
    ``batched``/``ran``: batched requests summed over, and the number of, steps that
    ran anything.
    """

    steps: int = 0
    time_s: float = 0.0
    weighted: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SLOT_COLUMNS, 0.0))
    plain: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SLOT_COLUMNS, 0.0))
    batched: int = 0
    ran: int = 0

    def add(self, col: dict[str, np.ndarray]) -> None:
        """Add one block's (already selected) columns."""
        w = col["step_time_s"]
        self.steps += len(w)
        self.time_s += float(w.sum())
        for c in SLOT_COLUMNS:
            # As the whole-run frame did: int column x float weights, numpy's pairwise sum.
            self.weighted[c] += float((col[c] * w).sum())
            self.plain[c] += float(col[c].sum())
        b = col["batched_requests"]
        ran = b[b > 0]
        self.ran += len(ran)
        self.batched += int(ran.sum())


class StepStats:
    """Running sums of a run's per-step rows; see the module docstring.

    Feed rows with :meth:`add_rows` (any chunking gives the same sums), then read the
    sums after :meth:`finish` (which sums the last, partial block).
    """

    __slots__ = ("all", "sat", "used_steps", "used_time_s", "used_saving", "used_saving_plain",
                 "counts", "last_row", "_columns", "_pending", "_pending_rows", "_finished")

    def __init__(self, columns: Sequence[str]) -> None:
        self._columns = [columns.index(c) for c in _KEPT]  # row positions of _KEPT
        self.all = PartSums()
        self.sat = PartSums()
        #: Steps holding any block (``logical_blocks > 0``): how many, their time, and the
        #: sums of ``(1 - physical / logical)`` weighted by ``step_time_s`` and not.
        self.used_steps = 0
        self.used_time_s = 0.0
        self.used_saving = 0.0
        self.used_saving_plain = 0.0
        self.counts: dict[str, int] = dict.fromkeys(COUNT_COLUMNS, 0)
        self.last_row: tuple | None = None
        self._pending: list[np.ndarray] = []  # float64 blocks of _KEPT columns, row-major
        self._pending_rows = 0
        self._finished = False

    @classmethod
    def from_rows(cls, rows: Iterable[tuple], columns: Sequence[str]) -> StepStats:
        """The sums of ``rows`` (all of a run's steps), finished."""
        stats = cls(columns)
        rows = list(rows)
        for start in range(0, len(rows), BLOCK_STEPS):
            stats.add_rows(rows[start:start + BLOCK_STEPS])
        stats.finish()
        return stats

    @property
    def num_steps(self) -> int:
        """Steps added so far."""
        return self.all.steps + self._pending_rows

    def add_rows(self, rows: Sequence[tuple]) -> None:
        """Add consecutive per-step rows (tuples in the simulator's column order)."""
        if not rows:
            return
        if self._finished:
            raise RuntimeError("StepStats.add_rows after finish()")
        self.last_row = rows[-1]
        # One C-level conversion per chunk (fromiter over the flattened rows: about half
        # the time np.array takes on a list of tuples); exact in float64 (ints < 2**53).
        width = len(rows[0])
        flat = np.fromiter(chain.from_iterable(rows), dtype=np.float64, count=len(rows) * width)
        block = flat.reshape(len(rows), width)[:, self._columns]
        self._pending.append(block)
        self._pending_rows += len(block)
        while self._pending_rows >= BLOCK_STEPS:
            self._sum_block(BLOCK_STEPS)

    def finish(self) -> None:
        """Sum the last, partial block; no row may be added after."""
        if not self._finished and self._pending_rows:
            self._sum_block(self._pending_rows)
        self._finished = True

    def _sum_block(self, size: int) -> None:
        """Sum the first ``size`` pending rows as one block."""
        rows = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        block, rest = rows[:size], rows[size:]
        self._pending = [rest] if len(rest) else []
        self._pending_rows = len(rest)
        # Contiguous columns, as the frame's were (the order of a float sum matters).
        col = {name: np.ascontiguousarray(block[:, i]) for i, name in enumerate(_KEPT)}
        self.all.add(col)
        sat = col["waiting"] > 0
        self.sat.add({name: values[sat] for name, values in col.items()})
        used = col["logical_blocks"] > 0
        w = col["step_time_s"][used]
        saving = 1.0 - col["physical_blocks"][used] / col["logical_blocks"][used]
        self.used_steps += len(w)
        self.used_time_s += float(w.sum())
        self.used_saving += float((saving * w).sum())
        self.used_saving_plain += float(saving.sum())
        for c in COUNT_COLUMNS:
            self.counts[c] += int(col[c].sum())
