"""A step's decodes in one call: the scheduler's shortcut for the common step.

Most steps of a run only decode: every running request appends one token's K/V. The
scheduler's plain path (:meth:`~pagedsim.engine.scheduler.Scheduler._run_running`) asks
memory for each running group in turn, oldest first, and preempts the newest when one
does not fit. Asked group by group, a step of 200 running requests is 200 calls; this
module asks once for many:

* :func:`decode_running`: every running group's decodes in one
  :meth:`~pagedsim.memory.kv_cache_manager.KVCacheManager.allocate_slots` call. When
  each group runs one sequence, memory appends as many as fit, in order
  (``as_many_as_fit``), and the first one that does not fit goes on alone in the plain
  path, which preempts for it.
* :func:`decode_lone_front`: after a preemption, the groups at the front of what is left
  that run one sequence each, again in one call.
* :class:`LastBatch`: what the last such step decoded. While the scheduler's running
  list is that same list, unchanged, the next step decodes the same sequences, each
  context one token longer, and nothing needs gathering again.

It is the same run: the same appends in the same order (``allocate_slots`` over a list
appends its sequences in order, as one call each would), the same preemptions, the same
plan. ``tests/engine/test_decode_batch.py`` runs every registered scheme with and
without it (``Scheduler(batch_decodes=False)``) and compares every step's row and the
summary. The functions take what they need and return what they decided; the scheduler
keeps its own state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..memory.base import SeqId
from ..memory.kv_cache_manager import KVCacheManager
from .plan import SequenceGroup, StepPlan


class LastBatch(NamedTuple):
    """The last step in which every running group decoded in one call. While ``running``
    is that same list, unchanged, the next such step is the same groups one token on (any
    change makes a new list or a new length; forks and beams, which change a group's
    sequences, forget it)."""

    running: list[SequenceGroup]  # the scheduler's running list then (the same object)
    num_running: int  # its length then
    seq_ids: list[SeqId]  # their sequences, in order
    request_ids: list[int]  # their request ids, in order
    kv_tokens: int  # context tokens the step's decodes attended over
    lone: bool  # whether each group runs one sequence


class BatchDecode(NamedTuple):
    """What :func:`decode_running` did: the first ``num_groups`` running groups decoded;
    ``budget`` (tokens) is what is left of the step's (None: no budget); ``last`` is the
    scheduler's new :class:`LastBatch`; ``next_alone``: the next group did not fit and
    must go alone (the plain path preempts for it)."""

    num_groups: int
    budget: int | None
    last: LastBatch | None
    next_alone: bool


def decode_running(running: list[SequenceGroup], kv: KVCacheManager, plan: StepPlan,
                   budget: int | None, last: LastBatch | None) -> BatchDecode:
    """Every running group's decodes in one call, when every one of them decodes (no
    chunked prefill runs) within ``budget`` tokens: all of them, or, when each runs one
    sequence, as many as fit in order. Adds them to ``plan``."""
    if last is not None and last.running is running and last.num_running == len(running):
        # The same groups as the last such step, each one token further on.
        seq_ids, rids, lone = last.seq_ids, last.request_ids, last.lone
        kv_tokens = last.kv_tokens + len(seq_ids)
    else:
        seq_ids, rids, lone, kv_tokens = [], None, True, 0
        for group in running:  # (prefill_left as a comparison: this loop runs every step)
            if group.prefill_end_tokens > group.num_computed_tokens:
                return BatchDecode(0, budget, last, False)  # a chunk runs: the plain path
            if len(group.seq_ids) != 1:
                lone = False
            seq_ids += group.seq_ids
    if budget is not None and len(seq_ids) > budget:
        return BatchDecode(0, budget, last, False)
    grant = kv.allocate_slots(seq_ids, 1, as_many_as_fit=lone)
    if grant is None:  # several sequences somewhere, and not all fit: the plain path
        return BatchDecode(0, budget, last, False)
    done = len(grant.slots)
    if done == len(seq_ids):
        if rids is None:
            rids, kv_tokens = plan.add_decodes(running, seq_ids, grant)
        else:
            plan.add_decode_batch(seq_ids, rids, kv_tokens, grant)
        # Sliding windows' reads do not grow by one token a step: not kept.
        memo = None if plan.windows else LastBatch(running, len(running), seq_ids, rids,
                                                    kv_tokens, lone)
        return BatchDecode(len(running), None if budget is None else budget - done, memo,
                           False)
    # One sequence each: the first ``done`` ran; the next did not fit.
    plan.add_decodes(running[:done], seq_ids[:done], grant)
    return BatchDecode(done, None if budget is None else budget - done, last, True)


def decode_lone_front(queue: Sequence[SequenceGroup], kv: KVCacheManager, plan: StepPlan,
                      budget: int | None) -> tuple[list[SequenceGroup], int | None]:
    """The groups at the front of ``queue`` that decode one sequence each (at most
    ``budget`` tokens' worth), in one call, as many as fit in order; adds them to
    ``plan``. Returns the groups that ran (the front of ``queue``, which the caller
    takes off it) and the budget left. Fewer than two such groups: none run here."""
    run: list[SequenceGroup] = []
    for group in queue:
        if (group.prefill_end_tokens > group.num_computed_tokens or len(group.seq_ids) != 1
                or budget is not None and len(run) >= budget):
            break
        run.append(group)
    if len(run) < 2:
        return [], budget
    grant = kv.allocate_slots([g.seq_ids[0] for g in run], 1, as_many_as_fit=True)
    assert grant is not None  # as_many_as_fit answers with what fit, maybe nothing
    ran = run[:len(grant.slots)]
    if ran:
        plan.add_decodes(ran, [g.seq_ids[0] for g in ran], grant)
    return ran, budget if budget is None else budget - len(ran)
