"""Running experiments: many runs in parallel (:func:`run_many`), and every scheme on one
workload (:func:`compare`), plus the frames built from the results. One run is
:func:`~pagedsim.experiments.run_one.run_scheme` (importable from here too).

Runs are independent and seeded, so they go to separate processes through joblib, or to
a Dask cluster inside ``with DaskRunner(address):`` (:mod:`.dask_runner`), and the results
do not depend on how many or where.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..memory.accounting import CATEGORIES
from ..memory.schemes import DEFAULT_SCHEMES
from ..metrics.host_stats import HOST_KEYS
from ..metrics.serving_report import serving_fields
from ..metrics.summary import LATENCY_KEYS
from ..validate import check_choice
from .dask_runner import active_runner
from .run_one import PROGRESS_EVERY_S, KeepArg, run_scheme
from .spec import JSON_KEYS, PARTS, Experiment, check_schemes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["PROGRESS_EVERY_S", "Comparison", "compare", "json_rows", "run_many", "run_scheme",
           "shares_frame", "task_requests"]


def task_requests(tasks: Sequence[tuple[Experiment, str]]) -> list[int]:
    """Requests each ``(experiment, scheme)`` task simulates. A trace is loaded to count
    them, once per file and loading options (rescaling to a rate keeps the count)."""
    counts: dict[tuple[Any, ...], int] = {}
    out = []
    for exp, _ in tasks:
        if not exp.is_trace:
            out.append(int(exp.num_requests))
            continue
        key = (exp.workload, exp.num_requests, exp.on_too_long, exp.skip_zero_output,
               exp.model)
        if key not in counts:  # one pass over the file, keeping no request
            counts[key] = replace(exp, rate_per_s=None).trace_scan().num_requests
        out.append(counts[key])
    return out


def _n_jobs(jobs: int | None, num_tasks: int) -> int:
    """Worker processes to use: ``jobs`` (-1 or None = every CPU), at most one per task
    and one per CPU (the runs are CPU-bound: more processes run no faster, and each holds
    its own pool, up to gigabytes; the start line says how many ran)."""
    cpus = os.cpu_count() or 1
    want = cpus if jobs is None or jobs < 0 else max(1, jobs)
    return max(1, min(want, num_tasks, cpus))


def run_many(tasks: Sequence[tuple[Experiment, str]], jobs: int | None = None,
             progress: bool | None = None, desc: str = "runs", keep_steps: KeepArg = False,
             ) -> list[tuple[dict[str, Any], pd.DataFrame | None] | None]:
    """Run every ``(experiment, scheme)`` task; results in task order.

    ``jobs`` worker processes (joblib, loky backend unless the caller selected another with
    ``joblib.parallel_config``); with one job everything runs here. Inside ``with
    DaskRunner(address):`` the tasks go to that Dask cluster instead (``jobs`` is then
    unused) and a task that failed twice there comes back as ``None`` and is listed in
    the runner's ``failures``; elsewhere an error is raised.

    ``progress`` (None = only when stderr is a terminal): one tqdm bar on stderr, shown
    after half a second, counting the requests finished over all tasks as the runs
    advance, with tqdm's estimate of the time left and the simulated time the slowest
    run has reached (worker processes report through a multiprocessing manager's queue,
    every :data:`PROGRESS_EVERY_S` s); on a Dask cluster it counts finished runs.
    ``keep_steps``: :func:`run_scheme`'s (True: every step, False: none, or a
    :class:`~pagedsim.metrics.step_keep.KeepSteps`).
    """
    if progress is None:
        progress = sys.stderr.isatty()
    runner = active_runner()
    n_jobs = 1 if runner is not None else _n_jobs(jobs, len(tasks))
    if runner is not None:  # one tick per finished future
        with _bar(progress, len(tasks), desc, "run") as bar:
            return runner.run(tasks, keep_steps=keep_steps, desc=desc,
                              on_done=None if bar is None else lambda: bar.update(1))
    totals = task_requests(tasks) if progress else [0] * len(tasks)
    out: list[Any] = [None] * len(tasks)
    with _bar(progress, sum(totals), desc, "req") as bar:
        tally = _Tally(bar, len(tasks))
        if n_jobs == 1:
            for i, (exp, scheme) in enumerate(tasks):
                out[i] = run_scheme(exp, scheme, keep_steps=keep_steps,
                                    on_progress=None if bar is None else tally.reporter(i))
            return out
        from joblib import Parallel, delayed

        with _progress_queue(bar is not None) as queue:
            def indexed(i: int, exp: Experiment, scheme: str) -> tuple[int, Any]:
                report = None if queue is None else _QueueReport(queue, i)
                return i, run_scheme(exp, scheme, keep_steps=keep_steps, on_progress=report)

            drain = None if queue is None else tally.drain(queue)
            try:
                parallel = Parallel(n_jobs=n_jobs, return_as="generator_unordered")
                for i, res in parallel(delayed(indexed)(i, e, s)
                                       for i, (e, s) in enumerate(tasks)):
                    out[i] = res
                    if queue is not None:
                        queue.put((i, totals[i], math.inf))
                    elif bar is not None:
                        tally.set(i, totals[i], math.inf)
            finally:
                if drain is not None:
                    queue.put(None)
                    drain.join()
    return out


@contextmanager
def _bar(show: bool, total: int, desc: str, unit: str) -> Iterator[Any]:
    """A tqdm bar on stderr (None if not ``show``), shown once it has run half a second,
    closed on exit."""
    if not show:
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, delay=0.5, leave=False,
               unit_scale=unit == "req")
    try:
        yield bar
    finally:
        bar.close()


class _Tally:
    """Requests done per task, summed into one bar, and the simulated time of the task
    furthest behind beside it (updated from one thread at a time)."""

    def __init__(self, bar: Any, num_tasks: int) -> None:
        self.bar = bar
        self.done = [0] * num_tasks
        self.simulated_s = [0.0] * num_tasks  # inf once a task is over

    def set(self, i: int, done: int, simulated_s: float = math.nan) -> None:
        """Task ``i`` has ``done`` requests done (never goes back) and has simulated
        ``simulated_s`` seconds (inf: it is over)."""
        if not math.isnan(simulated_s):
            self.simulated_s[i] = simulated_s
        delta = done - self.done[i]
        if delta > 0 and self.bar is not None:
            self.done[i] = done
            behind = min(self.simulated_s)
            if math.isfinite(behind) and behind > 0:
                self.bar.set_postfix_str(f"simulated {behind:,.0f} s", refresh=False)
            self.bar.update(delta)

    def reporter(self, i: int) -> Callable[[int, float], None]:
        return lambda done, simulated_s: self.set(i, done, simulated_s)

    def drain(self, queue: Any) -> threading.Thread:
        """A thread applying ``(task, done)`` messages from ``queue`` until ``None``."""
        def loop() -> None:
            while (msg := queue.get()) is not None:
                self.set(*msg)

        thread = threading.Thread(target=loop, name="pagedsim-progress", daemon=True)
        thread.start()
        return thread


class _QueueReport:
    """``on_progress`` for a worker process: posts ``(task, done)`` to a manager queue
    (picklable, unlike a closure)."""

    def __init__(self, queue: Any, task: int) -> None:
        self.queue, self.task = queue, task

    def __call__(self, done: int, simulated_s: float) -> None:
        try:
            self.queue.put((self.task, done, simulated_s))
        except Exception:  # progress must never fail a run (the manager may be gone)
            pass


@contextmanager
def _progress_queue(wanted: bool) -> Iterator[Any]:
    """A queue worker processes can post progress to (a multiprocessing manager's), or
    None if not ``wanted`` or if no manager can start here."""
    if not wanted:
        yield None
        return
    import multiprocessing

    try:
        manager = multiprocessing.Manager()
    except (OSError, EOFError, RuntimeError):
        yield None  # one tick per finished run instead
        return
    with manager:
        yield manager.Queue()


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
            keep_steps: KeepArg = True, part: str = "saturated") -> Comparison:
    """Replay ``exp``'s workload through each scheme; see :func:`shares_frame` for ``part``.
    ``keep_steps``: which per-step rows :attr:`Comparison.steps` holds (True: all; False:
    none; or a :class:`~pagedsim.metrics.step_keep.KeepSteps`); summaries never depend
    on it."""
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
    """Per scheme the six shares of the chosen ``part`` as plain category columns, plus
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
             "p50_normalized_latency_s", "p90_normalized_latency_s", *LATENCY_KEYS,
             "sharing_saving", "swaps", "cow_copies", "num_steps", "makespan_s",
             "capacity_slots", "preempted_requests", "prefix_queries", "prefix_hits")
    extra += tuple(k for k in ("host_cache_gb", *HOST_KEYS) if k in df.columns)  # a tier
    rows = []
    for rec in df.to_dict("records"):
        row = {k: _plain(rec[k]) for k in (*JSON_KEYS, *extra)}
        row["benchmark_serving"] = serving_json(cmp.experiment, rec)
        rows.append(row)
    return rows


def serving_json(exp: Experiment, rec: dict[str, Any]) -> dict[str, Any]:
    """One scheme's benchmark_serving fields under vLLM's result-file names
    (:mod:`pagedsim.metrics.serving_report`), with the load's ``request_rate`` (``"inf"`` for all at
    once, as vLLM writes it; None for a trace at its recorded times) and
    ``max_concurrency`` (None: no limit)."""
    rate = exp.rate_per_s
    fields = {k: _plain(v) for k, v in serving_fields(rec).items()}
    return {"request_rate": None if rate is None else ("inf" if math.isinf(rate) else rate),
            "max_concurrency": exp.max_concurrency, **fields}


def _plain(v: Any) -> Any:
    """numpy scalars -> Python numbers; NaN -> None (JSON has no NaN)."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v
