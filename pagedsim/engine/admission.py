"""Admission: which waiting requests start this step, and with how much of their prefill.

:func:`admit` walks the waiting queue in the order the scheduler's ``order`` gives it
(:mod:`.waiting_order`) and admits requests while the step's token budget, ``max_num_seqs``
and memory allow, each one all or nothing through
:meth:`~pagedsim.memory.kv_cache_manager.KVCacheManager.allocate_slots`. It stops at the
first request that has to wait (the queue is served in order), rejects the ones that can
never run, with a reason, and remembers a request that did not fit so that it is not
tried again until memory is released. It is the scheduler's, and reads and updates the
scheduler's queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .plan import SequenceGroup, StepPlan
from .scheduler_reasons import describe, no_fit_reason
from .waiting_order import order_waiting

if TYPE_CHECKING:
    from ..memory.kv_cache_manager import Grant
    from .scheduler import Scheduler


def admit(sched: Scheduler, plan: StepPlan, now_s: float, budget: int,
          chunked: bool = False) -> None:
    """Admit waiting requests in queue order (``order``) within ``budget`` prefill tokens.

    ``chunked``: a single-sequence request whose prefill exceeds what is left of the
    budget starts with a chunk (the rest follows in later steps); otherwise a prompt
    larger than the whole budget is rejected (v0), and a recomputation larger than it
    (a preempted request's prompt plus its generated tokens) runs alone.
    """
    cfg = sched.config
    order_waiting(sched.waiting.front, sched.kv, cfg.order)  # the rest is behind, in order
    if not chunked and head_is_blocked(sched):
        # The loop below would stop at the head (a saturated run's every step; unchunked,
        # it asks for the same tokens).
        return
    num_seqs = sched._num_running_seqs()
    while sched.waiting:
        group = sched.waiting[0]
        recompute = group.num_output > 0
        width = len(group.seq_ids) if recompute else group.width
        num_tokens = group.request.prompt_len + group.num_output
        if width > cfg.max_num_seqs:
            sched._reject(sched.waiting.popleft(), plan,
                         f"it runs {width} sequences at once, more than max_num_seqs "
                         f"({cfg.max_num_seqs})")
            continue
        can_chunk = chunked and width == 1
        # A prefix cache serves the first ``hit`` tokens: only the rest is computed.
        hit = sched.kv.get_computed_tokens(group.block_hashes, group.seq_ids[0], num_tokens)
        prefill_tokens = (num_tokens - hit) * (len(group.seq_ids) if recompute else 1)
        if not can_chunk and not recompute and num_tokens > cfg.max_num_batched_tokens:
            sched._reject(sched.waiting.popleft(), plan,
                         f"{describe(group)}: its prompt is longer than "
                         f"max_num_batched_tokens ({cfg.max_num_batched_tokens}), the "
                         "most one step prefills (the chunked policy would split it)")
            continue
        if num_seqs + width > cfg.max_num_seqs:
            break
        chunk = hit + min(num_tokens - hit, budget) if can_chunk else num_tokens
        if chunk == hit:
            break
        # A recomputation larger than the whole token budget would wait forever: it
        # runs alone.
        alone = not plan.prefills and not plan.decode_seq_ids
        if prefill_tokens > budget and not can_chunk and not alone:
            break
        blocked = sched._blocked
        # Memory comes back when the scheduler releases some, or when the scheme gives
        # blocks back on its own (a sliding window's): either is a new epoch.
        epoch = sched._releases + sched.kv.freed_while_running_blocks
        if (blocked is not None and blocked[0] is group and chunk >= blocked[1]
                and blocked[2] == epoch):
            break  # it did not fit, and nothing was released since
        grant = _allocate_group(sched, group, chunk, recompute)
        if grant is None:
            if sched.kv.num_seqs or sched.running:
                sched._blocked = (group, chunk, epoch)
                break  # memory will be released: wait
            # Nothing else holds memory. The watermark keeps room for running requests'
            # growth; with none running it must not keep a request out for good.
            grant = _allocate_group(sched, group, chunk, recompute, watermark=0.0)
            if grant is None:
                facts = sched.kv.facts(chunk, group.kv_final_len)
                sched._reject(sched.waiting.popleft(), plan,
                             no_fit_reason(facts, group, chunk, recompute))
                continue
        sched.waiting.popleft()
        group.status = "running"
        group.prefill_end_tokens = num_tokens
        group.num_computed_tokens = chunk
        if group.first_scheduled_s is None:
            group.first_scheduled_s = now_s
        if group.cached_prompt_tokens is None:
            group.cached_prompt_tokens = min(grant.computed_tokens[0], group.request.prompt_len)
        done = plan.add_admitted(group, num_tokens, chunk, recompute, grant)
        sched.running.append(group)
        num_seqs += width
        budget -= done

def head_is_blocked(sched: Scheduler) -> bool:
    """Whether the head of the waiting queue did not fit, and no memory came back since
    (the scheduler released none, nor did the scheme on its own)."""
    blocked = sched._blocked
    return (blocked is not None and bool(sched.waiting) and blocked[0] is sched.waiting[0]
            and blocked[2] == sched._releases + sched.kv.freed_while_running_blocks)


def _allocate_group(sched: Scheduler, group: SequenceGroup, num_tokens: int, recompute: bool,
                    watermark: float | None = None) -> Grant | None:
    """All the memory the group needs now, or nothing (returns None).

    A recomputed group re-prefills every sequence; a new one prefills its first
    sequence and names the samples it will fork after the first token, so that the
    allocator can hold room for them if its scheme needs any.
    """
    watermark = sched.config.watermark if watermark is None else watermark
    allocate = sched.kv.allocate_slots
    if recompute:
        return allocate(group.seq_ids, num_tokens, hashes=group.block_hashes,
                        final_len=group.kv_final_len, watermark=watermark)
    # The children's ids are only taken when the admission succeeds.
    children = [sched._next_seq + 1 + i for i in range(group.width - 1)]
    grant = allocate(group.seq_ids[:1], num_tokens, hashes=group.block_hashes,
                     final_len=group.kv_final_len, fork_ids=children, watermark=watermark)
    if grant is not None:
        sched._next_seq += len(children)
        sched._children[group.request.request_id] = children
    return grant
