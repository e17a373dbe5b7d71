"""The only coupling between lab 5's graders and your code.

The graders call what is below, never ``prefix_lab`` directly.
The grader grades your file alone, with its own copy of this file (changing yours
changes nothing): keep the names used below; do not change what it returns.

Token ids are plain ints and prompts plain lists of them; sequence ids are any hashable.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import prefix_lab as lab

from pagedsim.errors import OutOfMemoryError

__all__ = ["LabCache", "LabFreeQueue", "OutOfMemoryError", "block_hashes", "hash_block"]


def block_hashes(tokens: Sequence[int], block_size: int) -> list[int]:
    """Your chained hashes of the full blocks of ``tokens`` (task 5.1)."""
    return list(lab.block_hashes(list(tokens), block_size))


def hash_block(parent: int, block_tokens: Sequence[int]) -> int:
    """The given hash of one block (its parent's hash and its tokens)."""
    return lab.hash_block(parent, list(block_tokens))


class LabFreeQueue:
    """Your :class:`prefix_lab.FreeQueue` (task 5.2)."""

    def __init__(self, blocks: Iterable[int]) -> None:
        self.queue = lab.FreeQueue(blocks)

    def popleft(self) -> int:
        return self.queue.popleft()

    def append(self, block: int) -> None:
        self.queue.append(block)

    def remove(self, block: int) -> None:
        self.queue.remove(block)

    def __len__(self) -> int:
        return len(self.queue)

    def __contains__(self, block: int) -> bool:
        return block in self.queue

    def order(self) -> list[int]:
        """The blocks, head (next taken) first."""
        return list(self.queue)


class LabCache:
    """Your :class:`prefix_lab.PrefixCacheLab`: its calls, and its state as plain lists."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.lab = lab.PrefixCacheLab(num_blocks, block_size)
        self.num_blocks = num_blocks
        self.block_size = block_size

    # Your cache's calls.
    def allocate(self, seq_id: Hashable, tokens: Sequence[int]) -> int:
        """Admit a prompt; the tokens served from the cache."""
        return self.lab.allocate(seq_id, list(tokens))

    def lookup_blocks(self, tokens: Sequence[int]) -> list[int]:
        return list(self.lab.lookup(list(tokens)))

    def lookup(self, tokens: Sequence[int]) -> int:
        """Tokens a new prompt ``tokens`` would find cached now."""
        return len(self.lookup_blocks(tokens)) * self.block_size

    def append_token(self, seq_id: Hashable, token: int) -> int:
        return self.lab.append_token(seq_id, token)

    def free(self, seq_id: Hashable) -> None:
        self.lab.free(seq_id)

    def take_block(self) -> int:
        return self.lab.take_block()

    def reuse_block(self, block: int) -> None:
        self.lab.reuse_block(block)

    # Your cache's state.
    def free_queue(self) -> list[int]:
        """The free queue, head (next taken) first."""
        return list(self.lab.free_queue)

    def ref_count(self, block: int) -> int:
        return self.lab.ref_counts[block]

    def ref_counts(self) -> list[int]:
        return list(self.lab.ref_counts)

    def block_hash(self, block: int) -> int | None:
        return self.lab.block_hash[block]

    def hash_map(self) -> dict[int, list[int]]:
        """``{hash: [block, ...]}``, oldest first."""
        return {h: list(blocks) for h, blocks in self.lab.cached.items()}

    def cached_blocks(self) -> list[int]:
        """Blocks in the free queue that hold a hash, in queue order."""
        return [b for b in self.free_queue() if self.block_hash(b) is not None]

    @property
    def evictions(self) -> int:
        return self.lab.evictions

    def seq_ids(self) -> list[Hashable]:
        return list(self.lab.block_tables)

    def block_table(self, seq_id: Hashable) -> list[int]:
        return list(self.lab.block_tables[seq_id])

    def seq_tokens(self, seq_id: Hashable) -> list[int]:
        return list(self.lab.seq_tokens[seq_id])

    def seq_hashes(self, seq_id: Hashable) -> list[int]:
        return list(self.lab.seq_hashes[seq_id])

    def snapshot(self) -> dict:
        """Everything the graders compare, as plain values (a failed call must leave it)."""
        seqs = self.seq_ids()
        return {"free_queue": self.free_queue(), "ref_counts": self.ref_counts(),
                "block_hash": [self.block_hash(b) for b in range(self.num_blocks)],
                "hash_map": self.hash_map(), "evictions": self.evictions,
                "tables": {s: self.block_table(s) for s in seqs},
                "tokens": {s: self.seq_tokens(s) for s in seqs},
                "hashes": {s: self.seq_hashes(s) for s in seqs}}
