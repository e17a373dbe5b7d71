"""A KV cache for hybrid models, driven by the hybrid manager (:mod:`pagedsim.memory.hybrid`).

vLLM v1's layout: the pool is ``num_blocks`` blocks, and a block holds ``block_size``
tokens' K/V for the layers of the KV-cache group that holds it, one page per layer. Here
that is one K and one V tensor per *position in a group*, ``k_caches[p]``
``[num_blocks, block_size, KVH, D]``: layer ``groups[g].layer_indices[p]`` of group ``g``
reads and writes tensor ``p`` through group ``g``'s block table. A block id is the same
memory in every position tensor, whichever group holds it, so a block a sliding-window
group gave back and the full group took next carries the full group's layers from then
on, and copies, swaps and scrubbing act on block ids as in any paged cache.

Slots are the allocator's: the protocol's slot of a token is its slot in group 0 (full
attention), which is what ``append_slots`` and ``slot_mapping`` return and the decoder
hands back to :meth:`HybridKVCache.write` and :meth:`HybridKVCache.read`. A layer of
another group translates each slot to the same token's slot in its own group, through
the sequences' block tables (a block being written belongs to one sequence). Attention
metadata carries one block table per group, ``[G, S, MB]``, with -1 where a sliding
group gave its block back; the decode kernel skips those blocks (``window_tokens``).

The NaN sentinel of :mod:`pagedsim.kernels.kv_cache` holds: position 0's K of a block is
written for every token the block holds, in every group (each group has a layer at
position 0), so the written slots are the token slots of all groups together.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

import torch

import pagedsim
from pagedsim import KVCopy
from pagedsim.memory.hybrid import HybridAllocator
from pagedsim.models.kv_spec import full, sliding

from .attention import paged_attention
from .cache_ops import write_kv
from .kv_cache import KVCache, KVCacheConfig, SeqId


def layer_specs(num_kv_heads: int, head_dim: int, windows: Sequence[int]) -> tuple:
    """Per-layer KV specs for layers of these ``windows`` (0: full attention), or ``()``
    when all are full (pagedsim's uniform model)."""
    if not any(windows):
        return ()
    return tuple(sliding(num_kv_heads, head_dim, w) if w else full(num_kv_heads, head_dim)
                 for w in windows)


def kv_model_spec(config: KVCacheConfig, max_model_len: int) -> pagedsim.ModelSpec:
    """The model as its KV cache sees it: ``config``'s layers (full, or sliding with their
    windows), for the hybrid manager's grouping and block count."""
    kvh, hd = config.num_kv_heads, config.head_dim
    return pagedsim.ModelSpec("kv-cache", config.num_layers, kvh, kvh, hd,
                              config.dtype.itemsize, 0, max_model_len,
                              layers=layer_specs(kvh, hd, config.layer_windows))


def held_blocks(cache: KVCache) -> set[int]:
    """Blocks some live sequence of a paged-family or hybrid cache holds (any group's)."""
    alloc = cache.allocator
    if isinstance(alloc, HybridAllocator):
        return {b for s in alloc.seq_ids() for t in alloc.block_tables(s) for b in t if b >= 0}
    return {b for s in alloc.seq_ids() for b in cache.block_table(s)}


def windows_arg(text: str) -> tuple[int, ...]:
    """A command line's per-layer windows: comma-separated ints >= 0 (0: full attention)."""
    try:
        windows = tuple(int(w) for w in text.split(","))
    except ValueError:
        windows = (-1,)
    if min(windows) < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints >= 0 (0: full "
                                         f"attention), got {text!r}")
    return windows


def _flat(copies: Sequence[KVCopy | list[KVCopy]]) -> list[KVCopy]:
    """An append's copies: one record, or a list of them (one per group that copied)."""
    return [x for c in copies for x in (c if type(c) is list else [c])]


class HybridKVCache(KVCache):
    """Position tensors shared by the KV-cache groups of ``allocator`` (see the module)."""

    allocator: HybridAllocator

    def __init__(self, config: KVCacheConfig, allocator: HybridAllocator) -> None:
        if not isinstance(allocator, HybridAllocator):
            raise TypeError(f"allocator must be a HybridAllocator, got {allocator!r}")
        if allocator.block_size != config.block_size:
            raise ValueError(f"allocator has blocks of {allocator.block_size} slots, the "
                             f"cache {config.block_size}")
        self.where: dict[int, tuple[int, int]] = {}  # model layer -> (group, position)
        for g, spec in enumerate(allocator.groups):
            if len(spec.layer_indices) != spec.num_layers:
                raise ValueError(f"group {g} does not name its layers (layer_indices)")
            for p, layer in enumerate(spec.layer_indices):
                self.where[layer] = (g, p)
        if sorted(self.where) != list(range(config.num_layers)):
            raise ValueError(f"the allocator's groups hold layers {sorted(self.where)}, the "
                             f"cache has {config.num_layers}")
        positions = max(spec.num_layers for spec in allocator.groups)
        super().__init__(replace(config, num_layers=positions, layer_windows=(),
                                 num_blocks=allocator.num_blocks))
        self.config = replace(config, num_blocks=allocator.num_blocks)
        self.allocator = allocator

    @classmethod
    def for_scheme(cls, config: KVCacheConfig, scheme: str, max_model_len: int = 2048):
        """A cache over a fresh allocator of ``scheme`` (``hybrid``, ``all-full``...) for
        the bytes of ``config``'s pool: the allocator's block count, not the config's
        (the same bytes hold twice the blocks for a half-sliding model)."""
        return cls(config, pagedsim.make_allocator(
            scheme, config.capacity_slots, config.block_size, max_model_len,
            model=kv_model_spec(config, max_model_len)))

    # ------------------------------------------------------------ slots
    def _to_group(self, slots: torch.Tensor, group: int) -> torch.Tensor:
        """Group-0 slots (int64 ``[T]``) as the same tokens' slots in ``group``; -1 where
        that group gave the token's block back."""
        if group == 0:
            return slots
        bs, alloc = self.config.block_size, self.allocator
        table = torch.full((alloc.num_blocks,), -1, dtype=torch.int64)  # block in 0 -> in g
        for seq_id in alloc.seq_ids():
            tables = alloc.block_tables(seq_id)
            for b0, bg in zip(tables[0], tables[group], strict=True):
                if bg >= 0 and (table[b0] < 0 or alloc.ref_count(b0) == 1):
                    table[b0] = bg  # a private block (one being written) wins
        s = slots.cpu()
        mapped = table[s // bs]
        out = torch.where(mapped >= 0, mapped * bs + s % bs, torch.full_like(s, -1))
        return out.to(slots.device)

    def block_table(self, seq_id: SeqId, group: int = 0) -> list[int]:
        return self.allocator.block_table(seq_id, group)

    def attention_metadata(self, seq_ids: Sequence[SeqId]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(block_tables int32 [G, S, MB] padded with -1, seq_lens int32 [S])``: one table
        per group (-1 where a sliding group gave a block back)."""
        per_group = [[self.block_table(s, g) for s in seq_ids]
                     for g in range(len(self.allocator.groups))]
        width = max((len(t) for t in per_group[0]), default=0) or 1
        padded = [[t + [-1] * (width - len(t)) for t in tables] for tables in per_group]
        device = self.config.device
        return (torch.tensor(padded, dtype=torch.int32, device=device).reshape(
                    len(per_group), len(seq_ids), width),
                torch.tensor([self.seq_len(s) for s in seq_ids], dtype=torch.int32,
                             device=device))

    # ----------------------------------------------------------- kernels
    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        """New tokens' K/V ``[T, KVH, D]`` into their slots of ``layer``'s group (``slots``:
        group 0's, int64 ``[T]``)."""
        g, p = self.where[layer]
        own = self._to_group(slots, g)
        keep = own >= 0  # a token is written where its group holds it (all, when written)
        write_kv(self.k_caches[p], self.v_caches[p], k[keep], v[keep], own[keep],
                 backend=self.backend)

    def attend(self, layer: int, q: torch.Tensor, block_tables: torch.Tensor,
               seq_lens: torch.Tensor, window_tokens: int | None = None) -> torch.Tensor:
        """Decode attention for one layer through its group's block table."""
        g, p = self.where[layer]
        return paged_attention(q, self.k_caches[p], self.v_caches[p], block_tables[g],
                               seq_lens, backend=self.backend, window_tokens=window_tokens)

    def read(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of tokens (group-0 ``slots``) in ``layer``'s group, ``[T, KVH, D]``;
        zeros for tokens that group no longer holds (behind every window that reads)."""
        g, p = self.where[layer]
        own = self._to_group(slots, g)
        flat = (-1, self.config.num_kv_heads, self.config.head_dim)
        k = self.k_caches[p].reshape(flat)[own.clamp(min=0)]
        v = self.v_caches[p].reshape(flat)[own.clamp(min=0)]
        gone = (own < 0)[:, None, None]
        return k.masked_fill(gone, 0.0), v.masked_fill(gone, 0.0)

    def gather(self, layer: int, seq_id: SeqId) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's K and V in one layer, ``[seq_len, KVH, D]``; NaN for tokens the
        layer's group gave back."""
        g, p = self.where[layer]
        slots = torch.tensor(self.allocator.slot_mapping(seq_id, group=g), dtype=torch.int64)
        flat = (-1, self.config.num_kv_heads, self.config.head_dim)
        k = self.k_caches[p].reshape(flat)[slots.clamp(min=0)].clone()
        v = self.v_caches[p].reshape(flat)[slots.clamp(min=0)].clone()
        k[slots < 0] = float("nan")
        v[slots < 0] = float("nan")
        return k, v

    def run_copies(self, copies: Sequence[KVCopy | list[KVCopy]]) -> None:
        """Block copies in every position tensor (an append may copy once per group)."""
        super().run_copies(_flat(copies))
