"""What a block manager answers without changing anything: lookups of one sequence, the
room an operation would take, whether it fits, and the checks of new ids and lengths.

These are the questions the scheduler and the accounting ask between mutations; the
manager (:mod:`pagedsim.memory.block_manager`) composes them with its mutations.
Everything here reads the manager's block tables, reference counts and pool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ..validate import check_int
from ..workloads.block_hashes import BlockHashes, hashes_for
from .base import SeqId, distinct_ids
from .pool_lookups import PoolLookups


class Queries(PoolLookups):
    """Read-only questions about a :class:`~.block_manager.BlockManager`'s state (those
    every pool manager answers alike are :class:`~.pool_lookups.PoolLookups`')."""

    # ------------------------------------------------------------- the pool
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

    def block_hash(self, block: int) -> int | None:
        """The hash naming a block's content, or None (not full, content unknown, or no
        prefix cache)."""
        hashes = getattr(self.pool, "hashes", None)  # only vLLM v1's pool names blocks
        return None if hashes is None else hashes[block]

    # ------------------------------------------------------------ sequences
    @property
    def num_seqs(self) -> int:
        """Sequences (and rooms held for forks) that own memory now."""
        held = self.regions.num_held if self.regions is not None else 0
        return len(self._seqs) + held

    def __contains__(self, seq_id: object) -> bool:
        try:
            if seq_id in self._seqs:
                return True
        except TypeError:  # unhashable: no sequence has it
            return False
        return self.regions is not None and self.regions.holds(seq_id)

    def _pop_seq(self, seq_id: SeqId):
        """Remove and return a sequence's record (the first step of ``free``)."""
        try:
            return self._seqs.pop(seq_id)
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown sequence id {seq_id!r} (never allocated, or already freed)"
            ) from None

    def block_table(self, seq_id: SeqId) -> list[int]:
        """A copy of the sequence's block table (physical block ids, in token order)."""
        return list(self._get(seq_id).table)

    def host_hit_tokens(self, seq_id: SeqId) -> int:
        """Of :meth:`prefix_hit_tokens`, the tokens loaded from the host tier."""
        return self._get(seq_id).host_hit_tokens

    # ------------------------------------------------------------ host tier
    @property
    def host(self):
        """The pool's host tier (:class:`~.host_tier.HostTier`), or None."""
        return getattr(self.pool, "host", None)

    def host_transfers(self):
        """The host tier's copies since the last call (:class:`~.host_tier.HostTransfers`:
        before the model, then after it; write-throughs get their host blocks now), or
        None without a host tier. The scheduler calls it once a step."""
        host = getattr(self.pool, "host", None)
        return None if host is None else host.flush()

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

    # ----------------------------------------------------------- the cache
    def lookup_prefix(self, content: object, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence ``seq_id`` of ``content`` that the
        cache holds now (whole blocks, at most ``num_tokens - 1``: the last token is always
        computed). ``content``: the request's :class:`BlockHashes` (a request itself is
        hashed now). Changes nothing; 0 without a prefix cache."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if self.cache is None or content is None:
            return 0
        if type(content) is not BlockHashes or content.block_size != self.block_size:
            content = hashes_for(content, self.block_size)  # (the scheduler's: no call)
        return self.cache.lookup(self, content, num_tokens, seq_id)

    # ---------------------------------------------------------------- room
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
        if self.regions is not None and seq.num_tokens >= self.regions.max_model_len:
            return False
        if seq.num_tokens % self.block_size and self._ref[seq.table[-1]] == 1:
            return True  # room in a private last block
        return self.pool.get_num_free_blocks() > 0

    def append_blocks_needed(self, seq_ids: Iterable[SeqId]) -> int:
        """New blocks that one append to each of ``seq_ids`` (in order) would take.

        Exact for sharers: when all k sharers of a last block append, the first k-1
        copy it and the last one finds it private again and writes in place.
        """
        bs, ref, seqs = self.block_size, self._ref, self._seqs
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
        if type(seq_ids) is list and len(seq_ids) == 1 and self.regions is None:
            seq = self._get(seq_ids[0])
            if seq.num_tokens % self.block_size and self._ref[seq.table[-1]] == 1:
                return True  # room in its private last block
            return self.pool.get_num_free_blocks() > 0
        if type(seq_ids) is not list:
            seq_ids = list(seq_ids)
        distinct_ids(seq_ids)  # refused: a repeat (a second append is another count)
        if self.regions is not None and any(
                self._get(s).num_tokens >= self.regions.max_model_len for s in seq_ids):
            return False
        return self.append_blocks_needed(seq_ids) <= self.pool.get_num_free_blocks()

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        """Whether ``num_tokens`` more tokens fit (a shared partial last block is copied,
        and a vAttention region must hold the longer sequence)."""
        seq = self._get(seq_id)
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        n, bs = seq.num_tokens, self.block_size
        if self.regions is not None and n + num_tokens > self.regions.max_model_len:
            return False
        need = -(-(n + num_tokens) // bs) - len(seq.table)
        if num_tokens and n % bs and self._ref[seq.table[-1]] > 1:
            need += 1  # copy-on-write of the shared last block
        return need <= self.pool.get_num_free_blocks()
