"""Lab 4: copy-on-write ``fork``, for parallel sampling and beam search.

Parallel sampling asks for several completions of one prompt; beam search keeps several
candidates alive, forking the good ones and dropping the others. Their sequences start
with the same tokens, so their K/V at those positions are the same. A paged allocator
stores them once: ``fork`` gives the child a copy of the parent's *block table* (a few
integers) and adds one reference to every block in it; nothing is copied. A sequence
that is about to write into a block that others still use first gets a private copy of
**that block only** (copy-on-write), and tells its caller to copy the K/V of the block's
filled slots before writing.

The paged allocator of lab 3 is given below, working; you write ``fork`` (4.1), the
copy-on-write branch of ``append_slot`` (4.2) and ``usage`` (4.3).

Units: lengths in tokens, sizes in slots. Token ``i`` of a sequence lives in slot
``block_table[i // block_size] * block_size + i % block_size``. Errors: ``OutOfMemoryError``
when no block is free, ``ValueError`` for bad input; a failed call changes nothing. Do not
import ``pagedsim.memory`` (the grader refuses a file that does).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from pagedsim.errors import OutOfMemoryError


class KVCopy(NamedTuple):
    """Copy the K/V of ``num_slots`` consecutive slots from ``src_slot`` to ``dst_slot``
    (the same record as pagedsim's own ``KVCopy``, which lives in ``pagedsim.memory``)."""

    src_slot: int
    dst_slot: int
    num_slots: int


@dataclass(frozen=True, slots=True)
class Usage:
    """What the pool holds: ``token_slots`` slots hold a live token's K/V (a slot shared by
    several sequences counts once); ``physical_blocks`` blocks are in use;
    ``logical_blocks`` is the sum of the block tables' lengths (what the sequences would
    use if nothing were shared)."""

    token_slots: int
    physical_blocks: int
    logical_blocks: int

    @property
    def sharing_saving(self) -> float:
        """The vLLM paper's saving (section 6.3): ``1 - physical / logical`` blocks."""
        return 1 - self.physical_blocks / self.logical_blocks if self.logical_blocks else 0.0


class CowLab:
    """A pool of ``num_blocks`` blocks of ``block_size`` token slots, with sharing.

    State (the grader reads these attributes through ``adapters.py``):
    ``free_blocks`` (a stack: ``pop()`` takes the next block), ``ref_counts[b]`` (how many
    block tables hold block ``b``), ``block_tables`` and ``seq_lens`` (by sequence id).
    """

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_blocks: list[int] = list(range(num_blocks - 1, -1, -1))  # block 0 on top
        self.ref_counts: list[int] = [0] * num_blocks
        self.block_tables: dict[Hashable, list[int]] = {}
        self.seq_lens: dict[Hashable, int] = {}

    # ------------------------------------------------------------- lab 3, given
    def take_block(self) -> int:
        """A block off the free list, with one reference; OutOfMemoryError if none."""
        if not self.free_blocks:
            raise OutOfMemoryError("no free block")
        block = self.free_blocks.pop()
        self.ref_counts[block] = 1
        return block

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def allocate(self, seq_id: Hashable, num_tokens: int) -> None:
        """Blocks for a new ``num_tokens``-token prompt (all or nothing)."""
        if seq_id in self.block_tables:
            raise ValueError(f"sequence id {seq_id!r} already exists")
        if type(num_tokens) is not int or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        n = self.blocks_needed(num_tokens)
        if n > len(self.free_blocks):
            raise OutOfMemoryError(f"sequence {seq_id!r} needs {n} blocks, "
                                   f"{len(self.free_blocks)} free")
        self.block_tables[seq_id] = [self.take_block() for _ in range(n)]
        self.seq_lens[seq_id] = num_tokens

    def slot_mapping(self, seq_id: Hashable) -> list[int]:
        table, bs = self._table(seq_id), self.block_size
        return [table[i // bs] * bs + i % bs for i in range(self.seq_lens[seq_id])]

    def free(self, seq_id: Hashable) -> None:
        """Drop the sequence; a block left with no reference goes back, last block first."""
        table = self._table(seq_id)
        del self.block_tables[seq_id], self.seq_lens[seq_id]
        for block in reversed(table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)

    def can_allocate(self, num_tokens: int, watermark: float = 0.0, num_seqs: int = 1) -> bool:
        """Whether ``num_seqs`` prompts of ``num_tokens`` fit, leaving the watermark free."""
        need = self.blocks_needed(num_tokens) * num_seqs
        return len(self.free_blocks) - need >= int(watermark * self.num_blocks)

    def can_append_all(self, seq_ids: Iterable[Hashable]) -> bool:
        """Whether one :meth:`append_slot` for each of ``seq_ids``, in order, all succeed.

        A full last block needs a new block. A shared last block needs a copy, except for
        its last sharer to write: when all k sharers of a block append, the first k - 1
        copy it and the last finds it private (ref count 1) and writes in place.
        """
        bs = self.block_size
        need, shared_last = 0, Counter()
        for seq_id in seq_ids:
            table = self._table(seq_id)
            if self.seq_lens[seq_id] % bs == 0:
                need += 1
            elif self.ref_counts[table[-1]] > 1:
                shared_last[table[-1]] += 1
        for block, k in shared_last.items():
            need += k - 1 if k == self.ref_counts[block] else k
        return need <= len(self.free_blocks)

    def _table(self, seq_id: Hashable) -> list[int]:
        try:
            return self.block_tables[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None

    # ------------------------------------------------------------------- 4.1 fork
    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """``child_id`` becomes a sequence holding the same tokens as ``parent_id``: a copy
        of the parent's block table, and one more reference on each of its blocks. No
        block is taken and no K/V moves. ``ValueError`` (nothing changed) for an unknown
        parent or a child id that exists."""
        # BEGIN SOLUTION lab 4.1: check both ids, copy table and length, add references
        table = self._table(parent_id)
        if child_id in self.block_tables:
            raise ValueError(f"sequence id {child_id!r} already exists")
        for b in table:
            self.ref_counts[b] += 1
        self.block_tables[child_id] = list(table)
        self.seq_lens[child_id] = self.seq_lens[parent_id]
        # END SOLUTION

    # ---------------------------------------------------- 4.2 copy-on-write
    def append_slot(self, seq_id: Hashable) -> tuple[int, KVCopy | None]:
        """Room for the sequence's next token: ``(slot, copy)``.

        ``slot`` is where its K/V goes. ``copy`` is None, or, when the last block was
        shared, the copy-on-write the caller must carry out *before* writing:
        ``KVCopy(src_slot, dst_slot, num_slots)`` copies the shared block's filled slots
        (from its first slot) into the first slots of the sequence's new private block.
        """
        table, bs = self._table(seq_id), self.block_size
        n = self.seq_lens[seq_id]
        offset = n % bs
        if offset == 0:  # the last block is full (or there is none): a fresh block
            table.append(self.take_block())
            self.seq_lens[seq_id] = n + 1
            return table[-1] * bs, None
        shared = table[-1]
        if self.ref_counts[shared] == 1:  # private: write in place
            self.seq_lens[seq_id] = n + 1
            return shared * bs + offset, None
        # BEGIN SOLUTION lab 4.2: a new block replaces the shared one in this table only
        new = self.take_block()  # raises (nothing changed) when no block is free
        self.ref_counts[shared] -= 1
        table[-1] = new
        self.seq_lens[seq_id] = n + 1
        return new * bs + offset, KVCopy(shared * bs, new * bs, offset)
        # END SOLUTION

    # ------------------------------------------------------------------ 4.3 usage
    def usage(self) -> Usage:
        """Token slots (a shared slot once), physical blocks in use, logical blocks."""
        # BEGIN SOLUTION lab 4.3: count each physical block once, with its filled slots
        bs = self.block_size
        filled: dict[int, int] = {}  # physical block -> its filled slots
        logical = 0
        for seq_id, table in self.block_tables.items():
            n = self.seq_lens[seq_id]
            logical += len(table)
            for j, b in enumerate(table):
                filled[b] = max(filled.get(b, 0), min(bs, n - j * bs))
        return Usage(token_slots=sum(filled.values()), physical_blocks=len(filled),
                     logical_blocks=logical)
        # END SOLUTION
