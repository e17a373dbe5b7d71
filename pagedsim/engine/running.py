"""The running groups' next tokens: a decode of one token for every sequence, or the next
chunk of a chunked prefill, oldest first, preempting the newest requests when memory runs
out (:func:`run_running`, step 2 of :mod:`.scheduler`).

Most steps are decodes only, and the pool has room for all of them: then the whole batch
asks memory once (:meth:`~pagedsim.memory.kv_cache_manager.KVCacheManager.allocate_slots`
with every group's sequences), and when the running groups are the same as the last such
step's, not even their sequences are gathered again. When some do not fit, groups of one
sequence still ask together, as many as fit in order, and the rest go one by one, exactly
as if every group had asked alone: the same appends, in the same order, the same victims.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from .plan import SequenceGroup, StepPlan
from .preemption import preempt
from .scheduler_reasons import outgrows_reason

if TYPE_CHECKING:
    from ..memory.base import SeqId
    from .scheduler import Scheduler


class LastBatch(NamedTuple):
    """The last step in which every running group decoded in one call
    (``Scheduler._last_batch``). While ``running`` is that same list, unchanged, the next
    such step is the same groups one token on (any change makes a new list or a new
    length; forks and beams, which change a group's sequences, forget it)."""

    running: list[SequenceGroup]  # the scheduler's running list then (the same object)
    num_running: int  # its length then
    seq_ids: list[SeqId]  # their sequences, in order
    request_ids: list[int]  # their request ids, in order
    kv_tokens: int  # context tokens the step's decodes attended over
    lone: bool  # whether each group runs one sequence


def run_running(sched: Scheduler, plan: StepPlan, budget: int | None
                ) -> tuple[list[SequenceGroup], int | None]:
    """Give every running group its next tokens, oldest first, preempting the newest
    requests when memory runs out. ``budget`` (tokens) limits the step, or None.
    Returns the preempted groups and the budget left."""
    allocate = sched.kv.allocate_slots
    decoded = sched._decoded = []
    running = sched.running
    start = 0  # groups at the front of ``running`` that have run already
    batch = True  # whether to try the front of the queue in one call
    if running:
        # The common step: every running group decodes, in one call (every one, or,
        # when each runs one sequence, as many as fit in order: the rest go one by
        # one below, preempting where they must; the same appends in the same order).
        last = sched._last_batch
        if last is not None and last.running is running and last.num_running == len(running):
            # The same groups as the last such step, each one token further on: the
            # same sequences, each context one token longer.
            seq_ids, rids, lone = last.seq_ids, last.request_ids, last.lone
            kv_tokens = last.kv_tokens + len(seq_ids)
            all_decode = True
        else:
            seq_ids, rids, lone, all_decode = [], None, True, True
            for group in running:
                if group.prefill_end_tokens > group.num_computed_tokens:
                    all_decode = False  # a chunked prefill runs this step
                    break
                if len(group.seq_ids) != 1:
                    lone = False
                seq_ids += group.seq_ids
        if all_decode and (budget is None or len(seq_ids) <= budget):
            grant = allocate(seq_ids, 1, as_many_as_fit=lone)
            if grant is not None and len(grant.slots) == len(seq_ids):
                if rids is None:
                    rids, kv_tokens = plan.add_decodes(running, seq_ids, grant)
                else:
                    plan.add_decode_batch(seq_ids, rids, kv_tokens, grant)
                # Sliding windows' reads do not grow by one token a step: not kept.
                sched._last_batch = (None if plan.windows else
                                     LastBatch(running, len(running), seq_ids, rids, kv_tokens,
                                               lone))
                decoded.extend(running)
                return [], None if budget is None else budget - len(seq_ids)
            if grant is not None:  # one sequence each: the first ones ran
                batch = False  # the next one did not fit: it goes alone
                start = len(grant.slots)
                plan.add_decodes(running[:start], seq_ids[:start], grant)
                decoded.extend(running[:start])
                if budget is not None:
                    budget -= start
    queue = deque(running[start:] if start else running)
    sched.running = running[:start]
    victims: list[SequenceGroup] = []
    while queue:
        if batch and len(queue) > 1 and budget != 0:
            budget = _run_lone_decodes(sched, plan, queue, budget)
            if not queue:
                break
        batch = True
        group = queue.popleft()
        # > 0: the next chunk of a chunked prefill (``prefill_left``, inlined: hot path)
        chunk = group.prefill_end_tokens - group.num_computed_tokens
        if chunk > 0:
            want = chunk if budget is None else min(chunk, budget)
        else:
            want = len(group.seq_ids)
        if budget is not None and (want == 0 or want > budget):
            sched.running.append(group)  # no budget left this step: it waits
            continue
        # A chunk: ``want`` tokens of its one sequence; a decode: one token each.
        while (grant := allocate(group.seq_ids, want if chunk > 0 else 1)) is None:
            if not queue and not sched.running:  # alone, and still no room: never will be
                sched._reject(group, plan, outgrows_reason(sched.kv.facts(0), group))
                break
            victim = queue.pop() if queue else group
            preempt(sched, victim, plan)
            victims.append(victim)
            if victim is group:
                break
        else:
            if chunk > 0:
                start = group.num_computed_tokens
                group.num_computed_tokens += want
                plan.add_chunk(group, start, want, grant)
            else:  # its token is counted computed with the sample (_after_sampling)
                plan.add_decode(group, grant)
                decoded.append(group)
            sched.running.append(group)
            if budget is not None:
                budget -= want
    return victims, budget


def _run_lone_decodes(sched: Scheduler, plan: StepPlan, queue: deque[SequenceGroup],
                      budget: int | None) -> int | None:
    """The groups at the front of ``queue`` that decode one sequence each (at most
    ``budget`` tokens' worth) in one call, as many as fit in order: those that ran
    leave the queue for ``running``. Returns the budget left."""
    run: list[SequenceGroup] = []
    for group in queue:
        if (group.prefill_end_tokens > group.num_computed_tokens
                or len(group.seq_ids) != 1 or budget is not None and len(run) >= budget):
            break
        run.append(group)
    if len(run) < 2:
        return budget
    grant = sched.kv.allocate_slots([g.seq_ids[0] for g in run], 1, as_many_as_fit=True)
    assert grant is not None
    done = len(grant.slots)
    if done:
        ran = run[:done]
        plan.add_decodes(ran, [g.seq_ids[0] for g in ran], grant)
        sched._decoded.extend(ran)
        sched.running.extend(ran)
        for _ in range(done):
            queue.popleft()
    return budget if budget is None else budget - done

