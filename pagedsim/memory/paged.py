"""PagedAttention's block manager: fixed-size blocks, block tables, reference counts.

The KV pool is ``num_blocks`` blocks of ``block_size`` token slots. A sequence owns a
*block table*: its i-th token lives in slot ``table[i // block_size] * block_size + i %
block_size``. Blocks need not be consecutive, so any free block serves any sequence (no
external fragmentation), and a sequence wastes at most the unused tail of its last block.
``fork`` lets a child share every block of its parent; a sequence that appends into a
block whose reference count is above 1 first gets a private copy of that one block
(copy-on-write).

:func:`PagedAllocator` builds the one block-table manager
(:class:`~pagedsim.memory.block_manager.BlockManager`, read it top to bottom) over the
plainest pool, a free list (:class:`~pagedsim.memory.free_list.FreeList`). Names
follow vLLM and nano-vllm (``block_table``, ``ref_count``, ``can_allocate``).
"""

from __future__ import annotations

from .block_manager import BlockManager
from .block_seq import Seq as _Seq
from .free_list import FreeList

__all__ = ["PagedAllocator", "_Seq"]


def PagedAllocator(num_blocks: int, block_size: int = 16) -> BlockManager:  # noqa: N802
    """The block manager over a free list of ``num_blocks`` blocks of ``block_size`` token
    slots each. (Named as the class it builds a configuration of: there is no subclass.)"""
    return BlockManager(FreeList(num_blocks, block_size))
