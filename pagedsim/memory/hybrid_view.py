"""What a hybrid allocator answers without changing anything: lookups of one sequence
(group 0's slots for the protocol, any group's for the kernels), the room an operation
would take and whether it fits, exactly, counting the blocks sliding groups give back
first; and the checks of new ids and lengths. The accounting, snapshot and consistency
checks are :mod:`.hybrid_account`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ..validate import check_int
from ..workloads.block_hashes import hashes_for
from .base import SeqId, distinct_ids
from .hybrid_account import HybridAccount
from .hybrid_groups import NULL_BLOCK, HybridSeq
from .pool_lookups import PoolLookups


class HybridView(PoolLookups, HybridAccount):
    """Read-only questions about a :class:`~.hybrid.HybridAllocator`'s state (those every
    pool manager answers alike are :class:`~.pool_lookups.PoolLookups`')."""

    # ------------------------------------------------------------ sequences
    @property
    def num_seqs(self) -> int:
        return len(self._seqs)

    def __contains__(self, seq_id: object) -> bool:
        try:
            return seq_id in self._seqs
        except TypeError:
            return False

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

    def _check_group(self, group: int) -> int:
        if type(group) is not int or not 0 <= group < len(self.groups):
            raise ValueError(f"group must be 0 to {len(self.groups) - 1}, got {group!r}")
        return group

    # ----------------------------------------------------------- the cache
    def lookup_prefix(self, content: object, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence the cache holds now in every
        group (:meth:`~.hybrid_cache.HybridCache.hit_blocks`); 0 without a cache."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if self.cache is None or content is None:
            return 0
        content = hashes_for(content, self.block_size)
        return self.cache.lookup(content, num_tokens, seq_id)

    # ---------------------------------------------------------------- room
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
