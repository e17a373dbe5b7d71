"""Lab 3: the paged allocator of PagedAttention (vLLM): blocks, block tables, ref counts.

The KV pool is ``num_blocks`` physical blocks of ``block_size`` token slots each. A
sequence owns a *block table*, the list of its physical blocks in token order: its token
``i`` lives in slot ``block_table[i // block_size] * block_size + i % block_size``. Blocks
need not be neighbours, so any free block serves any sequence: no reservation, no
external fragmentation. A sequence takes a new block only when its last one is full.

Every block has a *reference count*: how many block tables point at it. Here each block
has one owner; lab 4 lets sequences share blocks (``fork``), and then a block goes back to
the free list only when its last user lets go of it.

Units: lengths in tokens, sizes in slots; blocks are numbered ``0 .. num_blocks - 1`` and
slot ``s`` is offset ``s % block_size`` of block ``s // block_size``. Errors, as pagedsim's
allocators raise them: ``OutOfMemoryError`` when there is no free block, ``ValueError``
for bad input (an unknown or duplicate sequence id, a negative length); a failed call
changes nothing. Do not import ``pagedsim.memory`` (the grader refuses a file that does).
"""

from __future__ import annotations

from collections.abc import Hashable

from pagedsim.errors import OutOfMemoryError


class PagedLab:
    """A pool of ``num_blocks`` blocks of ``block_size`` token slots.

    State (keep these attributes: the grader reads them):

    - ``free_blocks``: the free list, used as a stack (``pop()`` takes the block at its end);
    - ``ref_counts``: ``ref_counts[b]`` = number of block tables that hold block ``b``;
    - ``block_tables``: ``{seq_id: [physical block, ...]}`` in token order;
    - ``seq_lens``: ``{seq_id: tokens the sequence holds}``.
    """

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.block_tables: dict[Hashable, list[int]] = {}
        self.seq_lens: dict[Hashable, int] = {}
        # BEGIN SOLUTION lab 3.1: a stack that hands out block 0 first
        self.free_blocks: list[int] = list(range(num_blocks - 1, -1, -1))
        self.ref_counts: list[int] = [0] * num_blocks
        # END SOLUTION

    # ------------------------------------------------------------- 3.1 the free list
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def take_block(self) -> int:
        """Take a block off the free list for one owner (its ref count becomes 1).
        ``OutOfMemoryError`` when the free list is empty."""
        # BEGIN SOLUTION lab 3.1: pop the free list; its ref count becomes 1
        if not self.free_blocks:
            raise OutOfMemoryError("no free block")
        block = self.free_blocks.pop()
        self.ref_counts[block] = 1
        return block
        # END SOLUTION

    # ---------------------------------------------------------------- 3.2 allocate
    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks a ``num_tokens``-token prompt occupies (a partly filled last block counts)."""
        # BEGIN SOLUTION lab 3.2: ceil(num_tokens / block_size), in integers
        return -(-num_tokens // self.block_size)
        # END SOLUTION

    def allocate(self, seq_id: Hashable, num_tokens: int) -> None:
        """Blocks for a new sequence whose prompt has ``num_tokens`` (>= 0) tokens, taken
        with :meth:`take_block` in order, so that its block table lists them as taken.
        All or nothing: check that they fit before taking any."""
        # BEGIN SOLUTION lab 3.2: check id, length and room, then take the blocks
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
        # END SOLUTION

    # ------------------------------------------------------------ 3.3 slot mapping
    def slot_mapping(self, seq_id: Hashable) -> list[int]:
        """The physical slot of each of the sequence's tokens, in token order (what the
        cache-write kernel and the attention kernel are given)."""
        # BEGIN SOLUTION lab 3.3: table[i // bs] * bs + i % bs for each token i
        table, bs = self._table(seq_id), self.block_size
        return [table[i // bs] * bs + i % bs for i in range(self.seq_lens[seq_id])]
        # END SOLUTION

    # ------------------------------------------------------------- 3.4 append_slot
    def append_slot(self, seq_id: Hashable) -> int:
        """Room for the sequence's next token: the slot to write its K/V into. A new block
        only when the last block is full (or the sequence has none)."""
        # BEGIN SOLUTION lab 3.4: a new block when seq_len % block_size == 0
        table, bs = self._table(seq_id), self.block_size
        n = self.seq_lens[seq_id]
        if n % bs == 0:  # the last block is full, or there is none: take a new one
            table.append(self.take_block())
        self.seq_lens[seq_id] = n + 1
        return table[n // bs] * bs + n % bs
        # END SOLUTION

    # -------------------------------------------------------------------- 3.5 free
    def free(self, seq_id: Hashable) -> None:
        """Drop the sequence. Each of its blocks loses one reference; a block left with
        none goes back on the free list. Walk the block table from its **last** block to
        its first, so that the free list (a stack) hands the same blocks out again in the
        same order."""
        # BEGIN SOLUTION lab 3.5: one reference less per block; free at 0; last first
        table = self._table(seq_id)
        del self.block_tables[seq_id], self.seq_lens[seq_id]
        for block in reversed(table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)
        # END SOLUTION

    # ------------------------------------------------ 3.6 what the scheduler asks first
    def can_allocate(self, num_tokens: int, watermark: float = 0.0, num_seqs: int = 1) -> bool:
        """Whether ``num_seqs`` new sequences of ``num_tokens`` tokens each fit and leave
        at least ``int(watermark * num_blocks)`` blocks free. (vLLM keeps such a watermark
        at admission, so that running sequences can still grow without preempting.)"""
        # BEGIN SOLUTION lab 3.6: free blocks - blocks needed >= the watermark's blocks
        need = self.blocks_needed(num_tokens) * num_seqs
        return len(self.free_blocks) - need >= int(watermark * self.num_blocks)
        # END SOLUTION

    def can_append_all(self, seq_ids: list[Hashable]) -> bool:
        """Whether one :meth:`append_slot` for each of ``seq_ids`` would all succeed (the
        scheduler asks before a decode step, and preempts someone when the answer is no)."""
        # BEGIN SOLUTION lab 3.6: a new block for each sequence with a full last block
        need = sum(1 for s in seq_ids if self.seq_lens[s] % self.block_size == 0)
        return need <= len(self.free_blocks)
        # END SOLUTION

    def _table(self, seq_id: Hashable) -> list[int]:
        try:
            return self.block_tables[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None
