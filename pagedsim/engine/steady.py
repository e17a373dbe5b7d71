"""Steady steps, run at once: while nothing but the same decodes can happen, a run of
steps asks memory once (:meth:`~pagedsim.memory.kv_cache_manager.KVCacheManager.decode_steps`)
instead of once a step, and the simulator records each of its steps as it would have.

A step is *steady* when it would be the scheduler's last step again, one token on:

* every running group decodes its one sequence, in one call: the scheduler's last batch,
  with the running list unchanged (:meth:`~.scheduler.Scheduler.steady_decodes` tells);
* nothing waits to be released, rejected, forked or swapped in;
* admission (vLLM v0's policy) would stop at once: nobody waits, or the head of the queue
  (served in arrival order, so that a new arrival joins behind it) was refused and no
  memory came back since.

A run of such steps ends with the step in which a request finishes (the next step frees
its memory and may admit: an ordinary one), before a step whose decodes would not all fit
(memory stops there, and the ordinary step preempts), and before the step that starts
after a request arrives at an empty queue (it may be admitted). Within a run each step
lasts what the cost model says for its context, as an ordinary step would: the same
durations, added in the same order, so the clock and every row come out the same.
"""

from __future__ import annotations

from typing import NamedTuple

from ..memory.decode_runs import StepUsage
from .cost import CostModel
from .scheduler import Scheduler

#: The longest run asked for at once (steps); a run's lists hold this many entries at most.
MAX_STEADY_STEPS = 1024


class SteadyRun(NamedTuple):
    """What a run of steady steps did."""

    first_step: int  # the first step's number (``StepPlan.step``)
    step_times_s: list[float]  # each step's duration, seconds
    usages: list[StepUsage]  # the pool after each step (slots, blocks)
    num_seqs: int  # decodes in each step (one sequence per running group)
    finished: list[int]  # request ids done after the last step, in running order
    request_ids: list[int]  # the requests that decoded in every step, in running order


def run_steady(sched: Scheduler, cost: CostModel, now_s: float,
               next_arrival_s: float | None) -> SteadyRun | None:
    """Run the steady steps that start at ``now_s`` (the module docstring says which),
    updating the scheduler and memory as those steps would; None, and nothing changed,
    when not even the first is steady. ``cost`` times the steps; ``next_arrival_s`` is
    when the next request arrives (None: no more)."""
    decodes = sched.steady_decodes()
    if decodes is None:
        return None
    seq_ids, rids, kv_tokens, steps_left = decodes
    steps = min(MAX_STEADY_STEPS, steps_left)  # up to the step in which a group finishes
    num_seqs = len(seq_ids)
    times: list[float] = []
    if not sched.waiting and next_arrival_s is not None:
        # An arrival at an empty queue may be admitted: the run ends before the step that
        # starts after it. Each step's start is the clock the simulator will keep.
        clock, step_time_s = now_s, cost.step_time_s
        for k in range(steps):
            if k and next_arrival_s <= clock:
                break
            dt = step_time_s(0, num_seqs, kv_tokens + (k + 1) * num_seqs, 0, ())
            times.append(dt)
            clock += dt
        steps = len(times)
    usages = sched.kv.decode_steps(seq_ids, steps)
    if not usages:  # the scheme cannot, or the first step does not fit
        return None
    done = len(usages)
    if times:
        del times[done:]
    else:
        times = cost.decode_steps_s(num_seqs, kv_tokens + num_seqs, done)
    first = sched.step_index + 1
    finished = sched.advance_decodes(done, seq_ids, rids, kv_tokens)
    return SteadyRun(first, times, usages, num_seqs, finished, rids)
