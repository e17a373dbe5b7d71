"""KV-cache allocators: contiguous regions, paged blocks and vAttention pages, behind one
narrow protocol (:class:`Allocator`)."""

from .base import Allocator, AppendResult, KVCopy, SlotUsage, SwappedGroup
from .contiguous import PLACEMENTS, RESERVATIONS, ContiguousAllocator
from .paged import PagedAllocator
from .vattention import VAttentionAllocator

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
    "VAttentionAllocator",
]
