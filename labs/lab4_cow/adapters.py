"""The only coupling between lab 4's graders and your code.

The graders call what is below, never ``cow_lab`` directly.
The grader grades your file alone, with its own copy of this file (changing yours
changes nothing): keep the names used below; do not change what it returns.

:class:`LabCow` is the wrapper that lets pagedsim's scheduler and simulator (parallel
sampling, beam search) and pagedsim's allocator state machine drive your allocator: it
offers pagedsim's narrow allocator interface
(:class:`pagedsim.memory.base.Allocator`) through
:class:`pagedsim.testing.paged_view.PagedView`, whose accessors below read your object.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence

import cow_lab as lab

from pagedsim.errors import OutOfMemoryError
from pagedsim.memory.base import AppendResult, KVCopy
from pagedsim.testing.paged_view import PagedView

__all__ = ["LabCow", "OutOfMemoryError"]


class LabCow(PagedView):
    """Your :class:`cow_lab.CowLab`, as pagedsim sees it."""

    def __init__(self, num_blocks: int, block_size: int = 16, your_usage: bool = True) -> None:
        """``your_usage`` False: the accounting counts blocks and token slots itself
        instead of asking your ``usage()`` (so that tasks 4.1 and 4.2 do not depend on 4.3)."""
        self.lab = lab.CowLab(num_blocks, block_size)
        self.your_usage = your_usage
        super().__init__(num_blocks, block_size)

    # Your allocator's calls.
    def _allocate(self, seq_id: Hashable, num_tokens: int) -> None:
        self.lab.allocate(seq_id, num_tokens)

    def _append(self, seq_id: Hashable) -> AppendResult:
        slot, kv_copy = self.lab.append_slot(seq_id)
        return slot, None if kv_copy is None else KVCopy(*kv_copy)

    def _fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        self.lab.fork(parent_id, child_id)

    def _free(self, seq_id: Hashable) -> None:
        self.lab.free(seq_id)

    def slot_mapping(self, seq_id: Hashable, start: int = 0, end: int | None = None
                     ) -> list[int]:
        return list(self.lab.slot_mapping(seq_id))[start:end]

    def allocate_group(self, seq_ids: Sequence[Hashable], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[Hashable] = (),
                       watermark: float = 0.0, block_hashes: object = None) -> bool:
        """Admission: your ``can_allocate`` decides; forks need no room held (they share)."""
        ids = [*seq_ids, *fork_ids]
        if len(set(ids)) != len(ids) or any(s in self for s in ids):
            raise ValueError(f"sequence ids {ids!r} repeat or already exist")
        if not self.lab.can_allocate(num_tokens, watermark, len(seq_ids)):
            return False
        for seq_id in seq_ids:
            self.allocate(seq_id, num_tokens, final_len)
        return True

    def can_append_all(self, seq_ids: Iterable[Hashable]) -> bool:
        return self.lab.can_append_all(list(seq_ids))

    def counts(self) -> tuple[int, int, int]:
        """``(token_slots, physical_blocks, logical_blocks)`` from your ``usage()``."""
        if not self.your_usage:
            return super().counts()
        u = self.lab.usage()
        return u.token_slots, u.physical_blocks, u.logical_blocks

    def sharing_saving(self) -> float:
        return self.lab.usage().sharing_saving

    # Your allocator's state.
    def free_block_ids(self) -> list[int]:
        return list(self.lab.free_blocks)

    def ref_count(self, block: int) -> int:
        return self.lab.ref_counts[block]

    def block_table(self, seq_id: Hashable) -> list[int]:
        try:
            return list(self.lab.block_tables[seq_id])
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None

    def seq_len(self, seq_id: Hashable) -> int:
        return self.lab.seq_lens[seq_id]

    def seq_ids(self) -> Iterator[Hashable]:
        return iter(list(self.lab.block_tables))
