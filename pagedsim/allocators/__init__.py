"""KV-cache allocators: contiguous regions and paged blocks, behind one
narrow protocol (:class:`Allocator`)."""

from .base import Allocator, AppendResult, KVCopy, SlotUsage, SwappedGroup
from .contiguous import PLACEMENTS, RESERVATIONS, ContiguousAllocator
from .paged import PagedAllocator

__all__ = [
    "PLACEMENTS",
    "RESERVATIONS",
    "Allocator",
    "AppendResult",
    "ContiguousAllocator",
    "KVCopy",
    "PagedAllocator",
    "SlotUsage",
    "SwappedGroup",
]
