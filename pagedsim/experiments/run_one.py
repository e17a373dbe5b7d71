"""One run: one scheme on one experiment, the unit of work that the runners (joblib
processes, :mod:`.runner`; Dask workers, :mod:`.dask_runner`) send out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..engine.simulator import simulate
from ..memory.schemes import make_allocator
from ..metrics.step_keep import KeepSteps
from ..metrics.summary import summarize
from .spec import Experiment

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: What ``keep_steps`` may be: which per-step rows come back (:class:`KeepSteps`), or
#: True (all) / False (none).
KeepArg = bool | KeepSteps


def keep_of(keep_steps: KeepArg) -> KeepSteps:
    """``keep_steps`` as a :class:`KeepSteps` (True: all, False: none)."""
    if isinstance(keep_steps, KeepSteps):
        return keep_steps
    if isinstance(keep_steps, bool):
        return KeepSteps.all() if keep_steps else KeepSteps.none()
    raise TypeError(f"keep_steps must be True, False or a KeepSteps, got {keep_steps!r}")


def run_scheme(exp: Experiment, scheme: str, progress: bool = False,
               keep_steps: KeepArg = True,
               on_progress: Callable[[int, float], None] | None = None,
               ) -> tuple[dict[str, Any], pd.DataFrame | None]:
    """Simulate ``exp`` under ``scheme``; returns (summary, per-step frame or None).

    A module-level function so joblib can send it to worker processes. The summary is
    :func:`pagedsim.metrics.summary.summarize` plus ``preempted_requests`` (requests
    preempted at least once; ``preemptions`` counts preemption events) and the
    experiment's parameters; it never depends on ``keep_steps``, which says which
    per-step rows the frame holds (True: all, False: none, or a :class:`KeepSteps`: a
    sample, one per span of simulated time). Requests are made, or read from the trace
    file, as the run goes (:meth:`Experiment.iter_requests`).

    ``progress``: the simulator's own tqdm bar. ``on_progress(done, simulated_s)`` is
    called with the number of requests done (finished or rejected) and the simulated
    clock as the run advances, at most every :data:`PROGRESS_EVERY_S` seconds of wall
    time, and once at the end with all of them.
    """
    keep = keep_of(keep_steps)
    sched = exp.scheduler_config()
    alloc = make_allocator(scheme, exp.capacity_slots(), exp.block_size, exp.max_model_len,
                           model=exp.model, max_num_seqs=sched.max_num_seqs,
                           host_cache_blocks=exp.host_cache_blocks(),
                           host_write_through=exp.host_write_through)
    result = simulate(exp.iter_requests(), alloc, exp.cost_model(), sched,
                      scheme=scheme, progress=progress, keep_steps=keep,
                      num_requests=None if exp.is_trace else exp.num_requests,
                      on_done=None if on_progress is None else _throttled(on_progress),
                      max_concurrency=exp.max_concurrency)
    summary = summarize(result)
    if on_progress is not None:
        on_progress(int(summary["num_requests"]), float(summary["sim_time_s"]))
    log = result.request_log
    # ``preemptions`` counts events; a request may be preempted several times.
    summary["preempted_requests"] = int((log.column("num_preemptions") > 0).sum())
    summary.update(block_size=exp.block_size,
                   rate_per_s=exp.arrival_rate_per_s(log.column("arrival_s")),
                   n=exp.n, beam_width=exp.beam_width, preemption=exp.preemption,
                   workload=exp.workload, seed=exp.seed)
    if exp.host_cache_gb:  # only runs with a host tier carry it (the CSVs stay as they were)
        summary["host_cache_gb"] = exp.host_cache_gb
    return summary, (None if keep.kind == "none" else result.steps())


#: Seconds of wall time between two progress reports of one run (:func:`run_scheme`).
PROGRESS_EVERY_S = 0.25


def _throttled(report: Callable[[int, float], None]) -> Callable[[int, float], None]:
    """An ``on_done`` hook for :func:`pagedsim.engine.simulator.simulate` that passes
    ``(done, simulated_s)`` on to ``report`` at most every :data:`PROGRESS_EVERY_S`
    seconds of wall time."""
    last = time.monotonic()

    def on_done(done: int, simulated_s: float) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S:
            last = now
            report(done, simulated_s)

    return on_done
