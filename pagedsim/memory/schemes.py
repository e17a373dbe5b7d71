"""The scheme registry: every allocation scheme's one entry.

A scheme is a name plus everything the rest of the package needs to know about it:

- ``build``: an empty allocator for a pool (:class:`PoolSpec`); the allocator then
  answers every scheduling question itself through the narrow interface of
  :class:`pagedsim.memory.base.Allocator` (admission with the watermark, room held
  for forked children, swap-out sizes, whether a swap-in fits), so the scheduler never
  asks which scheme it drives;
- ``view``: how its snapshot is drawn (``"blocks"``: a grid of blocks or pages,
  :func:`pagedsim.plots.block_map`; ``"arena"``: a linear arena of regions,
  :func:`pagedsim.plots.arena_map`; :func:`pagedsim.plots.pool_map` picks by view);
- ``paper_key``: its key in :mod:`pagedsim.paper`'s tables, or None;
- ``family``: which KV-cache class mirrors it on real tensors. ``pagedsim.kernels`` registers
  those classes with :func:`register_kv_cache` when it is imported, so ``pagedsim``
  itself never imports torch.

Adding a scheme = one allocator module + one :func:`register` call below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..models.specs import ModelSpec, get_model
from ..validate import check_int
from .base import Allocator
from .block_manager import BlockManager
from .block_pool import EvictionPolicy
from .contiguous import PLACEMENTS, RESERVATIONS, ContiguousAllocator
from .eviction_lfu import LFU
from .host_tier import HostTier
from .hybrid import HybridAllocator
from .hybrid_groups import hybrid_layout
from .paged import PagedAllocator
from .prefix_cache import PrefixCachingAllocator
from .radix import RadixAllocator
from .radix_lfu import lfu
from .vattention import PAGE_BYTES_OPTIONS, VAttentionAllocator, vattention_for_model

DEFAULT_SCHEMES = ("contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged")
#: ``pagedsim compare``'s schemes for a model with sliding-window layers: the model as all
#: full attention, and as vLLM v1's hybrid manager serves it (same bytes, same requests).
HYBRID_DEFAULT_SCHEMES = ("all-full", "hybrid")
DEFAULT_PLACEMENT = "buddy"
VIEWS = ("blocks", "arena")


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """The pool a scheme's allocator manages.

    ``capacity_slots``: token slots in the pool; ``block_size``: slots per block
    (paged schemes); ``max_model_len``: longest sequence in tokens; ``model``: the
    model, for schemes whose unit is bytes rather than tokens (vAttention's pages);
    ``max_num_seqs``: most sequences running at once (vAttention's virtual regions);
    ``align_slots``: contiguous regions start on and span multiples of it (a real cache
    read by the paged kernel sets it to its block size); ``host_cache_blocks`` and
    ``host_write_through``: a host tier behind a prefix cache (:meth:`host_tier`).
    """

    capacity_slots: int
    block_size: int = 16
    max_model_len: int = 2048
    model: ModelSpec | None = None
    max_num_seqs: int = 256
    align_slots: int = 1  # contiguous regions: round sizes up to this (a kernel's block)
    host_cache_blocks: int = 0  # a host tier behind a prefix cache (blocks); 0: none
    host_write_through: bool = False

    def __post_init__(self) -> None:
        check_int("align_slots", self.align_slots, minimum=1)
        check_int("capacity_slots", self.capacity_slots, minimum=1)
        check_int("block_size", self.block_size, minimum=1)
        check_int("max_model_len", self.max_model_len, minimum=1)
        check_int("max_num_seqs", self.max_num_seqs, minimum=1)
        check_int("host_cache_blocks", self.host_cache_blocks, minimum=0)
        if not isinstance(self.host_write_through, bool):
            raise ValueError("host_write_through must be True or False, "
                             f"got {self.host_write_through!r}")
        if self.model is not None and not isinstance(self.model, ModelSpec):
            raise TypeError(f"model must be a ModelSpec or None, got {self.model!r}")

    def need_model(self, scheme: str) -> ModelSpec:
        if self.model is None:
            raise ValueError(f"scheme {scheme!r} needs the model (its page holds a number of "
                             "bytes, not tokens): pass model=")
        return self.model

    def host_tier(self) -> HostTier | None:
        """A host tier of ``host_cache_blocks`` blocks, or None for 0 (the default).
        Schemes without a prefix cache never ask: they name no block, so they have
        nothing to offload."""
        if self.host_cache_blocks == 0:
            return None
        return HostTier(self.host_cache_blocks, self.block_size, self.host_write_through)


@dataclass(frozen=True, slots=True)
class Scheme:
    """One registry entry (see the module docstring)."""

    name: str
    description: str
    family: str  # "paged" | "contiguous" | "vattention" | "hybrid": the KV cache mirroring it
    view: str  # "blocks" | "arena": how its snapshot is drawn
    build: Callable[[PoolSpec], Allocator]
    paper_key: str | None = None

    def __post_init__(self) -> None:
        if self.view not in VIEWS:
            raise ValueError(f"scheme {self.name!r}: view must be one of {VIEWS}, "
                             f"got {self.view!r}")


#: Every registered scheme, by name, in registration order.
SCHEMES: dict[str, Scheme] = {}
#: KV-cache classes by family, registered by ``pagedsim.kernels`` on import.
_KV_CACHES: dict[str, type] = {}


def register(scheme: Scheme) -> Scheme:
    """Add ``scheme`` to the registry (its name must be new)."""
    if scheme.name in SCHEMES:
        raise ValueError(f"scheme {scheme.name!r} is already registered")
    SCHEMES[scheme.name] = scheme
    return scheme


def available() -> list[str]:
    """The registered scheme names, in registration order."""
    return list(SCHEMES)


def get_scheme(name: str) -> Scheme:
    """The registry entry for ``name``; a one-line error listing the valid names otherwise."""
    try:
        return SCHEMES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown scheme {name!r}; valid: {', '.join(SCHEMES)}") from None


def make_allocator(scheme: str, capacity_slots: int, block_size: int = 16,
                   max_model_len: int = 2048, model: ModelSpec | str | None = None,
                   max_num_seqs: int = 256, align_slots: int = 1,
                   host_cache_blocks: int = 0, host_write_through: bool = False
                   ) -> Allocator:
    """An empty allocator for ``scheme`` over a pool of ``capacity_slots`` token slots
    (paged: ``capacity_slots // block_size`` blocks of ``block_size`` slots); see
    :class:`PoolSpec` for the rest. Every allocator it builds knows ``max_model_len``,
    the model's context, which the scheduler enforces for every scheme (paged blocks have
    no limit of their own; contiguous regions and vAttention's virtual ones do)."""
    entry = get_scheme(scheme)
    if isinstance(model, str):
        model = get_model(model)
    alloc = entry.build(PoolSpec(capacity_slots, block_size, max_model_len, model,
                                 max_num_seqs, align_slots, host_cache_blocks,
                                 host_write_through))
    if getattr(alloc, "max_model_len", None) is None:
        alloc.max_model_len = max_model_len
    return alloc


def default_schemes(model: ModelSpec | str) -> tuple[str, ...]:
    """The schemes ``pagedsim compare`` runs when none are named: for a model with
    sliding-window layers :data:`HYBRID_DEFAULT_SCHEMES` (where contiguous reservation of
    its long context would admit a request or two at a time), else
    :data:`DEFAULT_SCHEMES`, the vLLM paper's."""
    spec = get_model(model) if isinstance(model, str) else model
    if any(layer.kind == "sliding" for layer in spec.kv_layers):
        return HYBRID_DEFAULT_SCHEMES
    return DEFAULT_SCHEMES


def register_kv_cache(family: str, cls: type) -> None:
    """Called by ``pagedsim.kernels``: ``cls`` mirrors the allocators of ``family`` on tensors."""
    _KV_CACHES[family] = cls


def kv_cache_class(scheme: str) -> type:
    """The KV-cache class (from ``pagedsim.kernels``) that mirrors ``scheme`` on real tensors."""
    family = get_scheme(scheme).family
    if family not in _KV_CACHES:
        raise ValueError(f"no KV-cache class is registered for scheme {scheme!r} (family "
                         f"{family!r}); import pagedsim.kernels first")
    return _KV_CACHES[family]


# ------------------------------------------------------------------ the entries
def _num_blocks(pool: PoolSpec) -> int:
    """Whole blocks the pool holds (at least one, or ``ValueError`` saying so)."""
    num_blocks = pool.capacity_slots // pool.block_size
    if num_blocks < 1:
        raise ValueError(
            f"a pool of {pool.capacity_slots} slots holds no block of {pool.block_size} slots"
        )
    return num_blocks


def _paged(pool: PoolSpec) -> BlockManager:
    return PagedAllocator(_num_blocks(pool), pool.block_size)


register(Scheme(
    "paged", "PagedAttention (vLLM): fixed-size blocks, block tables, ref counts, "
    "copy-on-write", "paged", "blocks", _paged, paper_key="paged"))


def _prefix_cache(dedup: bool, eviction: Callable[[], EvictionPolicy] | None = None
                  ) -> Callable[[PoolSpec], Allocator]:
    def build(pool: PoolSpec) -> BlockManager:
        return PrefixCachingAllocator(_num_blocks(pool), pool.block_size, dedup,
                                      pool.host_tier(), None if eviction is None else eviction())
    return build


register(Scheme(
    "prefix-cache", "automatic prefix caching (vLLM v1): paged blocks named by chained "
    "hashes stay cached after their request ends; one LRU free queue, evicted lazily",
    "paged", "blocks", _prefix_cache(False)))
register(Scheme(
    "prefix-cache-lfu", "automatic prefix caching with LFU eviction: the free block whose "
    "content hits reused least often goes first (then the least recently freed)", "paged",
    "blocks", _prefix_cache(False, LFU)))
register(Scheme(
    "prefix-cache-dedup", "prefix caching that de-duplicates (vLLM v0): a block that fills "
    "with content already cached switches to the cached copy", "paged", "blocks",
    _prefix_cache(True)))


def _radix(pool: PoolSpec) -> BlockManager:
    return RadixAllocator(_num_blocks(pool), pool.block_size, host=pool.host_tier())


register(Scheme(
    "radix", "RadixAttention (SGLang): full pages kept in a radix tree of token content, "
    "lock counts on running paths, least recently used leaves evicted lazily", "paged",
    "blocks", _radix))
register(Scheme(
    "radix-lfu", "RadixAttention with SGLang's LFU eviction: the unlocked leaf hit least "
    "often goes first (then the least recently used)", "paged", "blocks",
    lambda pool: RadixAllocator(_num_blocks(pool), pool.block_size, eviction=lfu,
                                host=pool.host_tier())))

_RESERVATION_WORDS = {
    "max": "max_model_len slots per request",
    "pow2": "prompt + next power of two of the output",
    "oracle": "exactly prompt + output",
}


def _contiguous(reservation: str, placement: str) -> Callable[[PoolSpec], Allocator]:
    def build(pool: PoolSpec) -> ContiguousAllocator:
        return ContiguousAllocator(pool.capacity_slots, reservation, placement,
                                   pool.max_model_len, pool.align_slots)
    return build


for _r in RESERVATIONS:
    register(Scheme(
        f"contiguous-{_r}",
        f"one contiguous region per request ({_RESERVATION_WORDS[_r]}), buddy placement "
        "as the paper's Orca baselines", "contiguous", "arena",
        _contiguous(_r, DEFAULT_PLACEMENT), paper_key=f"contiguous-{_r}"))
    for _p in PLACEMENTS:
        register(Scheme(
            f"contiguous-{_r}-{_p}",
            f"one contiguous region per request ({_RESERVATION_WORDS[_r]}), {_p} placement",
            "contiguous", "arena", _contiguous(_r, _p)))


def _vattention(page_bytes: int, name: str) -> Callable[[PoolSpec], Allocator]:
    def build(pool: PoolSpec) -> VAttentionAllocator:
        return vattention_for_model(pool.capacity_slots, pool.need_model(name),
                                             page_bytes, pool.max_model_len,
                                             pool.max_num_seqs)
    return build


for _suffix, _page_bytes in PAGE_BYTES_OPTIONS.items():
    _name = f"vattention{_suffix}"
    register(Scheme(
        _name, f"vAttention: a virtual region per request, physical pages of "
        f"{_page_bytes // 1024:,} KiB per layer and K/V tensor mapped on demand",
        "vattention", "blocks", _vattention(_page_bytes, _name)))


def _hybrid(name: str, prefix_cache: bool, hybrid: bool) -> Callable[[PoolSpec], Allocator]:
    def build(pool: PoolSpec) -> HybridAllocator:
        # The same bytes as the all-full-attention pool of capacity_slots tokens, laid out
        # as vLLM lays them out for this model (its KV-cache groups, its block count).
        model = pool.need_model(name)
        layout = hybrid_layout(model, pool.capacity_slots * model.bytes_per_token,
                               pool.block_size, hybrid=hybrid,
                               max_model_len=pool.max_model_len)
        return HybridAllocator(layout.num_blocks, pool.block_size, layout.groups,
                               prefix_cache, kind=name)
    return build


register(Scheme(
    "hybrid", "vLLM v1's hybrid KV-cache manager: the model's KV-cache groups (full, "
    "sliding window) share one block pool; a sliding group frees blocks behind its window",
    "hybrid", "blocks", _hybrid("hybrid", False, True)))
register(Scheme(
    "hybrid-prefix-cache", "the hybrid manager with prefix caching: blocks named per group, "
    "a hit is the longest prefix every group holds (a sliding group: its last window)",
    "hybrid", "blocks", _hybrid("hybrid-prefix-cache", True, True)))
register(Scheme(
    "all-full", "the hybrid manager switched off (vLLM's --disable-hybrid-kv-cache-manager): "
    "every sliding-window layer kept as a full one, one KV-cache group", "hybrid", "blocks",
    _hybrid("all-full", False, False)))
