"""The host tier's K/V on real tensors: a CPU copy of the pool's block layout, per layer.

A prefix cache with a host tier (:mod:`pagedsim.memory.host_tier`) names which GPU block
goes to which host block and back; :class:`HostKV` holds the host blocks and carries the
copies out. Per layer, a K and a V tensor of shape ``[host_blocks, block_size,
num_kv_heads, head_dim]`` on the CPU (pinned on CUDA, so that copies over the host link
are asynchronous DMA), filled with the NaN sentinel like the GPU cache, so that a scan
finds exactly the host blocks ever written (:meth:`HostKV.written_blocks`).

Copies run in the order given, each block in every layer, on the current CUDA stream
(``non_blocking``: a write-back then a load of the same host block stay in order on the
stream, and the CPU waits only when it reads the host tensors itself). The executor
(:mod:`pagedsim.kernels.executor`) runs a plan's ``host_copies`` after its swap-outs and
its ``host_writes`` after the model, as :mod:`pagedsim.engine.plan` orders them.

:func:`host_tier_cache` builds a paged cache whose allocator has a host tier.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

import pagedsim
from pagedsim.memory.host_tier import HostCopy

from .kv_cache import KVCache, KVCacheConfig, PagedKVCache


class HostKV:
    """The host blocks of ``cache``'s host tier (its allocator's ``host``), as tensors."""

    def __init__(self, cache: KVCache) -> None:
        host = getattr(cache.allocator, "host", None)
        if host is None:
            raise ValueError("the cache's allocator has no host tier (make it with "
                             "host_cache_blocks > 0: host_tier_cache)")
        c = cache.config
        self.cache = cache
        self.pinned = c.device != "cpu" and torch.cuda.is_available()
        shape = (host.capacity_blocks, c.block_size, c.num_kv_heads, c.head_dim)
        # [host_blocks, block_size, KVH, D] per layer, K and V
        self.k = [self._empty(shape, c.dtype) for _ in range(c.num_layers)]
        self.v = [self._empty(shape, c.dtype) for _ in range(c.num_layers)]
        self.num_loaded_blocks = 0  # host -> GPU copies carried out (each in every layer)
        self.num_offloaded_blocks = 0  # GPU -> host

    def _empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        t = torch.empty(shape, dtype=dtype, pin_memory=self.pinned)
        return t.fill_(float("nan"))

    def run(self, copies: Sequence[HostCopy]) -> None:
        """Carry out ``copies`` in order: a write-back or write-through copies a GPU block
        to its host block, a load a host block to its GPU block, in every layer."""
        cache = self.cache
        for c in copies:
            for layer in range(len(self.k)):
                gpu_k = cache.k_caches[layer][c.gpu_block]  # [block_size, KVH, D]
                gpu_v = cache.v_caches[layer][c.gpu_block]
                host_k, host_v = self.k[layer][c.host_block], self.v[layer][c.host_block]
                if c.to_host:
                    host_k.copy_(gpu_k, non_blocking=self.pinned)
                    host_v.copy_(gpu_v, non_blocking=self.pinned)
                else:
                    gpu_k.copy_(host_k, non_blocking=self.pinned)
                    gpu_v.copy_(host_v, non_blocking=self.pinned)
            if c.to_host:
                self.num_offloaded_blocks += 1
            else:
                self.num_loaded_blocks += 1

    def written_blocks(self) -> int:
        """Host blocks whose K in layer 0 is not all the NaN sentinel: those ever written
        (the tier overwrites an entry it evicts at once, so these are the blocks it holds)."""
        if self.pinned:
            torch.cuda.synchronize()  # the asynchronous copies into pinned memory are done
        k = self.k[0].reshape(self.k[0].shape[0], -1)
        return int((~k.isnan().all(dim=1)).sum())


def host_tier_cache(config: KVCacheConfig, scheme: str, host_blocks: int,
                    write_through: bool = False, max_model_len: int = 2048) -> PagedKVCache:
    """A paged cache over a fresh allocator of ``scheme`` (a caching scheme of the paged
    family) with a host tier of ``host_blocks`` blocks behind it."""
    alloc = pagedsim.make_allocator(scheme, config.capacity_slots, config.block_size,
                                    max_model_len, align_slots=config.block_size,
                                    host_cache_blocks=host_blocks,
                                    host_write_through=write_through)
    if getattr(alloc, "host", None) is None:
        raise ValueError(f"scheme {scheme!r} has no prefix cache, so no host tier: use "
                         "prefix-cache, radix or their variants")
    return PagedKVCache(config, allocator=alloc)
