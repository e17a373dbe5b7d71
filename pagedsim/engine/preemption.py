"""Preemption: a running group gives its memory back, by recomputation or by a swap to
the CPU pool, and swapped groups come back.

:func:`preempt` is what the scheduler does when a running group's next token finds no
memory (it preempts the newest requests first); :func:`swap_in_all` brings swapped
groups back at the start of a step that preempted nobody, oldest first. Both are the
scheduler's, and read and update its queues, as :mod:`.admission` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .plan import SequenceGroup, StepPlan

if TYPE_CHECKING:
    from ..memory.base import KVCopy
    from .scheduler import Scheduler


def preempt(sched: Scheduler, group: SequenceGroup, plan: StepPlan) -> None:
    """Take ``group``'s memory back: swap it out (``swap`` mode, or a group of several
    sequences while the CPU pool has room) or free it to be recomputed from the front
    of the waiting queue (the scheduler puts it there)."""
    sched.num_preemptions += 1
    sched._releases += 1
    group.num_preemptions += 1
    plan.preempted.append(group.request.request_id)
    # Swap when asked to, and (as vLLM v0 does) for groups of several sequences even
    # under recompute, because recomputing them separately would lose their sharing;
    # recompute whenever the CPU pool has no room.
    cfg = sched.config
    wants_swap = cfg.preemption == "swap" or len(group.seq_ids) > 1
    swapped = (sched.kv.swap_out(group.seq_ids, cfg.cpu_swap_slots - sched.cpu_used_slots)
               if wants_swap else None)
    if swapped is not None:
        sched.cpu_used_slots += swapped.cpu_slots
        group.swapped = swapped
        group.status = "swapped"
        plan.swap_outs.append(swapped)
        sched.swapped.append(group)
        sched.num_swaps_out += 1
    else:  # recompute (also when the CPU pool is full)
        plan.frees.extend(sched.kv.free(group.seq_ids))
        group.status = "waiting"
        group.num_computed_tokens = 0  # a recomputation starts its prefill over
        if len(group.seq_ids) > 1:  # restart: prefill once and fork again (sharing back)
            group.seq_ids = [sched._new_seq_id()]
            group.num_output = 0
            group.pending_forks = []
            group.pending_frees = []


def swap_in_all(sched: Scheduler, plan: StepPlan) -> None:
    """Swapped requests come back first, oldest first. With nothing running, the oldest
    comes back even into the watermark (as admission does): the watermark keeps room for
    running requests' growth, and nothing else could ever free it."""
    cfg = sched.config
    while sched.swapped:
        group = sched.swapped[0]
        assert group.swapped is not None
        if sched._num_running_seqs() + len(group.seq_ids) > cfg.max_num_seqs:
            return
        copies = sched.kv.swap_in(group.swapped, cfg.watermark)
        if copies is None and not sched.running:
            copies = sched.kv.swap_in(group.swapped, watermark=0.0)
        if copies is None:
            return
        sched.swapped.popleft()
        _swapped_in(sched, group, copies, plan)


def _swapped_in(sched: Scheduler, group: SequenceGroup, copies: list[KVCopy],
                plan: StepPlan) -> None:
    """``group`` is back on the GPU (``copies``: CPU -> GPU): it runs again."""
    assert group.swapped is not None
    plan.swap_ins.append((group.swapped, copies))
    sched.cpu_used_slots -= group.swapped.cpu_slots
    group.swapped = None
    group.status = "running"
    sched.running.append(group)
    sched.num_swaps_in += 1
