"""The only coupling between lab 3's graders and your code.

The graders call what is below, never ``paged_lab`` directly.
The grader grades your file alone, with its own copy of this file (changing yours
changes nothing): keep the names used below; do not change what it returns.

:class:`LabPaged` presents your allocator to pagedsim (its scheduler, simulator,
accounting and allocator state machine) through pagedsim's allocator interface, with
:class:`pagedsim.testing.paged_view.PagedView`: the accessors below read your object.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence

import paged_lab as lab

from pagedsim.allocators.base import AppendResult
from pagedsim.errors import OutOfMemoryError
from pagedsim.testing.paged_view import PagedView

__all__ = ["LabPaged", "OutOfMemoryError"]


class LabPaged(PagedView):
    """Your :class:`paged_lab.PagedLab`, as pagedsim sees it."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.lab = lab.PagedLab(num_blocks, block_size)
        super().__init__(num_blocks, block_size)

    # Your allocator's calls.
    def take_block(self) -> int:
        return self.lab.take_block()

    def blocks_needed(self, num_tokens: int) -> int:
        return self.lab.blocks_needed(num_tokens)

    def allocate_group(self, seq_ids: Sequence[Hashable], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[Hashable] = (),
                       watermark: float = 0.0, content: object = None) -> bool:
        """Admission, as the scheduler asks for it: your ``can_allocate`` decides."""
        ids = [*seq_ids, *fork_ids]
        if len(set(ids)) != len(ids) or any(s in self for s in ids):
            raise ValueError(f"sequence ids {ids!r} repeat or already exist")
        if not self.lab.can_allocate(num_tokens, watermark, len(seq_ids)):
            return False
        for seq_id in seq_ids:
            self.allocate(seq_id, num_tokens, final_len)
        return True

    def can_allocate(self, num_tokens: int, watermark: float = 0.0, num_seqs: int = 1) -> bool:
        return self.lab.can_allocate(num_tokens, watermark, num_seqs)

    def can_append_all(self, seq_ids: Iterable[Hashable]) -> bool:
        return self.lab.can_append_all(list(seq_ids))

    def _allocate(self, seq_id: Hashable, num_tokens: int) -> None:
        self.lab.allocate(seq_id, num_tokens)

    def _append(self, seq_id: Hashable) -> AppendResult:
        return self.lab.append_slot(seq_id), None  # no sharing yet: never a copy

    def _free(self, seq_id: Hashable) -> None:
        self.lab.free(seq_id)

    def slot_mapping(self, seq_id: Hashable, start: int = 0, end: int | None = None
                     ) -> list[int]:
        return list(self.lab.slot_mapping(seq_id))[start:end]

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

    # Lab 4's fork, done by hand on your state (so that task 3.5 can test sharing).
    def share(self, parent_id: Hashable, child_id: Hashable) -> None:
        """``child_id`` gets a copy of the parent's block table; every block in it gains
        a reference."""
        table = self.block_table(parent_id)
        self.lab.block_tables[child_id] = list(table)
        self.lab.seq_lens[child_id] = self.lab.seq_lens[parent_id]
        for block in table:
            self.lab.ref_counts[block] += 1
        self._final[child_id] = self._final.get(parent_id)
