"""Which per-step rows a run keeps: all, none, a uniform sample of at most N, or one per
span of simulated time.

Summaries never need the rows (:mod:`.step_stats` keeps their sums); the
rows are for the per-step CSV, timelines and step-through pictures. A million-request
run takes about ten million steps, so keeping them all would take gigabytes.

* ``KeepSteps.all()``: every step (the default of :func:`~pagedsim.engine.simulator.simulate`);
* ``KeepSteps.none()``: no step;
* ``KeepSteps.sample(n)``: every k-th step, k a power of two doubled whenever more than
  ``n`` rows would be kept, so that at most ``n`` rows remain (at least ``n / 2`` once
  the run is longer than ``n`` steps), evenly spread (each kept row is the exact step,
  not an average); a run of at most ``n`` steps keeps them all;
* ``KeepSteps.every(seconds)``: the first step that starts in each span of ``seconds``
  of simulated time.

A sample and a time resolution also keep the run's last step, so that a timeline ends
where the run ends (in a sample that is full, in place of the latest kept step: a sample
of N is at most N rows, the last step included). :func:`parse_keep_steps` reads the CLI's
spelling (``all``, ``none``, ``N``, ``SECONDSs``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..validate import check_choice

KEEP_KINDS = ("all", "none", "sample", "every")
#: The largest sample one run may keep (rows): 10 million, far more than a figure draws.
MAX_SAMPLE_ROWS = 10_000_000
#: ``pagedsim compare``'s default when it writes files: a sample of at most this many
#: steps per scheme, i.e. every step of the default run (the longest of its four schemes
#: takes 98,946), and about 110 MB of rows per scheme however long the run.
DEFAULT_KEEP_STEPS = 200_000


@dataclass(frozen=True, slots=True)
class KeepSteps:
    """Which rows to keep; see the module docstring. ``value``: the sample's most rows
    (``sample``) or the span in simulated seconds (``every``); 0 otherwise."""

    kind: str = "all"
    value: int | float = 0

    def __post_init__(self) -> None:
        check_choice("keep_steps kind", self.kind, KEEP_KINDS)
        if self.kind == "sample":
            v = self.value
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SAMPLE_ROWS:
                raise ValueError(f"a sample keeps 1 to {MAX_SAMPLE_ROWS:,} rows, got {v!r}")
        elif self.kind == "every":
            v = self.value
            if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                    or v <= 0):
                raise ValueError(f"a time resolution must be a finite number of seconds > 0, "
                                 f"got {v!r}")

    @classmethod
    def all(cls) -> KeepSteps:
        return cls("all")

    @classmethod
    def none(cls) -> KeepSteps:
        return cls("none")

    @classmethod
    def sample(cls, max_rows: int) -> KeepSteps:
        return cls("sample", max_rows)

    @classmethod
    def every(cls, seconds: float) -> KeepSteps:
        return cls("every", float(seconds))

    def describe(self) -> str:
        """In words, for help texts and captions."""
        if self.kind == "sample":
            return f"a sample of at most {int(self.value):,} steps"
        if self.kind == "every":
            return f"one step per {self.value:g} s of simulated time"
        return f"{self.kind} steps" if self.kind == "all" else "no step"


#: What :func:`parse_keep_steps` accepts, in words.
KEEP_STEPS_SYNTAX = ("all, none, a number of steps N >= 1 (a sample of at most N) or a time "
                     "resolution in simulated seconds such as 10s")
_SECONDS = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?s")


def parse_keep_steps(text: str) -> KeepSteps:
    """``all``, ``none``, a whole number N >= 1 (a sample of at most N steps) or a plain
    decimal number of seconds followed by ``s`` (``0.5s``: one step per half second of
    simulated time). Raises ``ValueError`` saying what is wrong and what is valid (the
    caller names the text)."""
    t = text.strip().lower()
    if t in ("all", "none"):
        return KeepSteps(t)
    if t.isascii() and t.isdigit() and len(t) <= 18:
        return KeepSteps.sample(int(t))
    if _SECONDS.fullmatch(t):
        return KeepSteps.every(float(t[:-1]))
    raise ValueError(f"not one of: {KEEP_STEPS_SYNTAX}")


class StepKeeper:
    """Keeps the rows :class:`KeepSteps` asks for from chunks of consecutive rows."""

    __slots__ = ("keep", "rows", "every_k", "_seen", "_next_s", "_last")

    def __init__(self, keep: KeepSteps) -> None:
        self.keep = keep
        self.rows: list[tuple] = []
        self.every_k = 1  # a sample keeps the rows whose index is a multiple of it
        self._seen = 0  # rows offered so far
        self._next_s = -math.inf  # every: the next span starts here (simulated seconds)
        self._last: tuple | None = None

    def add_rows(self, chunk: Sequence[tuple], time_index: int) -> None:
        """Offer consecutive rows; ``time_index``: where ``time_s`` is in a row."""
        if not chunk:
            return
        kind = self.keep.kind
        start, self._seen = self._seen, self._seen + len(chunk)
        self._last = chunk[-1]
        if kind == "all":
            self.rows.extend(chunk)
        elif kind == "sample":
            k = self.every_k
            self.rows.extend(chunk[(-start) % k::k])
            while len(self.rows) > self.keep.value:  # thin out: every other kept row
                self.rows = self.rows[::2]
                self.every_k *= 2
        elif kind == "every":
            span = self.keep.value
            for row in chunk:
                t = row[time_index]
                if t >= self._next_s:
                    self.rows.append(row)
                    self._next_s = (math.floor(t / span) + 1) * span

    def finish(self) -> list[tuple]:
        """The kept rows, with the last step added to a sample or a time resolution."""
        if self.keep.kind in ("sample", "every") and self._last is not None \
                and (not self.rows or self.rows[-1] is not self._last):
            if self.keep.kind == "sample" and len(self.rows) >= self.keep.value:
                # A full sample: the last step takes the latest kept row's place, so that
                # "at most N" holds with it (appending made N + 1).
                self.rows[-1] = self._last
            else:
                self.rows.append(self._last)
        return self.rows
