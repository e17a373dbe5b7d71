"""Running experiments: one scheme (:func:`run_scheme`), many in parallel (:func:`run_many`),
and every scheme on one workload (:func:`compare`), plus the frames built from the results.

Runs are independent and seeded, so they go to separate processes through joblib, or to
a Dask cluster inside ``with DaskRunner(address):`` (:mod:`.dask_runner`), and the results
do not depend on how many or where.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..accounting import CATEGORIES
from ..metrics import summarize
from ..schemes import DEFAULT_SCHEMES
from ..validate import check_choice
from .spec import JSON_KEYS, PARTS, Experiment, check_schemes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def run_scheme(exp: Experiment, scheme: str, progress: bool = False,
               keep_steps: bool = True) -> tuple[dict[str, Any], pd.DataFrame | None]:
    """Simulate ``exp`` under ``scheme``; returns (summary, per-step frame or None).

    A module-level function so joblib can send it to worker processes. The summary is
    :func:`pagedsim.metrics.summarize` plus the experiment's parameters.
    """
    from ..schemes import make_allocator
    from ..simulator import simulate

    sched = exp.scheduler_config()
    alloc = make_allocator(scheme, exp.capacity_slots(), exp.block_size, exp.max_model_len,
                           model=exp.model, max_num_seqs=sched.max_num_seqs)
    requests = exp.requests()
    result = simulate(requests, alloc, exp.cost_model(), sched,
                      scheme=scheme, progress=progress)
    steps = result.steps()
    summary = summarize(result, steps)
    summary.update(block_size=exp.block_size, rate_per_s=exp.arrival_rate_per_s(requests),
                   n=exp.n, beam_width=exp.beam_width, preemption=exp.preemption,
                   workload=exp.workload, seed=exp.seed)
    return summary, (steps if keep_steps else None)


def _n_jobs(jobs: int | None, num_tasks: int) -> int:
    """Worker processes to use: ``jobs`` (-1 or None = every CPU), at most one per task."""
    cpus = os.cpu_count() or 1
    want = cpus if jobs is None or jobs < 0 else max(1, jobs)
    return max(1, min(want, num_tasks))


def run_many(tasks: Sequence[tuple[Experiment, str]], jobs: int | None = None,
             progress: bool | None = None, desc: str = "runs", keep_steps: bool = False,
             ) -> list[tuple[dict[str, Any], pd.DataFrame | None] | None]:
    """Run every ``(experiment, scheme)`` task; results in task order.

    ``jobs`` worker processes (joblib, loky backend unless the caller selected another with
    ``joblib.parallel_config``); with one job everything runs here and each run shows its
    own request bar. Inside ``with DaskRunner(address):`` the tasks go to that Dask
    cluster instead (``jobs`` is then unused) and a task that failed twice there comes
    back as ``None`` and is listed in the runner's ``failures``; elsewhere an error is
    raised. ``progress``: an outer tqdm bar on stderr over tasks (None = only when stderr
    is a terminal), drawn once a run has taken more than a second.
    """
    from .dask_runner import active_runner

    if progress is None:
        progress = sys.stderr.isatty()
    runner = active_runner()
    n_jobs = 1 if runner is not None else _n_jobs(jobs, len(tasks))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), desc=desc, unit="run", file=sys.stderr, delay=1.0,
                   leave=False)
    out: list[Any] = [None] * len(tasks)
    try:
        if runner is not None:
            out = runner.run(tasks, keep_steps=keep_steps, desc=desc,
                             on_done=None if bar is None else lambda: bar.update(1))
        elif n_jobs == 1:
            for i, (exp, scheme) in enumerate(tasks):
                out[i] = run_scheme(exp, scheme, progress=progress, keep_steps=keep_steps)
                if bar is not None:
                    bar.update(1)
        else:
            from joblib import Parallel, delayed

            def indexed(i: int, exp: Experiment, scheme: str) -> tuple[int, Any]:
                return i, run_scheme(exp, scheme, progress=False, keep_steps=keep_steps)

            parallel = Parallel(n_jobs=n_jobs, return_as="generator_unordered")
            for i, res in parallel(delayed(indexed)(i, e, s) for i, (e, s) in enumerate(tasks)):
                out[i] = res
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return out


@dataclass
class Comparison:
    """What :func:`compare` returns: the experiment, one summary row per scheme (in the
    order asked), and the per-step frames by scheme (empty if not kept)."""

    experiment: Experiment
    summary: pd.DataFrame
    steps: dict[str, pd.DataFrame] = field(default_factory=dict)
    part: str = "saturated"


def compare(exp: Experiment, schemes: Sequence[str] = DEFAULT_SCHEMES,
            jobs: int | None = None, progress: bool | None = None,
            keep_steps: bool = True, part: str = "saturated") -> Comparison:
    """Replay ``exp``'s workload through each scheme; see :func:`shares_frame` for ``part``."""
    import pandas as pd

    schemes = check_schemes(schemes)
    check_choice("part", part, PARTS)
    results = run_many([(exp, s) for s in schemes], jobs=jobs, progress=progress,
                       desc="schemes", keep_steps=keep_steps)
    # A run that failed on a Dask cluster (None) is left out; the runner lists it.
    summary = pd.DataFrame.from_records([r[0] for r in results if r is not None])
    steps = {s: r[1] for s, r in zip(schemes, results, strict=True)
             if r is not None and r[1] is not None}
    return Comparison(exp, summary, steps, part)


def shares_frame(summary: pd.DataFrame, part: str = "saturated") -> pd.DataFrame:
    """Per scheme the five shares of the chosen ``part`` as plain category columns, plus
    ``part``: the part actually used. ``"saturated"`` falls back to ``"all"`` for a scheme
    that never had requests waiting (its saturated shares are NaN)."""
    check_choice("part", part, PARTS)
    df = summary.copy()
    use_sat = df["sat_token"].notna() if part == "saturated" else df["sat_token"].isna() & False
    for c in CATEGORIES:
        df[c] = df[f"sat_{c}"].where(use_sat, df[f"all_{c}"])
    df["part"] = ["saturated" if u else "all" for u in use_sat]
    return df


def json_rows(cmp: Comparison) -> list[dict[str, Any]]:
    """``pagedsim compare --json``: one dict per scheme, :data:`JSON_KEYS` first (shares
    are fractions summing to 1), then which part they cover and a few more numbers."""
    df = shares_frame(cmp.summary, cmp.part)
    extra = ("part", "saturated_time_fraction", "sat_mean_batch_size", "requests_per_s",
             "p50_normalized_latency_s", "p90_normalized_latency_s", "sharing_saving",
             "swaps", "cow_copies", "num_steps", "makespan_s", "capacity_slots")
    rows = []
    for rec in df.to_dict("records"):
        rows.append({k: _plain(rec[k]) for k in (*JSON_KEYS, *extra)})
    return rows


def _plain(v: Any) -> Any:
    """numpy scalars -> Python numbers; NaN -> None (JSON has no NaN)."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v
