"""A host tier's side of a run: what its copies cost each step, and its numbers at the end.

The simulator makes one :class:`HostStats` when the allocator has a host tier
(:mod:`pagedsim.memory.host_tier`; none otherwise, so runs without one are untouched).
Each step it counts the plan's host copies (loads host -> GPU, write-backs and
write-throughs GPU -> host, whole blocks of ``block_size x bytes_per_token`` bytes),
asks the link-time function it was given (the cost model's
:meth:`~pagedsim.engine.cost.CostModel.host_transfer_s`) how much longer they make the
step, and weighs the tier's occupancy by the step's length. The GPU pool's six
categories do not change: a loaded block is an ordinary block of the request that
loaded it. (The function and the copies are handed in, rather than the cost model and
the step plan, so that this layer never imports the engine that feeds it.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..memory.host_tier import HostCopy, HostTier

#: Seconds a step of ``step_s`` lasts longer for ``load_bytes`` host -> GPU and
#: ``offload_bytes`` GPU -> host: ``(step_s, load_bytes, offload_bytes) -> seconds``.
LinkTime = Callable[[float, int, int], float]

#: The summary keys a run with a host tier adds (:meth:`HostStats.summary`), in order.
HOST_KEYS: tuple[str, ...] = (
    "host_cache_blocks", "prefix_hits_gpu", "prefix_hits_host", "prefix_hit_rate_gpu",
    "prefix_hit_rate_host", "host_loaded_blocks", "host_written_back_blocks",
    "host_written_through_blocks", "host_loaded_bytes", "host_offloaded_bytes",
    "host_mean_used_blocks", "host_max_used_blocks", "host_evicted_blocks",
    "host_dropped_blocks", "host_transfer_s",
)  # fmt: skip


class HostStats:
    """Counts of one run's host tier (``host``), its blocks of ``block_bytes`` bytes, its
    copies charged by ``link_time_s``."""

    def __init__(self, host: HostTier, block_bytes: int, link_time_s: LinkTime) -> None:
        self.host = host
        self.block_bytes = block_bytes
        self.link_time_s = link_time_s
        self.loads = self.write_backs = self.write_throughs = 0  # blocks
        self.hit_tokens = 0  # prompt tokens loaded from the host
        self.transfer_s = 0.0  # seconds the copies added to steps
        self.used_block_s = 0.0  # host blocks in use x seconds
        self.time_s = 0.0
        self.max_used_blocks = 0

    def step(self, copies: Sequence[HostCopy], writes: Sequence[HostCopy], hit_tokens: int,
             step_s: float, charge: bool = True) -> float:
        """Count a step's host ``copies`` (loads and write-backs, before the model),
        ``writes`` (write-throughs, after it) and ``hit_tokens`` (prompt tokens it loaded
        from the host), and weigh the occupancy over the step, which lasts ``step_s``
        without them; returns the seconds the copies add to it (0 and nothing charged
        when not ``charge``: a step that ran nothing takes no time)."""
        loads = sum(1 for c in copies if not c.to_host)
        backs = len(copies) - loads
        self.loads += loads
        self.write_backs += backs
        self.write_throughs += len(writes)
        self.hit_tokens += hit_tokens
        extra = 0.0
        if charge and (loads or backs or writes):
            bb = self.block_bytes
            extra = self.link_time_s(step_s, loads * bb, (backs + len(writes)) * bb)
        self.transfer_s += extra
        dt = step_s + extra
        used = len(self.host)
        self.used_block_s += used * dt
        self.time_s += dt
        self.max_used_blocks = max(self.max_used_blocks, used)
        return extra

    def summary(self, queries: int, hits: int) -> dict[str, Any]:
        """:data:`HOST_KEYS`, given the run's ``queries`` and ``hits`` (prompt tokens
        looked up and found in either tier): hits per tier add up to ``hits``."""
        host, bb = self.host, self.block_bytes
        gpu_hits = hits - self.hit_tokens
        rate = (lambda x: x / queries) if queries else (lambda x: math.nan)
        return {
            "host_cache_blocks": host.capacity_blocks,
            "prefix_hits_gpu": gpu_hits, "prefix_hits_host": self.hit_tokens,
            "prefix_hit_rate_gpu": rate(gpu_hits), "prefix_hit_rate_host": rate(self.hit_tokens),
            "host_loaded_blocks": self.loads, "host_written_back_blocks": self.write_backs,
            "host_written_through_blocks": self.write_throughs,
            "host_loaded_bytes": self.loads * bb,
            "host_offloaded_bytes": (self.write_backs + self.write_throughs) * bb,
            "host_mean_used_blocks": (self.used_block_s / self.time_s if self.time_s > 0
                                      else math.nan),
            "host_max_used_blocks": self.max_used_blocks,
            "host_evicted_blocks": host.evicted_blocks,
            "host_dropped_blocks": host.dropped_blocks,
            "host_transfer_s": self.transfer_s,
        }
