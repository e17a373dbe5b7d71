"""vLLM v1's hybrid KV-cache manager: a coordinator over one manager per KV-cache group.

vLLM v1 serves a hybrid model (gpt-oss, Gemma 3) with a ``KVCacheCoordinator`` over one
single-type manager per KV-cache group, all drawing from one ``BlockPool``.
:class:`HybridAllocator` is that coordinator; each group's manager is a
:class:`~.hybrid_group_manager.GroupManager` holding that group's block tables over the
shared pool and reference counts (:mod:`.hybrid_groups` says what a group and a slot
are). The coordinator keeps what every group shares (each sequence's tokens and final
length, a :class:`~.hybrid_groups.HybridSeq`), asks the managers, and decides for all:

1. **Admission counts every group.** A new sequence of ``P`` tokens takes
   ``ceil(P / block_size)`` blocks in *each* group (a sliding group too: the prefill's
   queries read their whole windows), all or nothing.
2. **A sliding-window group frees what falls behind its window.** Before a sequence
   grows at position ``n`` (a decode, or a prefill chunk starting there) each group's
   manager gives up what its window no longer reads (vLLM's ``remove_skipped_blocks``;
   nothing in a full group). A long sequence so keeps at most
   ``ceil((W - 1) / block_size) + 1`` blocks per sliding group of window ``W``.
3. **Growing, sharing, release and swapping go group by group**: forks share blocks
   (reference counts), an append into a shared partial block copies it first
   (copy-on-write; one copy per group, so ``append_slot`` may return a list of copies).
   The room for them is counted over every group first, with the blocks the windows give
   back.
4. **Prefix-cache hits are intersected over the groups** (:mod:`.hybrid_cache`, which
   asks each manager for its own hit).

With one full group (a model without sliding layers, or vLLM's
``--disable-hybrid-kv-cache-manager``) it behaves as the paged allocator, block for
block.

The class reads as the block manager does: admission, growing, sharing and release,
swapping, then the questions that change nothing and the account per group. Its state is
declared in ``__init__`` and written only here; the managers' is theirs, and the
prefix-cache policy (:mod:`.hybrid_cache`) adds sequences through
:meth:`HybridAllocator.add_seq`.

The account: the groups *partition* the pool (a block is free, cached, or held by exactly
one group), so each group's token / reserved / internal-fragmentation / cached slots plus
the pool's free slots sum to the capacity. A sliding group's blocks are full but for each
table's last one, like a full group's (blocks behind the window are given up, not kept
half-empty), so each manager splits its slots from the fill of each sequence's last block
(:meth:`~.hybrid_group_manager.GroupManager.split`, :mod:`.fast_usage`'s argument, table
by table). Tokens behind the window that still sit in a held block count as ``token``:
their K/V is there until the block is given up. A swap-out copies each distinct block
once, in whichever group holds it; null entries stay null, so nothing behind a window is
copied or brought back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

from ..errors import OutOfMemoryError
from ..validate import check_fraction, check_int
from ..workloads.block_hashes import branch_of, hashes_for
from .accounting import final_tokens
from .base import (
    AppendResult,
    FromPool,
    KVCopy,
    SeqId,
    SlotUsage,
    SwappedGroup,
    check_new_ids,
    checked_admission,
    distinct_ids,
)
from .block_pool import BlockPool
from .block_refs import BlockRefs
from .free_list import FreeList
from .hybrid_cache import HybridCache
from .hybrid_group_manager import GroupManager
from .hybrid_groups import NULL_BLOCK, GroupSpec, HybridSeq


class HybridAllocator:
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
        self.refs = BlockRefs(self.pool)  # how many tables hold each block, all groups
        self._ref = self.refs.counts  # (the same list, bound for the hot paths)
        #: One manager per group, in group order, over the one pool and its counts.
        self.managers = tuple(GroupManager(g, spec, self.refs, self.block_size)
                              for g, spec in enumerate(groups))
        self._sliding = tuple(m for m in self.managers if m.window is not None)
        self.cache = HybridCache(self) if prefix_cache else None
        self.seqs: dict[SeqId, HybridSeq] = {}  # what every group shares of a sequence
        #: Its sliding-window decode reads a sliding group's layers only in the window.
        self.kernel_window_tokens = tuple(sorted({m.window for m in self._sliding}))
        #: All groups' together: what the scheduler reads to retry a refused admission.
        self.freed_while_running_blocks = 0
        self._swap_token = object()
        self._swapped_ids: set[SeqId] = set()

    # ------------------------------------------------ the groups' counts, read from them
    @property
    def num_logical_blocks(self) -> int:
        """Held table entries, all groups."""
        return sum(m.num_entries for m in self.managers)

    @property
    def group_blocks(self) -> list[int]:
        """Blocks each group holds now."""
        return [m.num_blocks for m in self.managers]

    @property
    def window_dropped_entries(self) -> list[int]:
        """Table entries each group gave up behind its window since the start."""
        return [m.dropped_entries for m in self.managers]

    @property
    def window_freed_blocks(self) -> list[int]:
        """Of those, the blocks that went back to the pool (nobody else held them)."""
        return [m.freed_blocks for m in self.managers]

    # ----------------------------------------------------------------------------- admission
    def lookup_prefix(self, block_hashes: object, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence the cache holds now in every
        group (:meth:`~.hybrid_cache.HybridCache.hit_blocks`); 0 without a cache."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if self.cache is None or block_hashes is None:
            return 0
        block_hashes = hashes_for(block_hashes, self.block_size)
        return self.cache.lookup(block_hashes, num_tokens, seq_id)

    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, block_hashes: object = None) -> bool:
        """``ceil(num_tokens / block_size)`` blocks in every group for each of
        ``seq_ids`` (cached prefixes from the cache, with ``block_hashes``), keeping
        ``watermark`` of the pool free; forks share, so ``fork_ids`` hold nothing. False,
        and nothing changed, when they do not fit in every group."""
        num_tokens, block_hashes = checked_admission(
            seq_ids, fork_ids, num_tokens, final_len, block_hashes, self.__contains__,
            self._swapped_ids.__contains__, self.prefix_block_size)
        n = -(-num_tokens // self.block_size)
        if self.cache is not None and block_hashes is not None:
            plans, need = self.cache.plan(seq_ids, num_tokens, block_hashes)
        else:
            plans, need = None, n * len(self.managers) * len(seq_ids)
        keep = self.watermark_blocks(watermark) if watermark or type(watermark) is not float else 0
        if self.pool.get_num_free_blocks() - need < keep:
            return False
        if plans is not None:
            self.cache.admit(seq_ids, num_tokens, final_len, block_hashes, plans)
            return True
        for seq_id in seq_ids:
            for m in self.managers:
                m.allocate(seq_id, n)
            self.seqs[seq_id] = HybridSeq(num_tokens, final_len)
        return True

    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None,
                 block_hashes: object = None) -> None:
        """Blocks for one new sequence (``allocate_group`` checks it); ``OutOfMemoryError``
        and nothing changed when they do not fit."""
        if not self.allocate_group([seq_id], num_tokens, final_len, block_hashes=block_hashes):
            raise OutOfMemoryError(
                f"sequence {seq_id!r} needs {self.blocks_needed(num_tokens)} blocks for "
                f"{num_tokens} tokens in {len(self.groups)} groups, "
                f"{self.pool.describe_free()}")

    # ------------------ growing: a sliding group first gives up what falls behind its window
    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one new token in every group: ``(slot, copies)``, the token's slot in
        group 0 and the copy-on-write copies to carry out first (None, one
        :class:`KVCopy`, or a list of them when several groups copy). Sliding groups first
        free the blocks this token's query no longer reads."""
        seq = self._get(seq_id)
        n, bs = seq.num_tokens, self.block_size
        off = n % bs
        managers = self.managers
        if off:  # a copy only where the partial last block is shared
            need, ref = 0, self._ref
            for m in managers:  # (their tables read here, not asked: every decode comes)
                need += ref[m.tables[seq_id][-1]] != 1
        else:
            need = len(managers)
        if need > self.pool.get_num_free_blocks() and not self.can_append_all([seq_id]):
            raise OutOfMemoryError(f"no free block for sequence {seq_id!r}")
        if self._sliding:
            self._remove_skipped(seq_id, n)
        copies: list[KVCopy] = []
        slot = -1
        for m in managers:
            b, copy = m.append(seq_id, n)
            if copy is not None:
                copies.append(copy)
            if slot < 0:  # group 0's: the protocol's slot
                slot = b * bs + off
        seq.grow(1)
        if off == bs - 1 and seq.block_hashes is not None:
            self.cache.filled(seq_id, seq, n // bs)
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
        seq = self.seqs[seq_id]
        n, bs = seq.num_tokens, self.block_size
        if self._sliding:
            self._remove_skipped(seq_id, n)
        total = -(-(n + num_tokens) // bs)
        copies = []
        for m in self.managers:
            copy = m.extend(seq_id, n, total)
            if copy is not None:
                copies.append(copy)
        seq.grow(num_tokens)
        if seq.block_hashes is not None:
            for j in range(n // bs, (n + num_tokens) // bs):
                self.cache.filled(seq_id, seq, j)
        return copies

    def _remove_skipped(self, seq_id: SeqId, n: int) -> None:
        """Each sliding group gives up what the query at ``n`` no longer reads, in group
        order; what went back to the pool is counted for the scheduler."""
        for m in self._sliding:
            self.freed_while_running_blocks += m.remove_skipped_blocks(seq_id, n)

    # ------------------------------------------------------------------- sharing and release
    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` shares every block ``parent_id`` holds, in every group (nothing
        copied now; the first append of either copies the partial last blocks)."""
        parent = self._get(parent_id)
        self._check_new_ids([child_id])
        for m in self.managers:
            m.fork(parent_id, child_id)
        self.add_seq(child_id, HybridSeq(
            parent.num_tokens, parent.final_len, parent.block_hashes, branch_of(child_id),
            list(parent.hashes), grown_at=parent.grown_at))
        return []

    def free(self, seq_id: SeqId) -> None:
        """Drop the sequence, tail first across all groups (a chain's tail is evicted
        before its head): blocks nobody else holds go back to the pool."""
        try:
            self.seqs.pop(seq_id)
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r} (never allocated, or "
                             "already freed)") from None
        tables = [m.pop(seq_id) for m in self.managers]
        # Token order with the groups reversed, which release walks backwards: the last
        # token's blocks first, group 0's first among them (one release for all groups,
        # not one per group as vLLM's managers free, so that a chain's tail goes first
        # in every group).
        held = [t[i] for i in range(len(tables[0])) for t in reversed(tables)
                if t[i] != NULL_BLOCK]
        self.refs.release(held)
        for m, table in zip(self.managers, tables, strict=True):
            m.released(table)

    # -------------------------------- swapping to a CPU buffer and back, every group at once
    def swap_out_slots(self, seq_ids: Iterable[SeqId]) -> int:
        """CPU slots a swap-out would take: every distinct block held, once."""
        held = {b for s in seq_ids for t in self._tables(s) for b in t if b >= 0}
        return len(held) * self.block_size

    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """Move ``seq_ids`` to a CPU buffer (each distinct block once, null entries kept)
        and release their GPU blocks."""
        seq_ids = distinct_ids(seq_ids)
        seqs = [self._get(s) for s in seq_ids]
        bs, local = self.block_size, {}  # GPU block -> (its index in the buffer, group)
        tables = [[[NULL_BLOCK if b < 0 else local.setdefault(b, (len(local), m.index))[0]
                    for b in m.tables[s]] for m in self.managers] for s in seq_ids]
        out = [KVCopy(b * bs, i * bs, bs) for b, (i, _) in local.items()]
        meta = [(q.num_tokens, q.final_len, [m.first[s] for m in self.managers], q.grown_at,
                 q.block_hashes, list(q.hashes)) for s, q in zip(seq_ids, seqs, strict=True)]
        for s in seq_ids:
            self.free(s)
        self._swapped_ids.update(seq_ids)
        state = {"tables": tables, "meta": meta, "num_blocks": len(local),
                 "groups": [g for _, g in local.values()]}
        return SwappedGroup(seq_ids=seq_ids, cpu_slots=len(local) * bs, out_copies=out,
                            state=state, owner=self._swap_token)

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        """Whether the group's blocks fit and leave ``watermark`` of the pool free."""
        group.check_can_return_to(self._swap_token)
        need = group.state["num_blocks"]
        return self.pool.get_num_free_blocks() - need >= self.watermark_blocks(watermark)

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Bring a swapped group back into fresh blocks (all or nothing); the copies
        CPU -> GPU."""
        group.check_can_return_to(self._swap_token)
        n, free = group.state["num_blocks"], self.pool.get_num_free_blocks()
        if n > free:
            raise OutOfMemoryError(f"swap-in needs {n} blocks, {free} free")
        managers = self.managers
        num_groups = len(managers)
        # Every group's table of every sequence in one take (the group's sharing comes
        # back); each block is the group's that held it before.
        new, flat = self.refs.take_for(n, [t for tables in group.state["tables"]
                                           for t in tables])
        for g, k in sorted(Counter(group.state["groups"]).items()):
            managers[g].own_new(k)
        for j, (seq_id, meta) in enumerate(zip(group.seq_ids, group.state["meta"],
                                               strict=True)):
            num_tokens, final_len, first, grown_at, block_hashes, hashes = meta
            for m, table, f in zip(managers, flat[j * num_groups:(j + 1) * num_groups],
                                   first, strict=True):
                m.add(seq_id, table, f)
            seq = self.seqs[seq_id] = HybridSeq(num_tokens, final_len, block_hashes,
                                                 branch_of(seq_id), list(hashes),
                                                 grown_at=grown_at)
            if block_hashes is not None:
                self.cache.swapped_in(seq_id, seq)
        group.swapped_in = True
        self._swapped_ids.difference_update(group.seq_ids)
        bs = self.block_size
        return [KVCopy(i * bs, b * bs, bs) for i, b in enumerate(new)]

    # ----- room: exact, counting the blocks sliding groups give back first (nothing changes)
    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks a ``num_tokens``-token prompt takes: that many per group."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        return -(-num_tokens // self.block_size) * len(self.groups)

    def slots_needed(self, num_tokens: int, final_len: int | None = None) -> int:
        return self.blocks_needed(num_tokens) * self.block_size

    def can_allocate(self, num_tokens: int, final_len: int | None = None) -> bool:
        return self.blocks_needed(num_tokens) <= self.pool.get_num_free_blocks()

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        """Whether one ``append_slot`` for each of ``seq_ids``, in order, would all
        succeed: exact, with the blocks each append's sliding groups give back first and
        copy-on-write counted as the appends would do it."""
        seq_ids = list(seq_ids)
        distinct_ids(seq_ids)  # refused: a repeat, or an unhashable id
        bs, ref, managers, sliding = self.block_size, self._ref, self.managers, self._sliding
        # Every id is checked before the room is: an unknown one is refused, not
        # answered False because memory ran short before it was reached.
        lengths = [self._get(seq_id).num_tokens for seq_id in seq_ids]
        free = self.pool.get_num_free_blocks()
        dropped: Counter[int] = Counter()
        copied: Counter[int] = Counter()  # shared last block -> sharers that copied it
        for seq_id, n in zip(seq_ids, lengths, strict=True):
            for m in sliding:
                free += m.returned(seq_id, n, dropped)
            if n % bs == 0:  # a fresh block in every group
                free -= len(managers)
            else:  # a copy in each group whose partial last block is still shared
                for m in managers:
                    last = m.tables[seq_id][-1]
                    if ref[last] - copied[last] > 1:
                        copied[last] += 1
                        free -= 1
            if free < 0:  # (free only falls within one sequence's groups)
                return False
        return True

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        """Whether ``num_tokens`` more tokens fit in every group (blocks given back
        behind the windows first, a shared partial block copied)."""
        seq = self._get(seq_id)
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if not num_tokens:
            return True
        n = seq.num_tokens
        free = self.pool.get_num_free_blocks()
        for m in self._sliding:
            free += m.returned(seq_id, n, None)
        total = -(-(n + num_tokens) // self.block_size)
        need = sum(m.blocks_to_extend(seq_id, n, total) for m in self.managers)
        return need <= free

    def watermark_blocks(self, watermark: float) -> int:
        """Blocks kept free at admission for a ``watermark`` fraction (as vLLM v0)."""
        return int(check_fraction("watermark", watermark) * self.num_blocks)

    def external_frag_slots(self, need_slots: int | None) -> int:
        """Always 0: any free block serves any sequence (of any KV-cache group)."""
        return 0

    # ------------------------------------------------------------------------------- lookups
    @property
    def num_seqs(self) -> int:
        return len(self.seqs)

    def __contains__(self, seq_id: object) -> bool:
        try:
            return seq_id in self.seqs
        except TypeError:
            return False

    def seq_ids(self) -> Iterator[SeqId]:
        return iter(self.seqs)

    def seq_len(self, seq_id: SeqId) -> int:
        return self._get(seq_id).num_tokens

    def final_len(self, seq_id: SeqId) -> int | None:
        return self._get(seq_id).final_len

    def prefix_hit_tokens(self, seq_id: SeqId) -> int:
        """Tokens of ``seq_id`` served from the prefix cache at its admission."""
        return self._get(seq_id).hit_tokens

    def block_table(self, seq_id: SeqId, group: int = 0) -> list[int]:
        """A copy of one group's block table (``NULL_BLOCK`` behind a window)."""
        self._get(seq_id)
        return list(self.managers[self._check_group(group)].tables[seq_id])

    def block_tables(self, seq_id: SeqId) -> list[list[int]]:
        """Copies of the sequence's block tables, one per group, in group order."""
        return [list(t) for t in self._tables(seq_id)]

    def slot_of(self, seq_id: SeqId, index: int, group: int = 0) -> int:
        """The pool slot of token ``index`` in ``group`` (group 0: the protocol's slot);
        -1 when that group gave its block up behind the window."""
        seq = self._get(seq_id)
        if type(index) is not int or not 0 <= index < seq.num_tokens:
            raise ValueError(f"token index {index!r} out of range for sequence {seq_id!r} "
                             f"of {seq.num_tokens} tokens")
        b = self.managers[self._check_group(group)].tables[seq_id][index // self.block_size]
        return -1 if b == NULL_BLOCK else b * self.block_size + index % self.block_size

    def slot_mapping(self, seq_id: SeqId, start: int = 0, end: int | None = None,
                     group: int = 0) -> list[int]:
        """Pool slots of tokens ``start .. end-1`` in ``group`` (default group 0, full
        attention whenever the model has a full layer; -1 for a token whose block a
        sliding group gave up)."""
        seq = self._get(seq_id)
        end = seq.num_tokens if end is None else end
        if not 0 <= start <= end <= seq.num_tokens:
            raise ValueError(f"token range [{start}, {end}) out of range for sequence "
                             f"{seq_id!r} of {seq.num_tokens} tokens")
        bs, table = self.block_size, self.managers[self._check_group(group)].tables[seq_id]
        return [-1 if (b := table[i // bs]) == NULL_BLOCK else b * bs + i % bs
                for i in range(start, end)]

    @property
    def num_free_slots(self) -> int:
        """Slots of never-used or released blocks (cached blocks are not counted)."""
        pool = self.pool
        return (pool.get_num_free_blocks() - pool.num_cached_blocks) * self.block_size

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    evicted_blocks = FromPool("Cached blocks evicted so far (handed out for other content).")
    on_release = FromPool("``on_release(start_slot, num_slots)`` for memory that goes back to "
                          "the pool (a cached block: when it is evicted), so a real cache can "
                          "scrub it.")

    # ---- the account per group and in total (the groups partition the pool), snapshot, checks
    def _last_fills(self, final_lens: Mapping | None) -> list[tuple[SeqId, int, int]]:
        """``(seq_id, fill, future fill)`` of each sequence's partial last block (the same
        position in every group): its tokens in it now and at its final length."""
        bs, fl = self.block_size, final_lens or {}
        lasts = []
        for seq_id, seq in self.seqs.items():
            n = seq.num_tokens
            fill = n % bs
            if not fill:
                continue
            final = final_tokens(n, fl.get(seq_id, seq.final_len) if fl else seq.final_len)
            lasts.append((seq_id, fill, min(bs, final - (n - fill))))
        return lasts

    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """Slots of every group together: token / reserved / internal fragmentation, and
        the cached ones (logical blocks: the tables' held entries), the sum of the
        groups' splits (they partition the held blocks)."""
        used = self.num_blocks - self.pool.get_num_free_blocks()
        lasts = self._last_fills(final_lens)
        token = reserved = 0
        for m in self.managers:
            t, r = m.split(lasts)
            token += t
            reserved += r
        return SlotUsage(token_slots=token, reserved_slots=reserved,
                         internal_frag_slots=used * self.block_size - token - reserved,
                         physical_blocks=used, logical_blocks=self.num_logical_blocks,
                         cached_slots=self.pool.num_cached_blocks * self.block_size)

    def group_usage(self, group: int, final_lens: Mapping[SeqId, int] | None = None
                    ) -> SlotUsage:
        """One group's share, from its manager: the slots of the blocks it holds, split
        as :meth:`usage` splits them, and the cached blocks named for it (a scan of the
        free queue)."""
        m = self.managers[self._check_group(group)]
        used = m.num_blocks
        token, reserved = m.split(self._last_fills(final_lens))
        return SlotUsage(token_slots=token, reserved_slots=reserved,
                         internal_frag_slots=used * self.block_size - token - reserved,
                         physical_blocks=used, logical_blocks=m.num_entries,
                         cached_slots=m.num_cached() * self.block_size)

    def group_accounts(self, final_lens: Mapping[SeqId, int] | None = None) -> list[dict]:
        """One row per group (``group``, ``kind``, ``window_tokens``, ``blocks`` held,
        ``token``, ``reserved``, ``internal_frag``, ``cached`` slots, and the entries and
        blocks given up behind the window so far), then a ``total`` row whose ``free``
        completes the six-way account: the rows' slots sum to ``capacity_slots``."""
        rows = []
        for g, (spec, m) in enumerate(zip(self.groups, self.managers, strict=True)):
            u = self.group_usage(g, final_lens)
            rows.append({"group": g, "kind": spec.kind, "window_tokens": spec.window_tokens,
                         "blocks": u.physical_blocks, "token": u.token_slots,
                         "reserved": u.reserved_slots, "internal_frag": u.internal_frag_slots,
                         "cached": u.cached_slots,
                         "window_dropped_entries": m.dropped_entries,
                         "window_freed_blocks": m.freed_blocks})
        total = {k: sum(r[k] for r in rows) for k in rows[0] if k not in
                 ("group", "kind", "window_tokens")}
        rows.append({"group": "total", "kind": "", "window_tokens": 0, **total,
                     "external_frag": 0, "free": self.num_free_slots})
        return rows

    def window_null_entries(self) -> list[int]:
        """Per group, the table entries live sequences hold as null (blocks given up
        behind the window): what a group that kept every block would hold more, in
        blocks (0 for full groups)."""
        return [m.null_entries() for m in self.managers]

    def snapshot(self) -> dict:
        """The whole state as plain data: the groups, every sequence's tables (group 0's
        as ``block_table``, the pictures' field), reference counts and the pool's free
        structure (in a caching pool its cached blocks and every block's name)."""
        snap = {
            "kind": self.kind, "view": "blocks", "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "groups": [(g.kind, g.window_tokens, g.num_layers) for g in self.groups],
            "free_blocks": [], "ref_counts": list(self._ref),
            "seqs": {sid: {"block_table": list(self.managers[0].tables[sid]),
                           "block_tables": self.block_tables(sid),
                           "num_tokens": s.num_tokens, "final_len": s.final_len}
                     for sid, s in self.seqs.items()},
        }
        self.pool.snapshot(snap)
        return snap

    def check_invariants(self) -> None:
        """Assert each group's tables fit its sequences (its manager's check), the groups
        partition the pool, tables and counts agree, and the fast accounting agrees with a
        walk (``AssertionError`` naming the first disagreement)."""
        num_tokens = {s: q.num_tokens for s, q in self.seqs.items()}
        grown_at = {s: q.grown_at for s, q in self.seqs.items()}
        counts: Counter[int] = Counter()
        owner: dict[int, int] = {}
        for m in self.managers:
            m.check(num_tokens, grown_at)
            for seq_id, table in m.tables.items():
                for b in table[m.first[seq_id]:]:
                    counts[b] += 1
                    assert owner.setdefault(b, m.index) == m.index, (
                        f"block {b} in groups {owner[b]}, {m.index}")
        for b in range(self.num_blocks):
            assert self._ref[b] == counts[b], f"block {b}: ref {self._ref[b]} != {counts[b]}"
        self.pool.check(set(counts))
        held = Counter(owner.values())
        assert self.group_blocks == [held[g] for g in range(len(self.groups))], (
            f"group block counts {self.group_blocks} != {[held[g] for g in held]}")
        assert self.refs.num_shared == sum(1 for c in counts.values() if c > 1)
        assert self.num_logical_blocks == sum(counts.values())
        walked = self._walk_usage()
        assert self.usage() == walked, f"fast usage {self.usage()} != {walked}"
        if self.cache is not None:
            self.cache.check()

    def _walk_usage(self) -> SlotUsage:
        """:meth:`usage` by the rule itself: every held block of every table visited."""
        bs, ref = self.block_size, self._ref
        seen: dict[int, tuple[int, int]] = {}  # block -> (fill, largest future fill)
        for seq_id, seq in self.seqs.items():
            n = seq.num_tokens
            final = final_tokens(n, seq.final_len)
            for m in self.managers:
                table = m.tables[seq_id]
                for j in range(m.first[seq_id], len(table)):
                    fill, future = min(bs, n - j * bs), min(bs, final - j * bs)
                    old = seen.get(table[j])
                    if old is None or future > old[1]:
                        seen[table[j]] = (fill, future)
        token = sum(f for f, _ in seen.values())
        reserved = sum(u - f for f, u in seen.values())
        used = len(seen)
        assert all(ref[b] for b in seen)
        return SlotUsage(token, reserved, used * bs - token - reserved, used,
                         self.num_logical_blocks, self.pool.num_cached_blocks * bs)

    # ------------------------------------------------------------------------------- helpers
    def add_seq(self, seq_id: SeqId, seq: HybridSeq) -> HybridSeq:
        """Record a new sequence whose tables the group managers hold already (a cached
        admission's): the one way a policy adds one."""
        self.seqs[seq_id] = seq
        return seq

    def _tables(self, seq_id: SeqId) -> list[list[int]]:
        """The sequence's tables, one per group (its managers' own lists: not to write)."""
        self._get(seq_id)
        return [m.tables[seq_id] for m in self.managers]

    def _get(self, seq_id: SeqId) -> HybridSeq:
        try:
            return self.seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None

    def _check_group(self, group: int) -> int:
        if type(group) is not int or not 0 <= group < len(self.groups):
            raise ValueError(f"group must be 0 to {len(self.groups) - 1}, got {group!r}")
        return group

    def _check_new_ids(self, seq_ids: Sequence[SeqId]) -> None:
        """Refuse ids given twice, ids in use and ids of a swapped-out group."""
        check_new_ids(seq_ids, self.__contains__, self._swapped_ids.__contains__)
