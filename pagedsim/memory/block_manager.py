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
  (:mod:`.hash_cache`, :mod:`.radix_cache`).

What the manager asks of each is declared once, as the protocols
:class:`~.manager_parts.Pool` and :class:`~.manager_parts.PrefixCache`.

The class reads top to bottom: admission, growing, sharing, release, swapping; then the
questions that change nothing (room, lookups, the accounting's view); then helpers. Its
state is declared in ``__init__`` and written only here; the policies read ``seqs`` and
``refs`` and add sequences through :meth:`BlockManager.add_seq`. The one speed device in
it: each sequence remembers the room left in its private last block (``next_slot``,
``end_slot``), so that most appends are two additions (``append_slot``'s first lines). Runs
of decode steps at once are :mod:`.decode_runs`'.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

from ..errors import OutOfMemoryError
from ..validate import check_fraction, check_int
from ..workloads.block_hashes import branch_of, hashes_for
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
from .block_refs import BlockRefs
from .block_seq import Seq
from .fast_usage import usage_by_block_walk, usage_by_last_blocks
from .manager_parts import Pool, PrefixCache


class BlockManager:
    """Block tables and reference counts over one pool (see the module docstring)."""

    def __init__(self, pool: Pool, cache: PrefixCache | None = None, dedup: bool = False,
                 kind: str = "paged") -> None:
        if not isinstance(dedup, bool):
            raise ValueError(f"dedup must be True or False, got {dedup!r}")
        self.pool, self.dedup, self.kind = pool, dedup, kind
        self.num_blocks, self.block_size = pool.num_blocks, pool.block_size
        self.capacity_slots = self.num_blocks * self.block_size
        # The attention kernel reads blocks through the table.
        self.kernel_block_slots: int | None = self.block_size
        self.kernel_window_tokens: tuple[int, ...] = ()  # every layer full attention
        self.refs = BlockRefs(pool)  # how many tables hold each block
        self._ref = self.refs.counts  # (the same list, bound for the hot paths)
        self.seqs: dict[SeqId, Seq] = {}
        self.num_logical_blocks = 0  # sum of block-table lengths
        self.cache = cache
        self._at_free = cache if cache is not None and cache.acts_at_free else None
        self._swap_token = object()  # marks the groups this manager swapped out
        self._swapped_ids: set[SeqId] = set()  # ids of those groups: not to be reused
        #: Blocks whose chained hashes name cached content (the prefix cache's block
        #: size), or None: nothing is cached, so nobody need hash anything.
        self.prefix_block_size: int | None = None if cache is None else self.block_size
        #: The model's context in tokens, when the registry says it (the scheduler rejects
        #: longer requests); blocks themselves set no limit.
        self.max_model_len: int | None = None

    # ---------------------------- admission: a new request's blocks, its cached prefix first
    def lookup_prefix(self, block_hashes: object, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence ``seq_id``, named by
        ``block_hashes``, that the cache holds now (whole blocks, at most ``num_tokens - 1``:
        the last token is always computed). ``block_hashes``: the request's
        :class:`BlockHashes` (a request itself is hashed now). Changes nothing; 0 without a
        prefix cache."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if self.cache is None or block_hashes is None:
            return 0
        block_hashes = hashes_for(block_hashes, self.block_size)  # the scheduler's: as given
        return self.cache.lookup(self, block_hashes, num_tokens, seq_id)

    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, block_hashes: object = None) -> bool:
        """Blocks for each of ``seq_ids`` (``num_tokens`` tokens each), keeping
        ``watermark`` of the blocks free (cached ones count as free); with a prefix cache
        and ``block_hashes`` (the request's :class:`BlockHashes`; a request itself is hashed
        now), each sequence's cached prefix comes from the cache. False, and nothing
        changed, when they do not fit."""
        num_tokens, block_hashes = checked_admission(
            seq_ids, fork_ids, num_tokens, final_len, block_hashes, self.__contains__,
            self._swapped_ids.__contains__, self.prefix_block_size)
        bs, cache = self.block_size, self.cache
        n = -(-num_tokens // bs)
        if cache is not None and block_hashes is not None:  # the policy plans: nothing changes
            plans, need = cache.plan(self, seq_ids, num_tokens, block_hashes)
        else:
            plans, need = None, n * len(seq_ids)
        if self.pool.get_num_free_blocks() - need < self.watermark_blocks(watermark):
            return False
        if plans is not None:
            cache.admit(self, seq_ids, num_tokens, final_len, block_hashes, plans)
            return True
        for seq_id in seq_ids:
            self.add_seq(seq_id, Seq(self.refs.take(n), num_tokens, final_len))
        return True

    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None,
                 block_hashes: object = None) -> None:
        """Blocks for one new sequence (``allocate_group`` checks it); ``OutOfMemoryError``
        saying why, and nothing changed, when they do not fit."""
        if not self.allocate_group([seq_id], num_tokens, final_len, block_hashes=block_hashes):
            raise OutOfMemoryError(f"sequence {seq_id!r} needs "
                                   f"{self.blocks_needed(num_tokens)} blocks for "
                                   f"{num_tokens} tokens, {self.pool.describe_free()}")

    # ----------------------------------------------- growing: one token, a prefill chunk
    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one new token: ``(slot, copy)``; ``copy`` is the copy-on-write copy
        of the shared last block to carry out before writing, or None. In a caching pool
        a block that becomes full is named by its hash, and so becomes reusable."""
        try:
            seq = self.seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None
        slot = seq.next_slot
        if slot < seq.end_slot:  # the common case: a free slot in its private last block
            seq.next_slot = slot + 1
            seq.num_tokens += 1
            return slot, None
        n, bs = seq.num_tokens, self.block_size
        offset = n % bs
        copy = None
        if offset == 0:  # last block full (or no block yet): take a fresh one
            block = self.refs.take_one(seq_id)
            seq.table.append(block)
            self.num_logical_blocks += 1
            slot = block * bs
            if bs > 1:  # _set_room of a fresh private block
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
        if offset == bs - 1 and seq.block_hashes is not None:
            # dedup only without a copy: a copied-into block must not go back this step
            kept = self.cache.filled(self, seq, n // bs, dedup=self.dedup and copy is None)
            if kept != slot // bs:  # deduplicated: the same token's K/V goes to the copy
                slot = kept * bs + offset
        self._set_room(seq)
        return slot, copy

    def extend(self, seq_id: SeqId, num_tokens: int) -> list[KVCopy]:
        """Room for ``num_tokens`` more tokens of one sequence (a prefill chunk); the
        copies to carry out first. ``OutOfMemoryError`` and nothing changed when it does
        not fit."""
        if not self.can_extend(seq_id, num_tokens):
            raise OutOfMemoryError(f"no room for {num_tokens} more tokens of sequence "
                                   f"{seq_id!r} ({self.pool.get_num_free_blocks()} free "
                                   "blocks)")
        return [c for _ in range(num_tokens) if (c := self.append_slot(seq_id)[1])]

    # --------------------------------------------------- sharing: parallel samples and beams
    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` shares every block of ``parent_id``; nothing is copied now."""
        parent = self._get(parent_id)
        self._check_new_ids([child_id])
        self.refs.hold(parent.table)
        parent.end_slot = 0  # its last block is shared now: the next append may copy it
        child = self.add_seq(child_id, Seq(list(parent.table), parent.num_tokens,
                                            parent.final_len, parent.block_hashes,
                                            branch_of(child_id), list(parent.hashes)))
        if self.cache is not None:
            self.cache.forked(self, parent, child)
        return []

    # ------------------------------------------------------------------------------- release
    def free(self, seq_id: SeqId) -> None:
        """Drop the sequence, tail first: blocks nobody else holds go back to the pool (a
        caching pool keeps the full ones' content), so a chain's tail is evicted before
        its head and a prompt freed and allocated again gets its blocks back."""
        try:
            seq = self.seqs.pop(seq_id)
        except (KeyError, TypeError):
            seq = self._pop_seq(seq_id)  # raises, saying why
        cache = self._at_free  # the policy, when it acts at free (radix), else None
        if cache is not None:
            cache.freeing(self, seq)  # radix: its full pages join the tree first
        self.num_logical_blocks -= len(seq.table)
        self.refs.release(seq.table)
        if cache is not None:
            cache.freed(self, seq)

    # ------------------ swapping to a CPU buffer and back (vLLM v0's preemption by swapping)
    def swap_out_slots(self, seq_ids: Iterable[SeqId]) -> int:
        """CPU slots a swap-out would take: every distinct block once."""
        blocks = {b for s in seq_ids for b in self._get(s).table}
        return len(blocks) * self.block_size

    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """Move ``seq_ids`` to a CPU buffer, keeping their sharing; their GPU blocks are
        released (a caching pool keeps the full ones cached)."""
        seq_ids = distinct_ids(seq_ids)
        seqs = [self._get(s) for s in seq_ids]
        bs = self.block_size
        local: dict[int, int] = {}  # GPU block -> index in the CPU buffer (in blocks)
        tables = [[local.setdefault(b, len(local)) for b in seq.table] for seq in seqs]
        out = [KVCopy(b * bs, i * bs, bs) for b, i in local.items()]
        meta = [(seq.num_tokens, seq.final_len) for seq in seqs]
        named = ({s: (q.block_hashes, q.hashes) for s, q in zip(seq_ids, seqs, strict=True)
                  if q.block_hashes is not None} if self.pool.caches else {})
        for s in seq_ids:
            self.free(s)
        self._swapped_ids.update(seq_ids)
        state = {"tables": tables, "meta": meta, "num_blocks": len(local)}
        if self.pool.caches:
            state["content"] = named
        return SwappedGroup(seq_ids=seq_ids, cpu_slots=len(local) * bs, out_copies=out,
                            state=state, owner=self._swap_token)

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        """Whether the group's blocks fit and leave ``watermark`` of the blocks free."""
        group.check_can_return_to(self._swap_token)
        need = group.state["num_blocks"]
        return self.pool.get_num_free_blocks() - need >= self.watermark_blocks(watermark)

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Bring a swapped group back into fresh blocks (all or nothing); the copies
        CPU -> GPU."""
        n = self._check_swap_in(group)
        free = self.pool.get_num_free_blocks()
        if n > free:
            raise OutOfMemoryError(f"swap-in needs {n} blocks, {free} free")
        new_blocks, tables = self.refs.take_for(n, group.state["tables"])
        named = group.state.get("content", {})
        for seq_id, phys, (num_tokens, final_len) in zip(
            group.seq_ids, tables, group.state["meta"], strict=True
        ):
            block_hashes, hashes = named.get(seq_id, (None, []))
            # Every count is final (take_for), so each one's room is right at once.
            seq = self.add_seq(seq_id, Seq(phys, num_tokens, final_len, block_hashes,
                                            branch_of(seq_id)))
            if block_hashes is not None:
                self.cache.swapped_in(self, seq, hashes)
        group.swapped_in = True
        self._swapped_ids.difference_update(group.seq_ids)
        bs = self.block_size
        return [KVCopy(i * bs, b * bs, bs) for i, b in enumerate(new_blocks)]

    def _check_swap_in(self, group: SwappedGroup) -> int:
        """Blocks ``group`` needs back, after checking it may return here and that none
        of its ids is live."""
        group.check_can_return_to(self._swap_token)
        clash = [s for s in group.seq_ids if s in self]  # cannot happen: ids are reserved
        if clash:
            raise ValueError(f"sequence ids {clash!r} already exist")
        return group.state["num_blocks"]

    # ------------- room: what an operation would take, and whether it fits (nothing changes)
    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks a ``num_tokens``-token prompt occupies."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        return -(-num_tokens // self.block_size)

    def slots_needed(self, num_tokens: int, final_len: int | None = None) -> int:
        return self.blocks_needed(num_tokens) * self.block_size

    def can_allocate(self, num_tokens: int, final_len: int | None = None) -> bool:
        return self.blocks_needed(num_tokens) <= self.pool.get_num_free_blocks()

    def can_append(self, seq_id: SeqId) -> bool:
        seq = self._get(seq_id)
        if seq.num_tokens % self.block_size and self._ref[seq.table[-1]] == 1:
            return True  # room in a private last block
        return self.pool.get_num_free_blocks() > 0

    def append_blocks_needed(self, seq_ids: Iterable[SeqId]) -> int:
        """New blocks that one append to each of ``seq_ids`` (in order) would take.

        Exact for sharers: when all k sharers of a last block append, the first k-1
        copy it and the last one finds it private again and writes in place.
        """
        bs, ref, seqs = self.block_size, self._ref, self.seqs
        needed = 0
        shared_last: Counter[int] | None = None  # made when a shared last block shows up
        for seq_id in seq_ids:
            seq = seqs.get(seq_id) if type(seq_id) is int else None
            if seq is None:
                seq = self._get(seq_id)  # says which id is unknown
            if seq.next_slot < seq.end_slot:
                continue  # room in its private last block (append_slot's fast path)
            if seq.num_tokens % bs == 0:
                needed += 1
            elif ref[seq.table[-1]] > 1:
                if shared_last is None:
                    shared_last = Counter()
                shared_last[seq.table[-1]] += 1
        if shared_last is None:
            return needed
        for block, k in shared_last.items():
            needed += k - 1 if k == ref[block] else k
        return needed

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        """Whether one ``append_slot`` for each of ``seq_ids`` (in order) would all succeed;
        a lone sequence (every decode without samples or beams) is answered directly."""
        if type(seq_ids) is list and len(seq_ids) == 1:
            seq = self._get(seq_ids[0])
            if seq.num_tokens % self.block_size and self._ref[seq.table[-1]] == 1:
                return True  # room in its private last block
            return self.pool.get_num_free_blocks() > 0
        if type(seq_ids) is not list:
            seq_ids = list(seq_ids)
        distinct_ids(seq_ids)  # refused: a repeat (a second append is another count)
        if self.append_blocks_needed(seq_ids) <= self.pool.get_num_free_blocks():
            return True
        # With dedup, an append that fills a block may give it back (its content is cached
        # already), making room for a later append of the group: the count cannot see
        # that (nor which cached block a take evicts first), so its "no" is checked by
        # doing the appends on a copy. Rare: memory short and a block filled this step.
        return self.dedup and self._fills_a_block(seq_ids) and self._appends_fit(seq_ids)

    def _fills_a_block(self, seq_ids: list[SeqId]) -> bool:
        """Does the append of one of ``seq_ids`` fill its (hashed) last block?"""
        bs = self.block_size
        return any(seq.block_hashes is not None and seq.num_tokens % bs == bs - 1
                   for seq in map(self._get, seq_ids))

    def _appends_fit(self, seq_ids: list[SeqId]) -> bool:
        """Do one append for each of ``seq_ids``, in order, all succeed (tried on a deep
        copy of this manager and its pool; this one is left as it is)?"""
        trial = copy.deepcopy(self)
        try:
            for seq_id in seq_ids:
                trial.append_slot(seq_id)
        except OutOfMemoryError:
            return False
        return True

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        """Whether ``num_tokens`` more tokens fit (a shared partial last block is copied)."""
        seq = self._get(seq_id)
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        n, bs = seq.num_tokens, self.block_size
        need = -(-(n + num_tokens) // bs) - len(seq.table)
        if num_tokens and n % bs and self._ref[seq.table[-1]] > 1:
            need += 1  # copy-on-write of the shared last block
        return need <= self.pool.get_num_free_blocks()

    def watermark_blocks(self, watermark: float) -> int:
        """Blocks kept free at admission for a ``watermark`` fraction (as vLLM v0)."""
        return int(check_fraction("watermark", watermark) * self.num_blocks)

    def external_frag_slots(self, need_slots: int | None) -> int:
        """Always 0: any free block serves any sequence (of any KV-cache group)."""
        return 0

    # ----------------------------------------------------------------- lookups: one sequence
    def __contains__(self, seq_id: object) -> bool:
        try:
            return seq_id in self.seqs
        except TypeError:  # unhashable: no sequence has it
            return False

    def seq_ids(self) -> Iterator[SeqId]:
        return iter(self.seqs)

    def is_swapped_out(self, seq_id: SeqId) -> bool:
        """Whether ``seq_id`` belongs to a group this manager swapped out (not yet back)."""
        return seq_id in self._swapped_ids

    def seq_len(self, seq_id: SeqId) -> int:
        return self._get(seq_id).num_tokens

    def final_len(self, seq_id: SeqId) -> int | None:
        return self._get(seq_id).final_len

    def block_table(self, seq_id: SeqId) -> list[int]:
        """A copy of the sequence's block table (physical block ids, in token order)."""
        return list(self._get(seq_id).table)

    def slot_of(self, seq_id: SeqId, index: int) -> int:
        seq = self._get(seq_id)
        if not 0 <= index < seq.num_tokens:
            raise ValueError(f"token index {index!r} out of range for sequence {seq_id!r} "
                             f"of {seq.num_tokens} tokens")
        bs = self.block_size
        return seq.table[index // bs] * bs + index % bs

    def slot_mapping(self, seq_id: SeqId, start: int = 0, end: int | None = None) -> list[int]:
        """Physical slots of tokens ``start .. end-1`` (default: all of them)."""
        seq = self._get(seq_id)
        end = seq.num_tokens if end is None else end
        if not 0 <= start <= end <= seq.num_tokens:
            raise ValueError(f"token range [{start}, {end}) out of range for sequence "
                             f"{seq_id!r} of {seq.num_tokens} tokens")
        bs, table = self.block_size, seq.table
        return [table[i // bs] * bs + i % bs for i in range(start, end)]

    def prefix_hit_tokens(self, seq_id: SeqId) -> int:
        """Tokens of ``seq_id`` served from the prefix cache at its admission."""
        return self._get(seq_id).hit_tokens

    def host_hit_tokens(self, seq_id: SeqId) -> int:
        """Of :meth:`prefix_hit_tokens`, the tokens loaded from the host tier."""
        return self._get(seq_id).host_hit_tokens

    # --------------------------------------------------------------------- lookups: the pool
    @property
    def num_seqs(self) -> int:
        """Sequences that own memory now."""
        return len(self.seqs)

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the pool's free structure (vLLM v1's free queue holds its cached
        blocks too; SGLang's free list does not hold the tree's)."""
        return self.pool.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.pool.get_num_free_blocks()

    @property
    def num_shared_blocks(self) -> int:
        return self.refs.num_shared

    @property
    def num_cached_blocks(self) -> int:
        """Blocks nobody holds that keep reusable K/V (0 without a prefix cache)."""
        return self.pool.num_cached_blocks

    @property
    def num_free_slots(self) -> int:
        """Slots of never-used or released blocks (cached blocks are not counted)."""
        pool = self.pool
        return (pool.get_num_free_blocks() - pool.num_cached_blocks) * self.block_size

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    def block_hash(self, block: int) -> int | None:
        """The hash naming a block's content, or None (not full, content unknown, or no
        prefix cache)."""
        hashes = self.pool.hashes  # (only vLLM v1's pool names blocks)
        return None if hashes is None else hashes[block]

    evicted_blocks = FromPool("Cached blocks evicted so far (handed out for other content).")
    on_release = FromPool("``on_release(start_slot, num_slots)`` for memory that goes back to "
                          "the pool (a cached block: when it is evicted), so a real cache can "
                          "scrub it.")

    @property
    def host(self):
        """The pool's host tier (:class:`~.host_tier.HostTier`), or None."""
        return self.pool.host

    def host_transfers(self):
        """The host tier's copies since the last call (:class:`~.host_tier.HostTransfers`:
        before the model, then after it; write-throughs get their host blocks now), or
        None without a host tier. The scheduler calls it once a step."""
        host = self.pool.host
        return None if host is None else host.flush()

    # ------------------------ the accounting's view, pictures and the property tests' checks
    def usage(self, final_lens: Mapping[SeqId, int] | None = None,
              outside_tables: Collection[int] = ()) -> SlotUsage:
        """Allocated slots split into token / reserved / internal fragmentation, plus the
        cached ones (:mod:`pagedsim.memory.accounting` has the rules; one visit per
        sequence). ``outside_tables``: blocks a composing class holds in no block table
        (vAttention's pages mapped for samples to be forked), left out here."""
        pool = self.pool
        return usage_by_last_blocks(self.seqs, self._ref, self.block_size,
                                    self.num_blocks - pool.get_num_free_blocks()
                                    - len(outside_tables),
                                    self.num_logical_blocks, final_lens,
                                    cached_slots=pool.num_cached_blocks * self.block_size,
                                    shared=self.refs.num_shared > 0)

    def snapshot(self) -> dict:
        """The whole state as plain data: block tables, reference counts, the pool's free
        structure (and, in a caching pool, its cached blocks and every block's hash)."""
        snap = {
            "kind": self.kind,
            "view": "blocks",
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "free_blocks": [],
            "ref_counts": list(self._ref),
            "seqs": {
                sid: {"block_table": list(s.table), "num_tokens": s.num_tokens,
                      "final_len": s.final_len}
                for sid, s in self.seqs.items()
            },
        }
        self.pool.snapshot(snap)
        if self.cache is not None:
            self.cache.snapshot(snap)
        return snap

    def _referenced_blocks(self, outside_tables: Collection[int] = ()) -> Counter[int]:
        """How many references each used block has (block tables, and ``outside_tables``)."""
        counts = Counter(b for seq in self.seqs.values() for b in seq.table)
        counts.update(outside_tables)
        return counts

    def check_invariants(self, outside_tables: Collection[int] = ()) -> None:
        """Assert that tables, reference counts, counters, the pool and the accounting
        agree (``AssertionError`` naming the first disagreement). ``outside_tables``: as
        for :meth:`usage`, blocks held (one reference each) in no block table."""
        counts = self._referenced_blocks(outside_tables)
        for b in range(self.num_blocks):
            assert self._ref[b] == counts[b], (
                f"block {b}: ref count {self._ref[b]} != {counts[b]} table entries")
        self.pool.check(set(counts))
        assert self.refs.num_shared == sum(1 for c in counts.values() if c > 1)
        assert self.num_logical_blocks == sum(len(s.table) for s in self.seqs.values())
        bs = self.block_size
        for seq_id, seq in self.seqs.items():
            assert len(seq.table) == -(-seq.num_tokens // bs), (
                f"sequence {seq_id!r}: {len(seq.table)} blocks for {seq.num_tokens} tokens")
            room = seq.end_slot - seq.next_slot
            if room > 0:  # the fast path of append_slot writes to a private last block
                n = seq.num_tokens
                last = bs - (self.cache is not None)  # a cache names the block's last slot
                assert self._ref[seq.table[-1]] == 1 and n % bs + room <= last, (
                    f"sequence {seq_id!r}: room {room} past its private last block")
                assert seq.next_slot == seq.table[-1] * bs + n % bs, (
                    f"sequence {seq_id!r}: next slot {seq.next_slot} is not its next token's")
            if seq.block_hashes is not None:
                full = seq.num_tokens // bs
                assert len(seq.hashes) == full, (
                    f"sequence {seq_id!r}: {len(seq.hashes)} names for {full} full blocks")
        # The fast accounting (one visit per sequence) against the walk over every block.
        walked = replace(usage_by_block_walk(self.seqs, self._ref, bs,
                                             self.num_blocks - self.pool.get_num_free_blocks()
                                             - len(outside_tables), self.num_logical_blocks),
                         cached_slots=self.pool.num_cached_blocks * bs)
        fast = self.usage(outside_tables=outside_tables)
        assert fast == walked, f"fast usage {fast} != {walked}"
        if self.cache is not None:
            self.cache.check(self)

    # ------------------------------------------------------------------------------- helpers
    def add_seq(self, seq_id: SeqId, seq: Seq) -> Seq:
        """Record a new sequence whose blocks it holds already (an admission's, a fork's,
        a swap-in's): the one way a policy adds one, so that the logical-block count and
        the fast path's room stay the manager's to keep."""
        self.seqs[seq_id] = seq
        self.num_logical_blocks += len(seq.table)
        if seq.num_tokens % self.block_size:
            self._set_room(seq)
        return seq

    def append_in_place(self, seq: Seq, num_tokens: int) -> None:
        """``num_tokens`` appends to ``seq`` that all write into the room of its private
        last block (``append_slot``'s first lines, ``num_tokens`` times: nothing else
        changes). For :mod:`.decode_runs`, which counts that room first."""
        if num_tokens < 0 or num_tokens > max(0, seq.end_slot - seq.next_slot):
            raise ValueError(f"{num_tokens} appends in place, but room for "
                             f"{max(0, seq.end_slot - seq.next_slot)}")
        seq.next_slot += num_tokens
        seq.num_tokens += num_tokens

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
        seq.next_slot = seq.table[-1] * bs + offset
        seq.end_slot = seq.next_slot + room

    def _get(self, seq_id: SeqId):
        try:
            return self.seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None

    def _pop_seq(self, seq_id: SeqId):
        """Remove and return a sequence's record (the first step of ``free``)."""
        try:
            return self.seqs.pop(seq_id)
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown sequence id {seq_id!r} (never allocated, or already freed)"
            ) from None

    def _check_new_ids(self, seq_ids: Sequence[SeqId]) -> None:
        """Refuse ids given twice, ids in use, and ids of a swapped-out group (it must be
        able to come back)."""
        check_new_ids(seq_ids, self.__contains__, self._swapped_ids.__contains__)

