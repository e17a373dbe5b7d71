"""One run: one scheme on one experiment, the unit of work that the runners (joblib
processes, :mod:`.runner`; Dask workers, :mod:`.dask_runner`) send out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..engine.simulator import REQUEST_COLUMNS, simulate
from ..memory.schemes import make_allocator
from .metrics import summarize
from .spec import Experiment

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def run_scheme(exp: Experiment, scheme: str, progress: bool = False,
               keep_steps: bool = True, on_progress: Callable[[int], None] | None = None,
               ) -> tuple[dict[str, Any], pd.DataFrame | None]:
    """Simulate ``exp`` under ``scheme``; returns (summary, per-step frame or None).

    A module-level function so joblib can send it to worker processes. The summary is
    :func:`pagedsim.experiments.metrics.summarize` plus ``preempted_requests`` (requests preempted
    at
    least once; ``preemptions`` counts preemption events) and the experiment's
    parameters. ``progress``: the simulator's own tqdm bar. ``on_progress(done)`` is
    called with the number of requests done (finished or rejected) as the run advances,
    at most every :data:`PROGRESS_EVERY_S` seconds of wall time, and once at the end
    with all of them.
    """
    sched = exp.scheduler_config()
    alloc = make_allocator(scheme, exp.capacity_slots(), exp.block_size, exp.max_model_len,
                           model=exp.model, max_num_seqs=sched.max_num_seqs)
    requests = exp.requests()
    on_step = None if on_progress is None else _step_counter(on_progress)
    result = simulate(requests, alloc, exp.cost_model(), sched,
                      scheme=scheme, progress=progress, on_step=on_step)
    if on_progress is not None:
        on_progress(len(requests))
    steps = result.steps()
    summary = summarize(result, steps)
    # ``preemptions`` counts events; a request may be preempted several times.
    k = REQUEST_COLUMNS.index("num_preemptions")
    summary["preempted_requests"] = sum(1 for row in result.request_rows if row[k])
    summary.update(block_size=exp.block_size, rate_per_s=exp.arrival_rate_per_s(requests),
                   n=exp.n, beam_width=exp.beam_width, preemption=exp.preemption,
                   workload=exp.workload, seed=exp.seed)
    return summary, (steps if keep_steps else None)


#: Seconds of wall time between two progress reports of one run (:func:`run_scheme`).
PROGRESS_EVERY_S = 0.25


def _step_counter(report: Callable[[int], None]) -> Callable[[Any, Any], None]:
    """An ``on_step`` hook for :func:`pagedsim.engine.simulator.simulate` that counts requests
    finished or rejected and calls ``report(done)`` at most every
    :data:`PROGRESS_EVERY_S` seconds."""
    done = 0
    last = time.monotonic()

    def on_step(sched: Any, plan: Any) -> None:
        nonlocal done, last
        if plan.finished or plan.rejected:
            done += len(plan.finished) + len(plan.rejected)
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S:
                last = now
                report(done)

    return on_step
