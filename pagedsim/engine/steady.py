"""Steady steps, run at once: while nothing but the same decodes can happen, a run of
steps asks memory once (:meth:`~pagedsim.memory.kv_cache_manager.KVCacheManager.decode_steps`)
instead of once a step, and the simulator records each of its steps as it would have.

A step is *steady* when it would be the scheduler's last step again, one token on:

* every running group decodes its one sequence, in one call: the scheduler's last batch
  (:mod:`.running`), with the running list unchanged;
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

from typing import TYPE_CHECKING, NamedTuple

from .admission import head_is_blocked
from .running import LastBatch

if TYPE_CHECKING:
    from ..memory.block_batch import StepUsage
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


def run_steady(sched: Scheduler, cost: CostModel, now_s: float,
               next_arrival_s: float | None) -> SteadyRun | None:
    """Run the steady steps that start at ``now_s`` (the module docstring says which),
    updating the scheduler and memory as those steps would; None, and nothing changed,
    when not even the first is steady. ``cost`` times the steps; ``next_arrival_s`` is
    when the next request arrives (None: no more)."""
    running = sched.running
    if (not running or sched._pending or sched._to_free or sched._too_long or sched.swapped
            or sched.config.policy != "v0" or sched._windows):
        return None
    waiting = sched.waiting
    if waiting and (sched.config.order != "fcfs" or not head_is_blocked(sched)):
        return None
    steps = MAX_STEADY_STEPS
    for group in running:  # up to the step in which the first group finishes
        left = group.request.output_len - group.num_output
        if left < steps:
            steps = left
    last = sched._last_batch
    if (last is not None and last.running is running and last.num_running == len(running)
            and last.lone):
        seq_ids, rids, kv_tokens = last.seq_ids, last.request_ids, last.kv_tokens
    else:  # gathered as the scheduler's step does (running.py, plan.add_decodes)
        seq_ids, rids, kv_tokens = [], [], 0
        for group in running:
            if (group.prefill_end_tokens > group.num_computed_tokens
                    or len(group.seq_ids) != 1 or group.width != 1):
                return None  # a chunk to prefill, or samples or beams to fork and choose
            seq_ids += group.seq_ids
            rids.append(group.request.request_id)
            kv_tokens += group.request.prompt_len + group.num_output
        kv_tokens -= len(seq_ids)  # as if it were the last step's: a token short each
    num_seqs = len(seq_ids)
    times: list[float] = []
    if not waiting and next_arrival_s is not None:
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
    sched.step_index += done
    finished: list[int] = []
    for group in running:  # every group sampled ``done`` tokens (_after_sampling's count)
        group.num_computed_tokens += done
        group.num_output += done
        if group.num_output >= group.request.output_len:
            sched._finish(group, finished)
    sched._last_batch = LastBatch(running, len(running), seq_ids, rids,
                                  kv_tokens + done * num_seqs, True)
    if finished:  # in the run's last step: a new running list, as after any finish
        sched.running = [g for g in running if g.status != "finished"]
    return SteadyRun(first, times, usages, num_seqs, finished)
