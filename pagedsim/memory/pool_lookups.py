"""What every block-pool memory manager answers from its pool, its reference counts and
its table of sequences alike: the paged block manager (:mod:`.block_queries`) and the
hybrid allocator (:mod:`.hybrid_view`) both read these, over ``pool``, ``_ref``,
``_seqs`` and ``block_size``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..validate import check_fraction, check_int
from ..workloads.block_hashes import BlockHashes, hashes_for
from .base import SeqId, distinct_ids


class PoolLookups:
    """The pool's hook and counters, lookups of one sequence, checks of new ones."""

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

    def watermark_blocks(self, watermark: float) -> int:
        """Blocks kept free at admission for a ``watermark`` fraction (as vLLM v0)."""
        return int(check_fraction("watermark", watermark) * self.num_blocks)

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

    # -------------------------------------------------------------- checks
    def _check_new_ids(self, seq_ids: Sequence[SeqId], forking: bool = False) -> None:
        """Refuse ids given twice, ids in use (``forking``: by a running sequence, since
        vAttention holds a sample's pages under the id it is forked to), and ids of a
        swapped-out group (it must be able to come back)."""
        seq_ids = distinct_ids(seq_ids)
        clash = [s for s in seq_ids if (s in self._seqs if forking else s in self)]
        if clash:
            raise ValueError(f"{_ids(clash)} already exist{'s' * (len(clash) == 1)}")
        swapped = [s for s in seq_ids if s in self._swapped_ids]
        if swapped:
            raise ValueError(f"{_ids(swapped)} belong{'s' * (len(swapped) == 1)} to a "
                             "swapped-out group")

    def _checked_admission(self, seq_ids: Sequence[SeqId], fork_ids: Sequence[SeqId],
                           num_tokens: int, final_len: int | None,
                           content: object) -> tuple[int, BlockHashes | None]:
        """``allocate_group``'s arguments checked: the ids new, the lengths in order, and
        ``content`` (a request, or its hashes) as the hashes this pool's cache names
        blocks by. Returns ``num_tokens`` and ``content`` as checked."""
        self._check_new_ids([*seq_ids, *fork_ids])
        num_tokens = self._check_lengths(num_tokens, final_len)
        if content is not None:  # a request is hashed now; anything else is refused
            content = hashes_for(content, self.prefix_block_size)
        return num_tokens, content

    def _check_lengths(self, num_tokens: int, final_len: int | None) -> int:
        """``num_tokens`` checked (an int >= 0, and <= ``final_len`` when given)."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if final_len is not None:
            if type(final_len) is not int:
                final_len = check_int("final_len", final_len)
            if final_len < num_tokens:
                raise ValueError(f"final_len ({final_len}) must be >= num_tokens "
                                 f"({num_tokens})")
        return num_tokens


def _ids(seq_ids: list[SeqId]) -> str:
    """``sequence id 'a'``, or ``sequence ids ['a', 'b']``: an error message's subject."""
    return f"sequence id {seq_ids[0]!r}" if len(seq_ids) == 1 else f"sequence ids {seq_ids!r}"
