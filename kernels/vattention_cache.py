"""The vAttention KV cache: physical pages on demand, one contiguous view per request.

vAttention (Prabhu et al., ASPLOS'25) reserves, for every request, a *virtual* region of
``max_model_len`` tokens in each layer's K and V tensor and maps physical pages (2 MiB
or 64 KiB per layer and K/V tensor) into it as the request grows. The attention kernel
then sees each request's K and V as one contiguous ``[seq_len, KVH, D]`` tensor: it
needs no block table. :class:`pagedsim.memory.vattention.VAttentionAllocator`
accounts for those pages; this module is its mirror on real tensors.

Layout. Each layer's K (and V) pool is ``num_pages`` pages of ``page_tokens`` token
rows, stored as the usual ``[num_blocks, block_size, KVH, D]`` tensor with
``block_size`` dividing ``page_tokens`` (equal to it whenever the page holds at most
:data:`pagedsim.kernels.checks.MAX_BLOCK_SIZE` tokens; a 2 MiB page of a real model holds ~1,024,
more than the kernels' largest block, so it is then cut into ``page_tokens /
block_size`` consecutive blocks). Either way token slot ``page * page_tokens + offset``
is the same flat row of the tensor, so the allocator's slots, ``write_kv``, the swap
paths and the executor's scrubbing work unchanged.

Two ways to attend:

- :meth:`KVCache.attend` (inherited): the paged kernel over a block table derived
  from the request's pages (each page expanded into its consecutive blocks). This is
  what :class:`pagedsim.kernels.model.Decoder` calls, so the decoder runs on this cache as on
  any other.
- :meth:`VAttentionKVCache.attend_contiguous`: what vAttention really gives the
  kernel: per request, :meth:`~VAttentionKVCache.contiguous_view` assembles its K and
  V page by page into one ``[seq_len, KVH, D]`` tensor, and plain torch attention runs
  over it, no block table. On a GPU vAttention gets that view for free (the pages are
  mapped behind one virtual address range through CUDA's virtual-memory API); torch
  cannot remap memory, so here the view is a gather over the pages, a copy. The
  arithmetic is the same, which is what the tests hold it to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch

import pagedsim
from pagedsim.memory.schemes import get_scheme
from pagedsim.memory.vattention import PAGE_BYTES_OPTIONS, VAttentionAllocator, page_tokens_for

from .checks import MAX_BLOCK_SIZE
from .kv_cache import KVCache, KVCacheConfig, SeqId

_FAMILY = "vattention"


def page_bytes_for_scheme(scheme: str) -> int:
    """Bytes per page (per layer and K/V tensor) of a vattention scheme, from its name:
    ``"vattention"`` 2 MiB, ``"vattention-64k"`` 64 KiB (see ``PAGE_BYTES_OPTIONS``)."""
    if get_scheme(scheme).family != _FAMILY:  # get_scheme lists the valid names
        raise ValueError(f"scheme {scheme!r} is not a vattention scheme")
    suffix = scheme.removeprefix(_FAMILY)
    if suffix not in PAGE_BYTES_OPTIONS:
        raise ValueError(f"scheme {scheme!r}: no page size for suffix {suffix!r}; "
                         f"known: {sorted(PAGE_BYTES_OPTIONS)}")
    return PAGE_BYTES_OPTIONS[suffix]


def cache_model_spec(config: KVCacheConfig, max_model_len: int) -> pagedsim.ModelSpec:
    """The cache's rows as a :class:`pagedsim.ModelSpec`: the allocator sizes pages in
    bytes, and only layers, kv heads, head_dim and dtype bytes enter that arithmetic
    (the query heads and the weights do not, so they are set to neutral values)."""
    return pagedsim.ModelSpec("kv-cache", config.num_layers, config.num_kv_heads,
                              config.num_kv_heads, config.head_dim, config.dtype.itemsize,
                              0, max_model_len)


def kernel_block_size(page_tokens: int) -> int:
    """The kernels' block size for pages of ``page_tokens`` tokens: the page itself if
    the kernels accept blocks that big, else its largest divisor they accept (a page
    must be a whole number of blocks so that its slots stay one run of rows)."""
    if page_tokens <= MAX_BLOCK_SIZE:
        return page_tokens
    return next(b for b in range(MAX_BLOCK_SIZE, 0, -1) if page_tokens % b == 0)


class VAttentionKVCache(KVCache):
    """A cache over a :class:`~pagedsim.memory.vattention.VAttentionAllocator`: pages
    mapped on demand, forks copy.

    ``config`` must describe the pool exactly as the allocator cuts it:
    ``num_blocks * block_size == num_pages * page_tokens`` with ``block_size``
    dividing ``page_tokens``. :meth:`for_scheme` derives such a config.
    """

    allocator: VAttentionAllocator

    def __init__(self, config: KVCacheConfig, allocator: VAttentionAllocator) -> None:
        if not isinstance(allocator, VAttentionAllocator):
            raise TypeError(f"allocator must be a VAttentionAllocator, got "
                            f"{type(allocator).__name__}")
        if allocator.block_size % config.block_size:
            raise ValueError(f"pages of {allocator.block_size} tokens are not whole blocks "
                             f"of {config.block_size} slots")
        if allocator.capacity_slots != config.capacity_slots:
            raise ValueError(f"allocator has {allocator.num_blocks} pages of "
                             f"{allocator.block_size} tokens ({allocator.capacity_slots} "
                             f"slots), the cache {config.capacity_slots} slots")
        super().__init__(config)
        self.allocator = allocator
        self.page_tokens = allocator.block_size
        self.num_pages = allocator.num_blocks
        self.blocks_per_page = self.page_tokens // config.block_size

    @classmethod
    def for_scheme(cls, config: KVCacheConfig, scheme: str, max_model_len: int = 2048,
                   *, max_num_seqs: int = 256) -> VAttentionKVCache:
        """A cache of ``scheme``'s pages over (at most) ``config.capacity_slots`` slots.

        The page size in bytes comes from the scheme's name; tokens per page from this
        cache's own rows (``num_kv_heads * head_dim * dtype bytes``), as the simulator
        computes them for the same model. The pool is cut into whole pages exactly as
        :func:`pagedsim.make_allocator` cuts it for the simulator (the remainder is
        dropped), and the tensors are reshaped to that many pages.
        ``config.num_blocks`` and ``config.block_size`` only say how many slots.
        """
        page_bytes = page_bytes_for_scheme(scheme)
        spec = cache_model_spec(config, max_model_len)
        # Built through the registry, as the simulator builds its own, so both cut the
        # pool the same way and cap concurrency at the same number of regions; it
        # raises if a page holds no row or the pool no page.
        allocator = pagedsim.make_allocator(scheme, config.capacity_slots, config.block_size,
                                            max_model_len, model=spec,
                                            max_num_seqs=max_num_seqs)
        page_tokens = page_tokens_for(spec, page_bytes)
        if allocator.block_size != page_tokens:  # the registry and this cache disagree
            raise ValueError(f"scheme {scheme!r} built pages of {allocator.block_size} "
                             f"tokens, the cache's rows make {page_tokens}")
        block_size = kernel_block_size(page_tokens)
        shaped = replace(config, num_blocks=allocator.num_blocks * (page_tokens // block_size),
                         block_size=block_size)
        return cls(shaped, allocator)

    # ------------------------------------------------------------ pages
    def pages(self, seq_id: SeqId) -> list[int]:
        """The physical pages mapped into the request's region, in token order."""
        return self.allocator.block_table(seq_id)

    def block_table(self, seq_id: SeqId) -> list[int]:
        """Kernel blocks of the request's tokens: each page's consecutive blocks, cut
        after the last block that holds a token (the kernel ignores the rest anyway)."""
        r = self.blocks_per_page
        blocks = [p * r + j for p in self.pages(seq_id) for j in range(r)]
        return blocks[: -(-self.seq_len(seq_id) // self.config.block_size)]

    # ------------------------------------------------- contiguous view
    def _paged(self, cache: torch.Tensor) -> torch.Tensor:
        """A layer's pool seen as pages: ``[num_pages, page_tokens, KVH, D]`` (a view)."""
        return cache.view(self.num_pages, self.page_tokens, self.config.num_kv_heads,
                          self.config.head_dim)

    def contiguous_view(self, layer: int, seq_id: SeqId) -> tuple[torch.Tensor, torch.Tensor]:
        """The request's K and V in ``layer`` as vAttention's kernel sees them: token
        ``t`` at row ``t``, ``[seq_len, KVH, D]`` each. Assembled page by page (a gather
        of whole pages in page order, then the unfilled tail of the last page cut off);
        a copy here, a virtual-memory view on vAttention's GPU."""
        n = self.seq_len(seq_id)
        pages = torch.tensor(self.pages(seq_id), dtype=torch.int64,
                             device=self.k_caches[layer].device)  # [P]
        shape = (-1, self.config.num_kv_heads, self.config.head_dim)
        k = self._paged(self.k_caches[layer])[pages].reshape(shape)[:n]  # [seq_len, KVH, D]
        v = self._paged(self.v_caches[layer])[pages].reshape(shape)[:n]  # [seq_len, KVH, D]
        return k, v

    def attend_contiguous(self, layer: int, q: torch.Tensor, seq_ids: Sequence[SeqId],
                          scale: float | None = None) -> torch.Tensor:
        """Decode attention over each request's contiguous view, no block table.

        ``q [S, H, D]``, one query token per request of ``seq_ids`` (in order), returns
        ``[S, H, D]`` in ``q``'s dtype. Query head ``h`` reads kv head ``h // (H // KVH)``
        (grouped-query attention); scores and softmax in fp32; ``scale`` defaults to
        ``1 / sqrt(D)`` as in :func:`pagedsim.kernels.paged_attention`.
        """
        c = self.config
        seq_ids = list(seq_ids)
        if q.dim() != 3 or q.shape[0] != len(seq_ids) or q.shape[2] != c.head_dim:
            raise ValueError(f"q must be [{len(seq_ids)}, H, {c.head_dim}], got "
                             f"{tuple(q.shape)}")
        if q.shape[1] % c.num_kv_heads:
            raise ValueError(f"num_heads ({q.shape[1]}) must be a multiple of num_kv_heads "
                             f"({c.num_kv_heads})")
        if q.dtype != c.dtype:
            raise ValueError(f"q is {q.dtype} but the cache is {c.dtype}")
        if scale is None:
            scale = 1.0 / math.sqrt(c.head_dim)
        group = q.shape[1] // c.num_kv_heads
        out = torch.empty_like(q)  # [S, H, D]
        for s, seq_id in enumerate(seq_ids):
            if self.seq_len(seq_id) < 1:
                raise ValueError(f"sequence {seq_id!r} holds no token to attend to")
            k, v = self.contiguous_view(layer, seq_id)  # [L, KVH, D] each
            # Query head h = kv_head * group + g: one row per kv head, its G query heads.
            qg = q[s].float().view(c.num_kv_heads, group, c.head_dim)  # [KVH, G, D]
            scores = torch.einsum("kgd,lkd->kgl", qg, k.float()) * scale  # [KVH, G, L]
            probs = torch.softmax(scores, dim=-1)
            o = torch.einsum("kgl,lkd->kgd", probs, v.float())  # [KVH, G, D]
            out[s] = o.reshape(-1, c.head_dim).to(q.dtype)  # [H, D]
        return out
