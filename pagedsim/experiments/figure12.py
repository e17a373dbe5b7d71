"""The vLLM paper's Figure 12: normalized latency (seconds per output token) against the
request rate, for the four schemes in the paper's setting (OPT-13B on one A100-40GB, the
ShareGPT-like load), and the rate each one sustains before its latency rises sharply.

The runs are the rate sweep's (:func:`pagedsim.experiments.sweeps.sweep_rate`, 800
requests, its base experiment) over a finer grid of rates, :data:`FIGURE12_RATES`. The
latency of a rate is its runs' median normalized latency (``p50_normalized_latency_s``:
each request's end-to-end latency over its output length; the paper plots the mean,
which one request stuck behind a long queue can move on its own). A scheme *sustains* a
rate while that latency stays within :data:`LATENCY_FACTOR` times its latency at the
lowest rate (where no request waits); the rate at which it crosses is interpolated
linearly between the two grid rates around the crossing (:func:`sustained_rate`). The
ratios of the paged scheme's sustained rate over Oracle's and Max's are printed beside
the paper's (:data:`pagedsim.paper.FIGURE12_RATIOS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..memory.schemes import DEFAULT_SCHEMES
from ..paper import FIGURE12_RATIOS, FIGURE12_SOURCE, PAPER_NAMES
from .spec import Experiment
from .sweeps import sweep_rate

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Request rates (requests/s) of Figure 12: fine where the contiguous schemes give out.
FIGURE12_RATES = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0)
#: A scheme sustains a rate while its normalized latency is at most this many times its
#: latency at the lowest rate.
LATENCY_FACTOR = 2.0
#: The latency column drawn and read (seconds per output token).
LATENCY_COLUMN = "p50_normalized_latency_s"


def sustained_rate(rates: Sequence[float], latencies_s: Sequence[float],
                   factor: float = LATENCY_FACTOR) -> tuple[float, bool]:
    """The rate (requests/s) at which ``latencies_s`` (one per rate, rates increasing)
    first exceeds ``factor`` x its first value, interpolated linearly between the grid
    rates around the crossing; and whether it crossed at all (False: the latency never
    rose that far, and the last rate is returned, a lower bound)."""
    if len(rates) != len(latencies_s) or not rates:
        raise ValueError("sustained_rate needs one latency per rate, and at least one")
    if any(b <= a for a, b in zip(rates, rates[1:], strict=False)):
        raise ValueError(f"rates must increase, got {list(rates)}")
    limit = factor * latencies_s[0]
    for i in range(1, len(rates)):
        lo, hi = latencies_s[i - 1], latencies_s[i]
        if hi > limit:
            share = (limit - lo) / (hi - lo) if hi > lo else 0.0
            return rates[i - 1] + share * (rates[i] - rates[i - 1]), True
    return float(rates[-1]), False


def sustained_rates(df: pd.DataFrame) -> dict[str, tuple[float, bool]]:
    """:func:`sustained_rate` of every scheme of a Figure 12 frame, by scheme."""
    out = {}
    for scheme, part in df.groupby("scheme", sort=False):
        part = part.sort_values("rate_per_s")
        out[str(scheme)] = sustained_rate(part["rate_per_s"].tolist(),
                                          part[LATENCY_COLUMN].tolist())
    return out


def figure12_base() -> Experiment:
    """The runs' base experiment: the rate sweep's (800 ShareGPT-like requests, the
    paper's OPT-13B setting, preemption by recomputation)."""
    return Experiment(workload="sharegpt", num_requests=800, preemption="recompute")


def figure12(exp: Experiment | None = None, rates: Sequence[float] = FIGURE12_RATES,
             schemes: Sequence[str] = DEFAULT_SCHEMES, jobs: int | None = None,
             progress: bool | None = None) -> pd.DataFrame:
    """One run per (rate, scheme) of ``exp`` (default :func:`figure12_base`): the rate
    sweep's frame over ``rates``."""
    return sweep_rate(exp or figure12_base(), rates, schemes, jobs=jobs, progress=progress)


def ratio_lines(df: pd.DataFrame) -> list[str]:
    """The sustained rate of each scheme, and the paged scheme's over Oracle's and Max's
    beside the paper's ranges, as printable lines."""
    rates = sustained_rates(df)
    lines = [f"sustained rate (normalized latency within {LATENCY_FACTOR:g}x its value at "
             f"{df['rate_per_s'].min():g} req/s):"]
    for scheme, (rate, crossed) in rates.items():
        bound = "" if crossed else " (never crossed: at least)"
        lines.append(f"  {scheme:<18} {rate:5.2f} req/s{bound}")
    if "paged" in rates:
        for other, (low, high) in FIGURE12_RATIOS.items():
            if other in rates:
                ratio = rates["paged"][0] / rates[other][0]
                lines.append(f"  paged / {other}: {ratio:.2f}x (paper: vLLM / "
                             f"{PAPER_NAMES[other]} {low:g}-{high:g}x, {FIGURE12_SOURCE})")
    return lines


def paged_ratio(df: pd.DataFrame, other: str) -> float:
    """The paged scheme's sustained rate over ``other``'s (NaN if either is missing)."""
    rates = sustained_rates(df)
    if "paged" not in rates or other not in rates:
        return math.nan
    return rates["paged"][0] / rates[other][0]
