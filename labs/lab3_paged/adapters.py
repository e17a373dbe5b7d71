"""The only coupling between lab 3's graders and your code.

The graders call what is below, never ``paged_lab`` directly. The grader grades your
file alone, with its own copy of this file (changing yours changes nothing): keep the
names used below; do not change what it returns.

:class:`LabPaged` presents your allocator to pagedsim (its scheduler, simulator,
accounting and allocator state machine) through pagedsim's allocator interface, with
:class:`pagedsim.testing.paged_view.PagedView`, which reads your object's calls
(``allocate``, ``append_slot``, ``free``, ``slot_mapping``) and state (``free_blocks``,
``ref_counts``, ``block_tables``, ``seq_lens``); below are the calls of yours it adds.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import paged_lab as lab

from pagedsim.errors import OutOfMemoryError
from pagedsim.testing.paged_view import PagedView

__all__ = ["LabPaged", "OutOfMemoryError"]


class LabPaged(PagedView):
    """Your :class:`paged_lab.PagedLab`, as pagedsim sees it."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.lab = lab.PagedLab(num_blocks, block_size)
        super().__init__(num_blocks, block_size)

    def take_block(self) -> int:
        return self.lab.take_block()

    def blocks_needed(self, num_tokens: int) -> int:
        return self.lab.blocks_needed(num_tokens)

    def can_allocate(self, num_tokens: int, watermark: float = 0.0, num_seqs: int = 1) -> bool:
        return self.lab.can_allocate(num_tokens, watermark, num_seqs)

    def can_append_all(self, seq_ids: Iterable[Hashable]) -> bool:
        return self.lab.can_append_all(list(seq_ids))

    def allocate_group(self, seq_ids: Sequence[Hashable], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[Hashable] = (),
                       watermark: float = 0.0, block_hashes: object = None) -> bool:
        """Admission, as the scheduler asks for it: your ``can_allocate`` decides."""
        ids = [*seq_ids, *fork_ids]
        if len(set(ids)) != len(ids) or any(s in self for s in ids):
            raise ValueError(f"sequence ids {ids!r} repeat or already exist")
        if not self.lab.can_allocate(num_tokens, watermark, len(seq_ids)):
            return False
        for seq_id in seq_ids:
            self.allocate(seq_id, num_tokens, final_len)
        return True
