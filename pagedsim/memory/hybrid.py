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
block.

The class reads as the block manager does: admission, growing, sharing and release,
swapping, then the questions that change nothing and the account per group. Its state is
declared in ``__init__`` and written only here; the prefix-cache policy
(:mod:`.hybrid_cache`) adds sequences through :meth:`HybridAllocator.add_seq`.

The account: the groups *partition* the pool (a block is free, cached, or held by exactly
one group), so each group's token / reserved / internal-fragmentation / cached slots plus
the pool's free slots sum to the capacity. A sliding group's blocks are full but for each
table's last one, like a full group's (blocks behind the window are given up, not kept
half-empty), so one visit per sequence and group splits the slots (:mod:`.fast_usage`'s
argument, table by table). Tokens behind the window that still sit in a held block count
as ``token``: their K/V is there until the block is given up. A swap-out copies each
distinct block once, in whichever group holds it; null entries stay null, so nothing
behind a window is copied or brought back.
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
        self.cache = HybridCache(self) if prefix_cache else None
        self.refs = BlockRefs(self.pool)  # how many tables hold each block
        self._ref = self.refs.counts  # (the same list, bound for the hot paths)
        self.seqs: dict[SeqId, HybridSeq] = {}
        self._sliding = [(g, s.window_tokens) for g, s in enumerate(groups) if s.window]
        #: Its sliding-window decode reads a sliding group's layers only in the window.
        self.kernel_window_tokens = tuple(sorted({w for _, w in self._sliding}))
        self.num_logical_blocks = 0  # held table entries, all groups
        self.group_blocks = [0] * len(groups)  # blocks each group holds now
        #: Table entries each group gave up behind its window, and of those the blocks
        #: that went back to the pool (nobody else held them), since the start.
        self.window_dropped_entries = [0] * len(groups)
        self.window_freed_blocks = [0] * len(groups)
        #: All groups' together: what the scheduler reads to retry a refused admission.
        self.freed_while_running_blocks = 0
        self._swap_token = object()
        self._swapped_ids: set[SeqId] = set()

    # ----------------------------------------------------------------------------- admission
    def lookup_prefix(self, content: object, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence the cache holds now in every
        group (:meth:`~.hybrid_cache.HybridCache.hit_blocks`); 0 without a cache."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if self.cache is None or content is None:
            return 0
        content = hashes_for(content, self.block_size)
        return self.cache.lookup(content, num_tokens, seq_id)

    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, content: object = None) -> bool:
        """``ceil(num_tokens / block_size)`` blocks in every group for each of
        ``seq_ids`` (cached prefixes from the cache, with ``content``), keeping
        ``watermark`` of the pool free; forks share, so ``fork_ids`` hold nothing. False,
        and nothing changed, when they do not fit."""
        num_tokens, content = checked_admission(
            seq_ids, fork_ids, num_tokens, final_len, content, self.__contains__,
            self._swapped_ids.__contains__, self.prefix_block_size)
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
            tables = [self.take(n, g) for g in range(num_groups)]
            self.seqs[seq_id] = HybridSeq(tables, [0] * num_groups, num_tokens, final_len)
        self.num_logical_blocks += n * num_groups * len(seq_ids)
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

    # ------------------ growing: a sliding group first gives up what falls behind its window
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
                self.num_logical_blocks += 1
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
        if off == bs - 1 and seq.block_hashes is not None:
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
        seq = self.seqs[seq_id]
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
            table += self.take(add, g)
            self.num_logical_blocks += add
        seq.num_tokens = n + num_tokens
        seq.grown_at = n
        if seq.block_hashes is not None:
            for j in range(n // bs, (n + num_tokens) // bs):
                self.cache.filled(seq, j)
        return copies

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
            self.num_logical_blocks -= cut - first
            self.window_dropped_entries[g] += cut - first
            self.window_freed_blocks[g] += back
            self.freed_while_running_blocks += back
            self.group_blocks[g] -= back

    # ------------------------------------------------------------------- sharing and release
    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` shares every block ``parent_id`` holds, in every group (nothing
        copied now; the first append of either copies the partial last blocks)."""
        parent = self._get(parent_id)
        self._check_new_ids([child_id])
        tables = [list(t) for t in parent.tables]
        self.refs.hold([b for t in tables for b in t if b != NULL_BLOCK])
        child = self.add_seq(child_id, HybridSeq(
            tables, list(parent.first), parent.num_tokens, parent.final_len,
            parent.block_hashes, branch_of(child_id), list(parent.hashes)))
        child.grown_at = parent.grown_at
        return []

    def free(self, seq_id: SeqId) -> None:
        """Drop the sequence, tail first across all groups (a chain's tail is evicted
        before its head): blocks nobody else holds go back to the pool."""
        try:
            seq = self.seqs.pop(seq_id)
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r} (never allocated, or "
                             "already freed)") from None
        tables = seq.tables
        # Token order with the groups reversed, which release walks backwards: the last
        # token's blocks first, group 0's first among them.
        held = [t[i] for i in range(len(tables[0])) for t in reversed(tables)
                if t[i] != NULL_BLOCK]
        self.num_logical_blocks -= len(held)
        self.refs.release(held)
        ref = self._ref
        for g, table in enumerate(tables):  # a block is one group's: back if nobody holds it
            self.group_blocks[g] -= sum(1 for b in table if b != NULL_BLOCK and not ref[b])

    # -------------------------------- swapping to a CPU buffer and back, every group at once
    def swap_out_slots(self, seq_ids: Iterable[SeqId]) -> int:
        """CPU slots a swap-out would take: every distinct block held, once."""
        held = {b for s in seq_ids for t in self._get(s).tables for b in t if b >= 0}
        return len(held) * self.block_size

    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """Move ``seq_ids`` to a CPU buffer (each distinct block once, null entries kept)
        and release their GPU blocks."""
        seq_ids = distinct_ids(seq_ids)
        seqs = [self._get(s) for s in seq_ids]
        bs, local = self.block_size, {}  # GPU block -> (its index in the buffer, group)
        tables = [[[NULL_BLOCK if b < 0 else local.setdefault(b, (len(local), g))[0]
                    for b in t] for g, t in enumerate(q.tables)] for q in seqs]
        out = [KVCopy(b * bs, i * bs, bs) for b, (i, _) in local.items()]
        meta = [(q.num_tokens, q.final_len, list(q.first), q.grown_at, q.block_hashes,
                 list(q.hashes)) for q in seqs]
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
        num_groups = len(self.groups)
        # Every group's table of every sequence, in one list (the group's sharing comes back).
        new, flat = self.refs.take_for(n, [t for tables in group.state["tables"]
                                           for t in tables])
        for g in group.state["groups"]:
            self.group_blocks[g] += 1
        for j, (seq_id, meta) in enumerate(zip(group.seq_ids, group.state["meta"],
                                               strict=True)):
            num_tokens, final_len, first, grown_at, content, hashes = meta
            phys = flat[j * num_groups:(j + 1) * num_groups]
            self.num_logical_blocks += sum(b != NULL_BLOCK for t in phys for b in t)
            seq = self.seqs[seq_id] = HybridSeq(phys, list(first), num_tokens, final_len,
                                                 content, branch_of(seq_id))
            seq.grown_at = grown_at
            if content is not None:
                self.cache.swapped_in(seq, hashes)
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

    def _returned(self, seq: HybridSeq, n: int, dropped: Counter | None) -> int:
        """Blocks that come back to the pool when ``seq`` grows at position ``n``: those
        its sliding groups give up that no other sequence holds (``dropped`` counts the
        references earlier growths of the same batch gave up)."""
        bs, ref, back = self.block_size, self._ref, 0
        for g, w in self._sliding:
            table = seq.tables[g]
            for i in range(seq.first[g], (n - w + 1) // bs):
                b = table[i]
                if dropped is None:
                    back += ref[b] == 1
                else:
                    dropped[b] += 1
                    back += dropped[b] == ref[b]
        return back

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        """Whether one ``append_slot`` for each of ``seq_ids``, in order, would all
        succeed: exact, with the blocks each append's sliding groups give back first and
        copy-on-write counted as the appends would do it."""
        seq_ids = list(seq_ids)
        distinct_ids(seq_ids)  # refused: a repeat, or an unhashable id
        bs, ref = self.block_size, self._ref
        free = self.pool.get_num_free_blocks()
        dropped: Counter[int] = Counter()
        copied: Counter[int] = Counter()  # shared last block -> sharers that copied it
        for seq_id in seq_ids:
            seq = self._get(seq_id)
            n = seq.num_tokens
            if self._sliding:
                free += self._returned(seq, n, dropped)
            for table in seq.tables:
                if n % bs == 0:
                    free -= 1
                elif ref[table[-1]] - copied[table[-1]] > 1:
                    copied[table[-1]] += 1
                    free -= 1
                if free < 0:
                    return False
        return True

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        """Whether ``num_tokens`` more tokens fit in every group (blocks given back
        behind the windows first, a shared partial block copied)."""
        seq = self._get(seq_id)
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if not num_tokens:
            return True
        n, bs = seq.num_tokens, self.block_size
        free = self.pool.get_num_free_blocks()
        if self._sliding:
            free += self._returned(seq, n, None)
        total = -(-(n + num_tokens) // bs)
        need = 0
        for table in seq.tables:
            need += total - len(table) + (n % bs != 0 and self._ref[table[-1]] > 1)
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
        return list(self._get(seq_id).tables[self._check_group(group)])

    def block_tables(self, seq_id: SeqId) -> list[list[int]]:
        """Copies of the sequence's block tables, one per group, in group order."""
        return [list(t) for t in self._get(seq_id).tables]

    def slot_of(self, seq_id: SeqId, index: int, group: int = 0) -> int:
        """The pool slot of token ``index`` in ``group`` (group 0: the protocol's slot);
        -1 when that group gave its block up behind the window."""
        seq = self._get(seq_id)
        if type(index) is not int or not 0 <= index < seq.num_tokens:
            raise ValueError(f"token index {index!r} out of range for sequence {seq_id!r} "
                             f"of {seq.num_tokens} tokens")
        b = seq.tables[self._check_group(group)][index // self.block_size]
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
        bs, table = self.block_size, seq.tables[self._check_group(group)]
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
    def _split(self, groups: range, used_blocks: int, final_lens: Mapping | None
               ) -> tuple[int, int]:
        """(token, reserved) slots of the blocks ``groups`` hold (``used_blocks`` of them)."""
        bs, ref, fl = self.block_size, self._ref, final_lens or {}
        token = reserved = num_partial = 0
        shared_last: dict[int, tuple[int, int]] = {}  # shared partial block -> (fill, future)
        for seq_id, seq in self.seqs.items():
            n = seq.num_tokens
            fill = n % bs
            if not fill:
                continue
            final = final_tokens(n, fl.get(seq_id, seq.final_len) if fl else seq.final_len)
            future = min(bs, final - (n - fill))
            for g in groups:
                b = seq.tables[g][-1]
                if ref[b] == 1:
                    num_partial += 1
                    token += fill
                    reserved += future - fill
                else:
                    old = shared_last.get(b)
                    if old is None:
                        num_partial += 1
                    if old is None or future > old[1]:
                        shared_last[b] = (fill, future)
        for fill, future in shared_last.values():
            token += fill
            reserved += future - fill
        return token + (used_blocks - num_partial) * bs, reserved

    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """Slots of every group together: token / reserved / internal fragmentation, and
        the cached ones (logical blocks: the tables' held entries)."""
        used = self.num_blocks - self.pool.get_num_free_blocks()
        token, reserved = self._split(range(len(self.groups)), used, final_lens)
        return SlotUsage(token_slots=token, reserved_slots=reserved,
                         internal_frag_slots=used * self.block_size - token - reserved,
                         physical_blocks=used, logical_blocks=self.num_logical_blocks,
                         cached_slots=self.pool.num_cached_blocks * self.block_size)

    def group_usage(self, group: int, final_lens: Mapping[SeqId, int] | None = None
                    ) -> SlotUsage:
        """One group's share: the slots of the blocks it holds, split as :meth:`usage`
        splits them, and the cached blocks named for it (a scan of the free queue)."""
        g = self._check_group(group)
        used = self.group_blocks[g]
        token, reserved = self._split(range(g, g + 1), used, final_lens)
        names = getattr(self.pool, "hashes", None)
        cached = 0 if names is None else sum(
            1 for b in self.pool.free if names[b] is not None and names[b][0] == g)
        held = sum(len(s.tables[g]) - s.first[g] for s in self.seqs.values())
        return SlotUsage(token_slots=token, reserved_slots=reserved,
                         internal_frag_slots=used * self.block_size - token - reserved,
                         physical_blocks=used, logical_blocks=held,
                         cached_slots=cached * self.block_size)

    def group_accounts(self, final_lens: Mapping[SeqId, int] | None = None) -> list[dict]:
        """One row per group (``group``, ``kind``, ``window_tokens``, ``blocks`` held,
        ``token``, ``reserved``, ``internal_frag``, ``cached`` slots, and the entries and
        blocks given up behind the window so far), then a ``total`` row whose ``free``
        completes the six-way account: the rows' slots sum to ``capacity_slots``."""
        rows = []
        for g, spec in enumerate(self.groups):
            u = self.group_usage(g, final_lens)
            rows.append({"group": g, "kind": spec.kind, "window_tokens": spec.window_tokens,
                         "blocks": u.physical_blocks, "token": u.token_slots,
                         "reserved": u.reserved_slots, "internal_frag": u.internal_frag_slots,
                         "cached": u.cached_slots,
                         "window_dropped_entries": self.window_dropped_entries[g],
                         "window_freed_blocks": self.window_freed_blocks[g]})
        total = {k: sum(r[k] for r in rows) for k in rows[0] if k not in
                 ("group", "kind", "window_tokens")}
        rows.append({"group": "total", "kind": "", "window_tokens": 0, **total,
                     "external_frag": 0, "free": self.num_free_slots})
        return rows

    def window_null_entries(self) -> list[int]:
        """Per group, the table entries live sequences hold as null (blocks given up
        behind the window): what a group that kept every block would hold more, in
        blocks (0 for full groups)."""
        out = [0] * len(self.groups)
        for g, _ in self._sliding:
            out[g] = sum(seq.first[g] for seq in self.seqs.values())
        return out

    def snapshot(self) -> dict:
        """The whole state as plain data: the groups, every sequence's tables (group 0's
        as ``block_table``, the pictures' field), reference counts and the pool's free
        structure (in a caching pool its cached blocks and every block's name)."""
        snap = {
            "kind": self.kind, "view": "blocks", "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "groups": [(g.kind, g.window_tokens, g.num_layers) for g in self.groups],
            "free_blocks": [], "ref_counts": list(self._ref),
            "seqs": {sid: {"block_table": list(s.tables[0]),
                           "block_tables": [list(t) for t in s.tables],
                           "num_tokens": s.num_tokens, "final_len": s.final_len}
                     for sid, s in self.seqs.items()},
        }
        self.pool.snapshot(snap)
        return snap

    def check_invariants(self) -> None:
        """Assert the groups partition the pool, tables and counts agree, each sliding
        group gave up every block behind the window of its last growth, and the fast
        accounting agrees with a walk (``AssertionError`` naming the first disagreement)."""
        counts: Counter[int] = Counter()
        owner: dict[int, int] = {}
        bs = self.block_size
        for seq_id, seq in self.seqs.items():
            assert len({len(t) for t in seq.tables}) == 1, f"{seq_id!r}: tables differ"
            assert len(seq.tables[0]) == -(-seq.num_tokens // bs), (
                f"sequence {seq_id!r}: {len(seq.tables[0])} blocks for {seq.num_tokens}")
            for g, (table, first) in enumerate(zip(seq.tables, seq.first, strict=True)):
                window = self.groups[g].window
                assert window is not None or first == 0, f"{seq_id!r}: full group dropped"
                assert all(b == NULL_BLOCK for b in table[:first]), f"{seq_id!r}: {g}"
                assert NULL_BLOCK not in table[first:], f"{seq_id!r}: hole in group {g}"
                assert not table or first < len(table), f"{seq_id!r}: last block dropped"
                if window is not None and seq.grown_at >= 0:
                    assert first >= (seq.grown_at - window + 1) // bs, (
                        f"sequence {seq_id!r}: group {g} keeps blocks behind its window")
                for b in table[first:]:
                    counts[b] += 1
                    assert owner.setdefault(b, g) == g, f"block {b} in groups {owner[b]}, {g}"
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
        for seq in self.seqs.values():
            n = seq.num_tokens
            final = final_tokens(n, seq.final_len)
            for table, first in zip(seq.tables, seq.first, strict=True):
                for j in range(first, len(table)):
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
        """Record a new sequence whose blocks it holds already (a fork's, a cached
        admission's): the one way a policy adds one, so the logical-block count stays
        the manager's to keep."""
        self.seqs[seq_id] = seq
        self.num_logical_blocks += sum(len(t) - f for t, f in zip(seq.tables, seq.first,
                                                                  strict=True))
        return seq

    def hold(self, group: int, blocks: list[int]) -> None:
        """One more holder of each of ``blocks`` (a prefix hit) for ``group``; those
        nobody held join the group's count."""
        self.group_blocks[group] += self.refs.hold(blocks)

    def take(self, n: int, group: int, names: list | tuple = ()) -> list[int]:
        """``n`` blocks for ``group`` from the pool (room checked), one holder each; a
        caching pool names the first ``len(names)``."""
        self.group_blocks[group] += n
        return self.refs.take(n, names)

    def _take_one(self, group: int) -> int:
        self.group_blocks[group] += 1
        return self.refs.take_one()  # room was checked by the caller

    def _get(self, seq_id: SeqId):
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
