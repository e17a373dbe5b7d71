"""vLLM v1's hybrid KV-cache manager: KV-cache groups, one block table each, one pool.

vLLM v1 serves a hybrid model (gpt-oss, Gemma 3) with a ``KVCacheCoordinator`` over one
single-type manager per KV-cache group, all drawing from one ``BlockPool``.
:class:`HybridAllocator` is that coordinator (:mod:`.hybrid_groups` says what a group
and a slot are):

1. **Admission counts every group.** A new sequence of ``P`` tokens takes
   ``ceil(P / block_size)`` blocks in *each* group (a sliding group too: the prefill's
   queries read their whole windows), all or nothing.
2. **A sliding-window group frees what falls behind its window.** Before a sequence
   grows at position ``n`` (a decode, or a prefill chunk starting there) each sliding
   group of window ``W`` gives up the blocks wholly before token ``n - W + 1``, the
   first one the query at ``n`` reads (vLLM's ``remove_skipped_blocks``). Their table
   entries become :data:`~.hybrid_groups.NULL_BLOCK` (vLLM's null block), so a table
   stays indexed by token position; a block nobody else holds goes back to the pool. A
   long sequence so keeps at most ``ceil((W - 1) / block_size) + 1`` blocks per sliding
   group.
3. **Full groups keep every block**, as the paged allocator does: forks share blocks
   (reference counts), an append into a shared partial block copies it first
   (copy-on-write; one copy per group, so ``append_slot`` may return a list of copies).
4. **Prefix-cache hits are intersected over the groups** (:mod:`.hybrid_cache`).

With one full group (a model without sliding layers, or vLLM's
``--disable-hybrid-kv-cache-manager``) it behaves as the paged allocator, block for
block. The read-only side, the accounting and the checks are :mod:`.hybrid_view`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import OutOfMemoryError
from ..workloads.block_hashes import branch_of
from . import hybrid_swap, hybrid_view
from .base import AppendResult, KVCopy, SeqId
from .block_pool import BlockPool
from .block_refs import BlockRefs
from .free_list import FreeList
from .hybrid_cache import HybridCache
from .hybrid_groups import NULL_BLOCK, GroupSpec, HybridSeq


class HybridAllocator(hybrid_swap.HybridSwapping, hybrid_view.HybridView):
    """``num_blocks`` blocks of ``block_size`` slots shared by ``groups`` (see the module)."""

    def __init__(self, num_blocks: int, block_size: int = 16,
                 groups: Sequence[GroupSpec] = (GroupSpec("full"),),
                 prefix_cache: bool = False, kind: str | None = None) -> None:
        groups = tuple(groups)
        if not groups or not all(isinstance(g, GroupSpec) for g in groups):
            raise ValueError(f"groups must be one or more GroupSpec, got {groups!r}")
        self.pool = BlockPool(num_blocks, block_size) if prefix_cache else \
            FreeList(num_blocks, block_size)
        self.groups = groups
        self.num_blocks, self.block_size = self.pool.num_blocks, self.pool.block_size
        self.capacity_slots = self.num_blocks * self.block_size
        self.kernel_block_slots: int | None = self.block_size
        self.prefix_block_size: int | None = self.block_size if prefix_cache else None
        self.max_model_len: int | None = None  # the registry sets the model's
        self.kind = kind or ("hybrid-prefix-cache" if prefix_cache else "hybrid")
        self.cache = HybridCache(self) if prefix_cache else None
        self.refs = BlockRefs(self.pool)  # how many tables hold each block
        self._ref = self.refs.counts  # (the same list, bound for the hot paths)
        self._seqs: dict[SeqId, HybridSeq] = {}
        self._sliding = [(g, s.window_tokens) for g, s in enumerate(groups) if s.window]
        #: Its sliding-window decode reads a sliding group's layers only in the window.
        self.kernel_window_tokens = tuple(sorted({w for _, w in self._sliding}))
        self._num_logical_blocks = 0  # held table entries, all groups
        self.group_blocks = [0] * len(groups)  # blocks each group holds now
        #: Table entries each group gave up behind its window, and of those the blocks
        #: that went back to the pool (nobody else held them), since the start.
        self.window_dropped_entries = [0] * len(groups)
        self.window_freed_blocks = [0] * len(groups)
        #: All groups' together: what the scheduler reads to retry a refused admission.
        self.freed_while_running_blocks = 0
        self._swap_token = object()
        self._swapped_ids: set[SeqId] = set()

    # ------------------------------------------------------------- admission
    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, content: object = None) -> bool:
        """``ceil(num_tokens / block_size)`` blocks in every group for each of
        ``seq_ids`` (cached prefixes from the cache, with ``content``), keeping
        ``watermark`` of the pool free; forks share, so ``fork_ids`` hold nothing. False,
        and nothing changed, when they do not fit."""
        num_tokens, content = self._checked_admission(seq_ids, fork_ids, num_tokens,
                                                      final_len, content)
        n, num_groups = -(-num_tokens // self.block_size), len(self.groups)
        if self.cache is not None and content is not None:
            plans, need = self.cache.plan(seq_ids, num_tokens, content)
        else:
            plans, need = None, n * num_groups * len(seq_ids)
        keep = self.watermark_blocks(watermark) if watermark or type(watermark) is not float else 0
        if self.pool.get_num_free_blocks() - need < keep:
            return False
        if plans is not None:
            self.cache.admit(seq_ids, num_tokens, final_len, content, plans)
            return True
        for seq_id in seq_ids:
            tables = [self._take(n, g) for g in range(num_groups)]
            self._seqs[seq_id] = HybridSeq(tables, [0] * num_groups, num_tokens, final_len)
        self._num_logical_blocks += n * num_groups * len(seq_ids)
        return True

    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None,
                 content: object = None) -> None:
        """Blocks for one new sequence (``allocate_group`` checks it); ``OutOfMemoryError``
        and nothing changed when they do not fit."""
        if not self.allocate_group([seq_id], num_tokens, final_len, content=content):
            raise OutOfMemoryError(
                f"sequence {seq_id!r} needs {self.blocks_needed(num_tokens)} blocks for "
                f"{num_tokens} tokens in {len(self.groups)} groups, "
                f"{self.pool.describe_free()}")

    # --------------------------------------------------------------- growing
    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one new token in every group: ``(slot, copies)``, the token's slot in
        group 0 and the copy-on-write copies to carry out first (None, one
        :class:`KVCopy`, or a list of them when several groups copy). Sliding groups first
        free the blocks this token's query no longer reads."""
        seq = self._get(seq_id)
        n, bs, ref = seq.num_tokens, self.block_size, self._ref
        off = n % bs
        tables = seq.tables
        need = len(tables)
        if off:  # a copy only where the partial last block is shared
            need = 0
            for t in tables:
                if ref[t[-1]] != 1:
                    need += 1
        if need > self.pool.get_num_free_blocks() and not self.can_append_all([seq_id]):
            raise OutOfMemoryError(f"no free block for sequence {seq_id!r}")
        if self._sliding:
            self._drop_behind(seq, n)
        copies: list[KVCopy] = []
        slot = -1
        for g, table in enumerate(tables):
            if not off:  # last block full (or none yet): a fresh one
                b = self._take_one(g)
                table.append(b)
                self._num_logical_blocks += 1
            else:
                b = table[-1]
                if ref[b] != 1:  # copy-on-write: the partial last block is shared
                    new = self._take_one(g)
                    self.refs.drop(b)
                    table[-1] = new
                    copies.append(KVCopy(b * bs, new * bs, off))
                    b = new
            if not g:
                slot = b * bs + off
        seq.num_tokens = n + 1
        seq.grown_at = n
        if off == bs - 1 and seq.content is not None:
            self.cache.filled(seq, n // bs)
        return slot, (None if not copies else copies[0] if len(copies) == 1 else copies)

    def extend(self, seq_id: SeqId, num_tokens: int) -> list[KVCopy]:
        """Room for ``num_tokens`` more tokens of one sequence (a prefill chunk): sliding
        groups free what the chunk's first query no longer reads, a shared partial block
        is copied once per group, then blocks are added. All or nothing."""
        if not self.can_extend(seq_id, num_tokens):
            raise OutOfMemoryError(f"no room for {num_tokens} more tokens of sequence "
                                   f"{seq_id!r} ({self.pool.get_num_free_blocks()} free "
                                   "blocks)")
        if not num_tokens:
            return []
        seq = self._seqs[seq_id]
        n, bs, ref = seq.num_tokens, self.block_size, self._ref
        if self._sliding:
            self._drop_behind(seq, n)
        copies = []
        total = -(-(n + num_tokens) // bs)
        for g, table in enumerate(seq.tables):
            if n % bs and ref[table[-1]] > 1:
                old, new = table[-1], self._take_one(g)
                self.refs.drop(old)
                table[-1] = new
                copies.append(KVCopy(old * bs, new * bs, n % bs))
            add = total - len(table)
            table += self._take(add, g)
            self._num_logical_blocks += add
        seq.num_tokens = n + num_tokens
        seq.grown_at = n
        if seq.content is not None:
            for j in range(n // bs, (n + num_tokens) // bs):
                self.cache.filled(seq, j)
        return copies

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` shares every block ``parent_id`` holds, in every group (nothing
        copied now; the first append of either copies the partial last blocks)."""
        parent = self._get(parent_id)
        self._check_new_ids([child_id], forking=True)
        tables = [list(t) for t in parent.tables]
        self.refs.hold([b for t in tables for b in t if b != NULL_BLOCK])
        child = self._seqs[child_id] = HybridSeq(
            tables, list(parent.first), parent.num_tokens, parent.final_len,
            parent.content, branch_of(child_id), list(parent.hashes))
        child.grown_at = parent.grown_at
        self._num_logical_blocks += sum(len(t) - f for t, f in zip(tables, child.first,
                                                                    strict=True))
        return []

    # --------------------------------------------------------------- release
    def free(self, seq_id: SeqId) -> None:
        """Drop the sequence, tail first across all groups (a chain's tail is evicted
        before its head): blocks nobody else holds go back to the pool."""
        try:
            seq = self._seqs.pop(seq_id)
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r} (never allocated, or "
                             "already freed)") from None
        tables = seq.tables
        # Token order with the groups reversed, which release walks backwards: the last
        # token's blocks first, group 0's first among them.
        held = [t[i] for i in range(len(tables[0])) for t in reversed(tables)
                if t[i] != NULL_BLOCK]
        self._num_logical_blocks -= len(held)
        self.refs.release(held)
        ref = self._ref
        for g, table in enumerate(tables):  # a block is one group's: back if nobody holds it
            self.group_blocks[g] -= sum(1 for b in table if b != NULL_BLOCK and not ref[b])

    # ---------------------------------------------------------------- helpers
    def _drop_behind(self, seq: HybridSeq, n: int) -> None:
        """Each sliding group gives up the blocks before the one holding token
        ``n - W + 1`` (the first the query at ``n`` reads), latest first as vLLM does."""
        bs = self.block_size
        for g, w in self._sliding:
            cut, first = (n - w + 1) // bs, seq.first[g]
            if cut <= first:
                continue
            table = seq.tables[g]
            back = self.refs.release(table[first:cut])  # latest first, as vLLM does
            table[first:cut] = [NULL_BLOCK] * (cut - first)
            seq.first[g] = cut
            self._num_logical_blocks -= cut - first
            self.window_dropped_entries[g] += cut - first
            self.window_freed_blocks[g] += back
            self.freed_while_running_blocks += back
            self.group_blocks[g] -= back

    def _take(self, n: int, group: int, names: list | tuple = ()) -> list[int]:
        """``n`` blocks for ``group`` from the pool (room checked), one holder each; a
        caching pool names the first ``len(names)``."""
        self.group_blocks[group] += n
        return self.refs.take(n, names)

    def _take_one(self, group: int) -> int:
        self.group_blocks[group] += 1
        return self.refs.take_one()  # room was checked by the caller
