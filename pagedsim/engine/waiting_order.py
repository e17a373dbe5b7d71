"""The order in which the scheduler tries waiting requests: ``fcfs`` or ``lpm``.

``SchedulerConfig.order`` picks it; :func:`order_waiting` applies it to the waiting queue
at the start of every admission round (:func:`pagedsim.engine.admission.admit`).

* ``fcfs``: the queue as it is. New requests join at the back in arrival order; requests
  preempted for recomputation go back to the front.
* ``lpm`` (SGLang's cache-aware *longest prefix match* policy, ``schedule_policy.py``):
  the request whose prompt the prefix cache holds most of goes first (tokens, as
  :meth:`~pagedsim.memory.kv_cache_manager.KVCacheManager.get_computed_tokens` counts
  them, which changes nothing), so requests that share a prefix run while it is cached.
  Ties keep arrival order. Preempted requests still go first, oldest first, as under
  ``fcfs``: they have run already, and going first keeps them from starving behind
  better-cached newcomers. With more than :data:`LPM_MAX_WAITING` requests waiting,
  SGLang skips the lookups and sorting (their cost grows with the queue) and serves
  FCFS; so do we, restoring the FCFS order (preempted first, then by arrival) that
  earlier sorting may have changed. Without a prefix cache every lookup is 0 and ``lpm``
  is FCFS.
"""

from __future__ import annotations

from collections import deque

from ..memory.kv_cache_manager import KVCacheManager
from .plan import SequenceGroup

#: Above this many waiting requests ``lpm`` serves FCFS (SGLang's threshold).
LPM_MAX_WAITING = 128


def _fcfs_key(group: SequenceGroup) -> tuple[bool, float, int]:
    """Preempted requests first, then by arrival (request id breaks ties)."""
    return group.num_preemptions == 0, group.request.arrival_s, group.request.request_id


def order_waiting(waiting: deque[SequenceGroup], kv: KVCacheManager, order: str) -> None:
    """Reorder ``waiting`` in place for ``order`` (``"fcfs"``: left as it is); ``kv``
    answers how much of each prompt is cached."""
    if order == "fcfs" or len(waiting) < 2:
        return
    if order != "lpm":
        raise ValueError(f"unknown order {order!r}; valid: fcfs, lpm")
    groups = sorted(waiting, key=_fcfs_key)
    if len(groups) <= LPM_MAX_WAITING:
        lookup = kv.get_computed_tokens

        def longest_first(g: SequenceGroup) -> tuple[int, int]:
            if g.num_preemptions:
                return 0, 0  # preempted: first, in FCFS order
            hit = lookup(g.block_hashes, g.seq_ids[0], g.request.prompt_len + g.num_output)
            return 1, -hit

        groups.sort(key=longest_first)  # stable: ties stay in FCFS order
    waiting.clear()
    waiting.extend(groups)
