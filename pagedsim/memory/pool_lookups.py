"""What every block-pool memory manager answers from its pool, its reference counts and
its table of sequences alike: the paged block manager (:mod:`.block_queries`) and the
hybrid allocator (:mod:`.hybrid_view`) both read these, over ``pool``, ``_ref``,
``_seqs`` and ``block_size``."""

from __future__ import annotations

from collections.abc import Iterator

from .base import SeqId


class PoolLookups:
    """The pool's hook and counters, and lookups of one sequence."""

    # ------------------------------------------------------------- the pool
    @property
    def on_release(self):
        """``on_release(start_slot, num_slots)`` for memory that goes back to the pool
        (a cached block: when it is evicted), so a real cache can scrub it."""
        return self.pool.on_release

    @on_release.setter
    def on_release(self, hook) -> None:
        self.pool.on_release = hook

    @property
    def evicted_blocks(self) -> int:
        """Cached blocks evicted so far (handed out for other content)."""
        return self.pool.evicted_blocks

    @evicted_blocks.setter
    def evicted_blocks(self, n: int) -> None:
        self.pool.evicted_blocks = n

    @property
    def num_free_slots(self) -> int:
        """Slots of never-used or released blocks (cached blocks are not counted)."""
        pool = self.pool
        return (pool.get_num_free_blocks() - pool.num_cached_blocks) * self.block_size

    def external_frag_slots(self, need_slots: int | None) -> int:
        """Always 0: any free block serves any sequence (of any KV-cache group)."""
        return 0

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    # ------------------------------------------------------------ sequences
    def seq_ids(self) -> Iterator[SeqId]:
        return iter(self._seqs)

    def _get(self, seq_id: SeqId):
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None

    def seq_len(self, seq_id: SeqId) -> int:
        return self._get(seq_id).num_tokens

    def final_len(self, seq_id: SeqId) -> int | None:
        return self._get(seq_id).final_len

    def prefix_hit_tokens(self, seq_id: SeqId) -> int:
        """Tokens of ``seq_id`` served from the prefix cache at its admission."""
        return self._get(seq_id).hit_tokens
