"""KV caches whose memory is handed out by the pagedsim allocators.

A cache owns, per layer, a K and a V tensor of shape
``[num_blocks, block_size, num_kv_heads, head_dim]`` and one allocator that says
which slots each sequence owns. Every add / append / fork / free / swap goes through
the allocator; whenever the allocator reports that K/V must move (a copy-on-write,
the copy a contiguous fork needs, a swap) this class moves it. The attention kernel
reads either cache through block tables, so the two differ only in *where* tokens
sit:

- :class:`PagedKVCache`: a :class:`pagedsim.PagedAllocator`; block tables are the
  allocator's, scattered anywhere in the pool.
- :class:`ContiguousKVCache`: a :class:`pagedsim.ContiguousAllocator`; a region is a
  run of consecutive blocks, so its "block table" is a consecutive range.

The caches are designed to be driven one step at a time by an executor that
follows a scheduler's plan: ``add``/``fork``/``free``, ``append_slots`` (returns the
slots the new tokens go to, after carrying out any copy-on-write), ``run_copies``,
``swap_out``/``swap_in``, and ``attention_metadata`` for the kernel.

Unwritten slots hold NaN (a sentinel): a kernel that reads a slot nobody wrote gets
NaN, and :meth:`KVCache.written_slots` counts the slots really written.

Prefix caching (schemes ``prefix-cache``, ``prefix-cache-dedup``, ``radix``: any scheme of
the ``paged`` family whose allocator keeps blocks past their request) needs nothing of
its own here: a :class:`PagedKVCache` simply reads the block tables its allocator hands
out. A cached prefix block is an ordinary block of the pool whose K/V was written once,
by the request that computed it; a later request that hits it finds the block id in its
own table (the allocator raised its reference count) and attends to that K/V without
writing it again, so only tokens ``start ..`` of a prefill are written
(:meth:`pagedsim.kernels.model.Decoder.forward_prefill` with ``starts``). When the last
request holding a cached block ends, the block keeps its K/V (the allocator calls it
*cached*, not free) and is scrubbed back to NaN only when the allocator evicts it for new
content and reports it through ``on_release``. So the slots that are not NaN are the
live tokens' plus the cached blocks' (:mod:`pagedsim.kernels.measure` checks exactly that).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

import pagedsim
from pagedsim import KVCopy

from .attention import paged_attention
from .backend import DEVICE
from .cache_ops import copy_blocks, write_kv
from .checks import FLOAT_DTYPES, MAX_BLOCK_SIZE

SeqId = Hashable


@dataclass(slots=True)
class KVCacheConfig:
    """Shape of the pool. ``num_blocks * block_size`` slots, each holding one token's
    K and V for all ``num_layers`` layers. ``layer_windows``: each layer's sliding window
    in tokens, 0 for full attention (empty: every layer full); a hybrid cache
    (:class:`pagedsim.kernels.hybrid_cache.HybridKVCache`) groups the layers by them."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    num_blocks: int
    block_size: int = 16
    dtype: torch.dtype = torch.float32
    device: str = DEVICE
    layer_windows: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_kv_heads", "head_dim", "num_blocks", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.block_size > MAX_BLOCK_SIZE:
            raise ValueError(f"block_size must be <= {MAX_BLOCK_SIZE}, got {self.block_size}")
        if self.dtype not in FLOAT_DTYPES:
            raise ValueError(f"dtype must be one of {FLOAT_DTYPES}, got {self.dtype}")
        windows = self.layer_windows
        if windows and (len(windows) != self.num_layers or not all(
                type(w) is int and w >= 0 for w in windows)):
            raise ValueError(f"layer_windows must give {self.num_layers} ints >= 0 (0: full "
                             f"attention), got {windows!r}")

    @property
    def capacity_slots(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def bytes_per_slot(self) -> int:
        """``2 * num_layers * num_kv_heads * head_dim * dtype_bytes`` (K and V, all layers)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype.itemsize

    @property
    def kv_bytes(self) -> int:
        return self.capacity_slots * self.bytes_per_slot


@dataclass(slots=True)
class SwappedKV:
    """Sequences swapped out: the allocator's record and the K/V it copied to the CPU."""

    group: pagedsim.SwappedGroup
    k: list[torch.Tensor]  # per layer, CPU [group.cpu_slots, KVH, D]
    v: list[torch.Tensor]


def _slot_runs(copies: Sequence[KVCopy]) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot-level copies as (src_slots, dst_slots) int64 index tensors."""
    src = [c.src_slot + i for c in copies for i in range(c.num_slots)]
    dst = [c.dst_slot + i for c in copies for i in range(c.num_slots)]
    return torch.tensor(src, dtype=torch.int64), torch.tensor(dst, dtype=torch.int64)


class KVCache:
    """What both caches share; subclasses say how a sequence's slots form a block table."""

    allocator: pagedsim.PagedAllocator | pagedsim.ContiguousAllocator

    def __init__(self, config: KVCacheConfig) -> None:
        self.config = config
        shape = (config.num_blocks, config.block_size, config.num_kv_heads, config.head_dim)
        # NaN sentinel: see the module docstring.
        self.k_caches = [torch.full(shape, float("nan"), dtype=config.dtype, device=config.device)
                         for _ in range(config.num_layers)]
        self.v_caches = [torch.full(shape, float("nan"), dtype=config.dtype, device=config.device)
                         for _ in range(config.num_layers)]
        self.num_copied_blocks = 0  # block pairs copied so far (each one in every layer)
        #: Kernel backend for this cache's writes, copies and attention ("triton" or
        #: "torch"); None means :data:`pagedsim.kernels.BACKEND`.
        self.backend: str | None = None

    @classmethod
    def for_scheme(cls, config: KVCacheConfig, scheme: str, max_model_len: int = 2048):
        """A cache over a fresh allocator of ``scheme``, built by the scheme registry for
        this pool: blocks of ``config.block_size`` (contiguous regions aligned to them, so
        a region is a run of whole blocks)."""
        return cls(config, allocator=pagedsim.make_allocator(
            scheme, config.capacity_slots, config.block_size, max_model_len,
            align_slots=config.block_size))

    # ----------------------------------------------------------- sequences
    def add(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None,
            request: pagedsim.Request | None = None) -> int:
        """Room for a new sequence's ``num_tokens``-token prompt (raises OutOfMemoryError).

        ``request`` names the prompt's tokens (a prefix-caching allocator then serves its
        cached prefix from blocks already holding that K/V). Returns how many leading
        tokens were served so (0 without a prefix cache): write and compute only the rest.
        """
        if request is None:
            self.allocator.allocate(seq_id, num_tokens, final_len)
        elif not self.allocator.allocate_group([seq_id], num_tokens, final_len,
                                               block_hashes=request):
            raise pagedsim.OutOfMemoryError(
                f"sequence {seq_id!r}: no room for {num_tokens} tokens, nothing was changed")
        return self.allocator.prefix_hit_tokens(seq_id)

    def fork(self, parent_id: SeqId, child_id: SeqId) -> None:
        """``child_id`` gets ``parent_id``'s tokens (shared if paged, copied if contiguous)."""
        self.run_copies(self.allocator.fork(parent_id, child_id))

    def free(self, seq_id: SeqId) -> None:
        self.allocator.free(seq_id)

    def append_slots(self, seq_ids: Sequence[SeqId]) -> torch.Tensor:
        """Room for one new token in each sequence, in order; int64 ``[len(seq_ids)]`` slots.

        Copy-on-write copies the allocator asks for are carried out here, before the
        caller writes the new tokens (they must precede every write of this step).

        All or nothing: when the appends cannot all succeed this raises
        ``OutOfMemoryError`` (or ``ValueError`` for an unknown or repeated id) before
        anything changes. Appending one by one and failing halfway would leave the
        earlier sequences one token longer, pointing at a copy-on-write block whose
        copy never ran (their first tokens would read back as the NaN sentinel).
        """
        seq_ids = list(seq_ids)
        seen: set[SeqId] = set()
        for seq_id in seq_ids:
            # can_append_all predicts one append per sequence; a repeated id would make
            # it wrong, and two new tokens of one sequence in one step is a caller bug.
            if seq_id in seen:
                raise ValueError(f"append_slots got sequence id {seq_id!r} twice")
            seen.add(seq_id)
        if not self.allocator.can_append_all(seq_ids):  # ValueError for an unknown id
            shown = ", ".join(repr(s) for s in seq_ids[:8]) + (", ..." if len(seq_ids) > 8 else "")
            raise pagedsim.OutOfMemoryError(
                f"no room to append one token to each of {len(seq_ids)} sequences "
                f"({shown}); nothing was changed"
            )
        slots, copies = [], []
        for seq_id in seq_ids:
            slot, copy = self.allocator.append_slot(seq_id)
            slots.append(slot)
            if copy is not None:
                copies.append(copy)
        self.run_copies(copies)
        return torch.tensor(slots, dtype=torch.int64, device=self.config.device)

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self.allocator

    def seq_len(self, seq_id: SeqId) -> int:
        return self.allocator.seq_len(seq_id)

    def slot_mapping(self, seq_ids: Sequence[SeqId], start: int = 0,
                     end: int | None = None) -> torch.Tensor:
        """Slots of tokens ``start .. end-1`` of each sequence, concatenated; int64."""
        slots = [s for seq_id in seq_ids for s in self.allocator.slot_mapping(seq_id, start, end)]
        return torch.tensor(slots, dtype=torch.int64, device=self.config.device)

    # ------------------------------------------------------------ kernels
    def block_table(self, seq_id: SeqId) -> list[int]:
        """Physical blocks holding the sequence's tokens, in order."""
        raise NotImplementedError

    def attention_metadata(self, seq_ids: Sequence[SeqId]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(block_tables int32 [S, max_blocks] padded with -1, seq_lens int32 [S])``."""
        tables = [self.block_table(s) for s in seq_ids]
        width = max((len(t) for t in tables), default=0) or 1
        padded = [t + [-1] * (width - len(t)) for t in tables]
        device = self.config.device
        return (torch.tensor(padded, dtype=torch.int32, device=device).reshape(len(tables), width),
                torch.tensor([self.seq_len(s) for s in seq_ids], dtype=torch.int32,
                             device=device))

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        """New tokens' K/V ``[T, KVH, D]`` into ``slots`` (int64 ``[T]``) of one layer."""
        write_kv(self.k_caches[layer], self.v_caches[layer], k, v, slots, backend=self.backend)

    def attend(self, layer: int, q: torch.Tensor, block_tables: torch.Tensor,
               seq_lens: torch.Tensor, window_tokens: int | None = None) -> torch.Tensor:
        """Decode attention for one layer: ``q [S, H, D] -> [S, H, D]`` (over the last
        ``window_tokens`` tokens of each sequence, for a sliding-window layer)."""
        return paged_attention(q, self.k_caches[layer], self.v_caches[layer], block_tables,
                               seq_lens, backend=self.backend, window_tokens=window_tokens)

    def run_copies(self, copies: Sequence[KVCopy]) -> None:
        """Carry out block-aligned copies (copy-on-write, contiguous fork) in every layer."""
        pairs = [p for c in copies for p in c.block_pairs(self.config.block_size)]
        if not pairs:
            return
        for k_cache, v_cache in zip(self.k_caches, self.v_caches, strict=True):
            copy_blocks(k_cache, v_cache, pairs, backend=self.backend)
        self.num_copied_blocks += len(pairs)

    def read(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The K and V held in ``slots`` (int64 ``[T]``) of one layer, ``[T, KVH, D]`` each
        (a copy): a prefill with a cached prefix attends to it."""
        flat_shape = (-1, self.config.num_kv_heads, self.config.head_dim)
        return (self.k_caches[layer].reshape(flat_shape)[slots],
                self.v_caches[layer].reshape(flat_shape)[slots])

    def gather(self, layer: int, seq_id: SeqId) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's cached K and V in one layer, ``[seq_len, KVH, D]`` each."""
        slots = self.slot_mapping([seq_id])
        flat_shape = (-1, self.config.num_kv_heads, self.config.head_dim)
        return (self.k_caches[layer].reshape(flat_shape)[slots],
                self.v_caches[layer].reshape(flat_shape)[slots])

    # ----------------------------------------------------------- swapping
    def swap_out(self, seq_ids: Sequence[SeqId]) -> SwappedKV:
        """Copy the sequences' K/V to CPU buffers and release their GPU memory."""
        return self.read_swapped(self.allocator.swap_out(seq_ids))

    def read_swapped(self, group: pagedsim.SwappedGroup) -> SwappedKV:
        """The K/V a swap-out moves, read into CPU buffers (the one path for swap-out
        copies: :meth:`swap_out` and the plan-driven executor both use it). The
        allocator has already released the GPU slots; they must not have been
        overwritten yet."""
        src, dst = _slot_runs(group.out_copies)
        shape = (group.cpu_slots, self.config.num_kv_heads, self.config.head_dim)
        pin = self.config.device != "cpu" and torch.cuda.is_available()
        ks, vs = [], []
        for k_cache, v_cache in zip(self.k_caches, self.v_caches, strict=True):
            k_cpu = torch.empty(shape, dtype=self.config.dtype, pin_memory=pin)
            v_cpu = torch.empty(shape, dtype=self.config.dtype, pin_memory=pin)
            src_d = src.to(k_cache.device)
            k_cpu[dst] = k_cache.reshape(-1, *shape[1:])[src_d].cpu()
            v_cpu[dst] = v_cache.reshape(-1, *shape[1:])[src_d].cpu()
            ks.append(k_cpu)
            vs.append(v_cpu)
        return SwappedKV(group, ks, vs)

    def swap_in(self, swapped: SwappedKV) -> None:
        """Bring swapped sequences back (to new slots); raises OutOfMemoryError if no room."""
        self.write_swapped(swapped, self.allocator.swap_in(swapped.group))

    def write_swapped(self, swapped: SwappedKV, copies: Sequence[KVCopy]) -> None:
        """Write a swapped group's CPU buffers into the GPU slots of ``copies`` (what the
        allocator's ``swap_in`` returned); the one path for swap-in copies."""
        src, dst = _slot_runs(copies)
        for layer, (k_cache, v_cache) in enumerate(zip(self.k_caches, self.v_caches,
                                                       strict=True)):
            flat = (-1, self.config.num_kv_heads, self.config.head_dim)
            dst_d = dst.to(k_cache.device)
            k_cache.reshape(flat)[dst_d] = swapped.k[layer][src].to(k_cache.device)
            v_cache.reshape(flat)[dst_d] = swapped.v[layer][src].to(v_cache.device)

    # ---------------------------------------------------------- measuring
    def written_slots(self) -> int:
        """Slots whose K in layer 0 is no longer the NaN sentinel (written and not scrubbed
        since): live tokens' slots, plus those of prefix-cached blocks."""
        return int(self.written_per_block().sum())

    def written_per_block(self) -> torch.Tensor:
        """int64 ``[num_blocks]``: each block's slots that are not the NaN sentinel in
        layer 0's K (see :meth:`written_slots`)."""
        c = self.config
        k = self.k_caches[0].reshape(c.num_blocks, c.block_size, -1)
        return (~k.isnan().all(dim=2)).sum(dim=1).cpu()

    def usage(self) -> pagedsim.SlotUsage:
        return self.allocator.usage()


class PagedKVCache(KVCache):
    """A paged cache: any free block serves any sequence; forks share blocks, and so do
    requests with a common cached prefix when the allocator caches prefixes (see the
    module docstring)."""

    allocator: pagedsim.PagedAllocator

    def __init__(self, config: KVCacheConfig,
                 allocator: pagedsim.PagedAllocator | None = None) -> None:
        super().__init__(config)
        if allocator is None:
            allocator = pagedsim.PagedAllocator(config.num_blocks, config.block_size)
        if (allocator.num_blocks, allocator.block_size) != (config.num_blocks,
                                                             config.block_size):
            raise ValueError(f"allocator has {allocator.num_blocks} blocks of "
                             f"{allocator.block_size} slots, the cache {config.num_blocks} "
                             f"of {config.block_size}")
        self.allocator = allocator

    def block_table(self, seq_id: SeqId) -> list[int]:
        return self.allocator.block_table(seq_id)


class ContiguousKVCache(KVCache):
    """One contiguous region per sequence, read by the same kernel as a run of blocks.

    The allocator is built with ``align_slots = block_size``: every region starts on
    a block boundary and spans whole blocks, so region ``[start, start + size)`` *is*
    blocks ``start // bs .. (start + size) // bs - 1`` and its block table is that
    consecutive range. Alignment rounds each reservation up to a multiple of the
    block size; the allocator counts that padding as internal fragmentation (memory
    the region owns and never fills). Token and reserved slots are unchanged by it;
    internal fragmentation grows by at most ``block_size - 1`` slots per region (and,
    sizes being different, placement may differ from an unaligned arena's, so
    external fragmentation can too). With ``reservation="max"`` the padding is zero
    whenever ``max_model_len`` is a multiple of the block size.
    """

    allocator: pagedsim.ContiguousAllocator

    def __init__(self, config: KVCacheConfig, reservation: str = "max",
                 placement: str = "first-fit", max_model_len: int = 2048,
                 allocator: pagedsim.ContiguousAllocator | None = None) -> None:
        super().__init__(config)
        if allocator is None:
            allocator = pagedsim.ContiguousAllocator(
                config.capacity_slots, reservation=reservation, placement=placement,
                max_model_len=max_model_len, align_slots=config.block_size)
        if (allocator.capacity_slots, allocator.align_slots) != (config.capacity_slots,
                                                                 config.block_size):
            raise ValueError(f"allocator has {allocator.capacity_slots} slots aligned to "
                             f"{allocator.align_slots}, the cache needs "
                             f"{config.capacity_slots} aligned to {config.block_size}")
        self.allocator = allocator

    def block_table(self, seq_id: SeqId) -> list[int]:
        start, _size = self.allocator.region(seq_id)
        bs = self.config.block_size
        first = start // bs
        return list(range(first, first + -(-self.seq_len(seq_id) // bs)))
