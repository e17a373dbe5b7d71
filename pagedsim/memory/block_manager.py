"""The block-table manager: PagedAttention's bookkeeping, written once for every scheme.

A sequence owns a *block table*: its i-th token lives in slot ``table[i // block_size] *
block_size + i % block_size``. Blocks carry *reference counts* (``refs``, a
:class:`~.block_refs.BlockRefs`); ``fork`` gives a child its parent's blocks (counts + 1,
nothing copied) and a sequence that writes into a block others still hold first gets its
own copy of that one block (*copy-on-write*).

What differs between schemes is composed in, never overridden (as vLLM v1's
``KVCacheManager`` composes a ``BlockPool``, and SGLang's scheduler a ``RadixCache``):

* ``pool``, where blocks come from: a free list (:mod:`.free_list`), vLLM v1's free queue
  that keeps freed blocks' content (:mod:`.block_pool`), or SGLang's free list plus the
  radix tree's evictable pages (:mod:`.radix_pool`);
* ``cache``, the prefix-cache policy (None: no prefix cache): which cached blocks a new
  sequence starts with, how full blocks are named, what happens at free
  (:mod:`.hash_cache`, :mod:`.radix_cache`);
* ``regions``, vAttention's virtual regions (:class:`~.vattention.Regions`: a cap on
  sequences and their length, forks that copy).

Read-only questions: :mod:`.block_queries`; many appends in one call: :mod:`.block_batch`;
swapping: :mod:`.block_swap`; accounting, pictures, checks: :mod:`.block_view`. Hot paths
(``append_slot``, ``allocate_group``, ``free``) stay flat: they run millions of times a run.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import OutOfMemoryError
from ..workloads.block_hashes import BlockHashes, branch_of
from . import block_batch, block_queries, block_swap, block_view
from .base import AppendResult, KVCopy, SeqId
from .block_refs import BlockRefs
from .block_seq import Seq


class BlockManager(block_queries.Queries, block_batch.BatchAppend, block_swap.Swapping,
                   block_view.View):
    """Block tables and reference counts over one pool (see the module docstring)."""

    def __init__(self, pool, cache=None, dedup: bool = False, kind: str = "paged",
                 regions=None) -> None:
        if not isinstance(dedup, bool):
            raise ValueError(f"dedup must be True or False, got {dedup!r}")
        self.pool, self.dedup, self.kind, self.regions = pool, dedup, kind, regions
        self.num_blocks, self.block_size = pool.num_blocks, pool.block_size
        self.capacity_slots = self.num_blocks * self.block_size
        # The attention kernel reads blocks through the table; vAttention's reads one
        # virtually contiguous region.
        self.kernel_block_slots: int | None = None if regions else self.block_size
        self.kernel_window_tokens: tuple[int, ...] = ()  # every layer full attention
        self.refs = BlockRefs(pool)  # how many tables hold each block
        self._ref = self.refs.counts  # (the same list, bound for the hot paths)
        self._seqs: dict[SeqId, Seq] = {}
        self._num_logical_blocks = 0  # sum of block-table lengths
        self.cache = cache
        self._at_free = cache if getattr(cache, "acts_at_free", True) else None  # free's hooks
        self._swap_token = object()  # marks the groups this manager swapped out
        self._swapped_ids: set[SeqId] = set()  # ids of those groups: not to be reused
        #: Blocks whose chained hashes name cached content (the prefix cache's block
        #: size), or None: nothing is cached, so nobody need hash anything.
        self.prefix_block_size: int | None = None if cache is None else self.block_size
        #: The model's context in tokens, when the registry says it (the scheduler rejects
        #: longer requests); blocks themselves set no limit. vAttention's regions do.
        self.max_model_len: int | None = None if regions is None else regions.max_model_len

    # ------------------------------------------------------------- admission
    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, content: object = None) -> bool:
        """Blocks for each of ``seq_ids`` (``num_tokens`` tokens each), keeping
        ``watermark`` of the blocks free (cached ones count as free); with a prefix cache
        and ``content`` (the request's :class:`BlockHashes`; a request itself is hashed
        now), each sequence's cached prefix comes from the cache. False, and nothing
        changed, when they do not fit."""
        regions = self.regions
        if (len(seq_ids) != 1 or fork_ids or regions is not None  # the common case, no call:
                or type(seq_ids[0]) is not int or seq_ids[0] in self._seqs  # a new int id,
                or seq_ids[0] in self._swapped_ids or type(num_tokens) is not int  # lengths
                or num_tokens < 0 or final_len is not None  # in order, hashes for this pool
                and (type(final_len) is not int or final_len < num_tokens)
                or content is not None and (type(content) is not BlockHashes
                                            or content.block_size != self.prefix_block_size)):
            num_tokens, content = self._checked_admission(seq_ids, fork_ids, num_tokens,
                                                          final_len, content)
        if regions is not None and not regions.admits(self, seq_ids, fork_ids, num_tokens):
            return False
        bs, cache = self.block_size, self.cache
        n = -(-num_tokens // bs)
        if cache is not None and content is not None:  # the policy plans: nothing changes
            plans, need = cache.plan(self, seq_ids, num_tokens, content)
        else:
            plans, need = None, n * len(seq_ids)
        if regions is not None:
            need += n * len(fork_ids)  # rooms held for the forks, which copy
        keep = self.watermark_blocks(watermark) if watermark or type(watermark) is not float else 0
        if self.pool.get_num_free_blocks() - need < keep:
            return False
        if plans is not None:
            cache.admit(self, seq_ids, num_tokens, final_len, content, plans)
            return True
        for seq_id in seq_ids:
            self._add_seq(seq_id, Seq(self.refs.take(n), num_tokens, final_len))
        if fork_ids and regions is not None:
            regions.hold(self, fork_ids, n, final_len)
        return True

    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None,
                 content: object = None) -> None:
        """Blocks for one new sequence (``allocate_group`` checks it); ``OutOfMemoryError``
        saying why, and nothing changed, when they do not fit."""
        if not self.allocate_group([seq_id], num_tokens, final_len, content=content):
            why = self.regions.refusal(self) if self.regions is not None else None
            raise OutOfMemoryError(why or f"sequence {seq_id!r} needs "
                                   f"{self.blocks_needed(num_tokens)} blocks for "
                                   f"{num_tokens} tokens, {self.pool.describe_free()}")

    # --------------------------------------------------------------- growing
    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one new token: ``(slot, copy)``; ``copy`` is the copy-on-write copy
        of the shared last block to carry out before writing, or None. In a caching pool
        a block that becomes full is named by its hash, and so becomes reusable."""
        try:
            seq = self._seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None
        slot = seq.next_slot
        if slot < seq.end_slot:  # the common case: a free slot in its private last block
            seq.next_slot = slot + 1
            seq.num_tokens += 1
            return slot, None
        n, bs = seq.num_tokens, self.block_size
        if self.regions is not None:
            self.regions.check_room(seq_id, n)
        offset = n % bs
        copy = None
        if offset == 0:  # last block full (or no block yet): take a fresh one
            block = self.refs.take_one(seq_id)
            seq.table.append(block)
            self._num_logical_blocks += 1
            slot = block * bs
            if self.regions is None and bs > 1:  # _set_room of a fresh private block
                seq.num_tokens = n + 1
                seq.next_slot = slot + 1
                seq.end_slot = slot + bs - (self.cache is not None)
                return slot, None
        else:
            block = seq.table[-1]
            ref = self._ref
            if ref[block] == 1:
                slot = block * bs + offset
            else:  # copy-on-write: the last block is shared; give this sequence its own
                new = self.refs.take_one(seq_id, "no free block for the copy-on-write of")
                self.refs.drop(block)
                seq.table[-1] = new
                slot = new * bs + offset
                copy = KVCopy(block * bs, new * bs, offset)
        seq.num_tokens = n + 1
        if offset == bs - 1 and seq.content is not None:
            # dedup only without a copy: a copied-into block must not go back this step
            kept = self.cache.filled(self, seq, n // bs, dedup=self.dedup and copy is None)
            if kept != slot // bs:  # deduplicated: the same token's K/V goes to the copy
                slot = kept * bs + offset
        self._set_room(seq)
        return slot, copy

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` shares every block of ``parent_id``; nothing is copied now
        (vAttention's regions copy instead: :meth:`~.vattention.Regions.fork`)."""
        parent = self._get(parent_id)
        self._check_new_ids([child_id], forking=True)
        if self.regions is not None:
            return self.regions.fork(self, parent_id, parent, child_id)
        self.refs.hold(parent.table)
        parent.end_slot = 0  # its last block is shared now: the next append may copy it
        child = self._add_seq(child_id, Seq(list(parent.table), parent.num_tokens,
                                            parent.final_len, parent.content,
                                            branch_of(child_id), list(parent.hashes)))
        if self.cache is not None:
            self.cache.forked(self, parent, child)
        return []

    # --------------------------------------------------------------- release
    def free(self, seq_id: SeqId) -> None:
        """Drop the sequence, tail first: blocks nobody else holds go back to the pool (a
        caching pool keeps the full ones' content), so a chain's tail is evicted before
        its head and a prompt freed and allocated again gets its blocks back."""
        if self.regions is not None and self.regions.release_held(self, seq_id):
            return
        try:
            seq = self._seqs.pop(seq_id)
        except (KeyError, TypeError):
            seq = self._pop_seq(seq_id)  # raises, saying why
        cache = self._at_free  # the policy, when it acts at free (radix), else None
        if cache is not None:
            cache.freeing(self, seq)  # radix: its full pages join the tree first
        self._num_logical_blocks -= len(seq.table)
        self.refs.release(seq.table)
        if cache is not None:
            cache.freed(self, seq)

    # ---------------------------------------------------------------- helpers
    def _add_seq(self, seq_id: SeqId, seq: Seq) -> Seq:
        """Record a new sequence whose blocks it holds already (an admission's, a fork's,
        a swap-in's): the one way a policy adds one, so that the logical-block count and
        the fast path's room stay the manager's to keep."""
        self._seqs[seq_id] = seq
        self._num_logical_blocks += len(seq.table)
        if seq.num_tokens % self.block_size:
            self._set_room(seq)
        return seq

    def _set_room(self, seq: Seq) -> None:
        """Set ``seq.next_slot`` and ``seq.end_slot`` for the fast path of ``append_slot``."""
        bs = self.block_size
        n = seq.num_tokens
        offset = n % bs
        if not offset or self._ref[seq.table[-1]] != 1:
            seq.end_slot = 0
            return
        # Up to the block's end; with a prefix cache the filling append takes the general
        # path, which names the block.
        room = bs - offset - (self.cache is not None)
        if self.regions is not None:
            room = min(room, self.regions.max_model_len - n)
        seq.next_slot = seq.table[-1] * bs + offset
        seq.end_slot = seq.next_slot + room
