"""KV-cache allocators: contiguous regions, paged blocks (with or without a prefix cache) and
vAttention pages, behind one
narrow protocol (:class:`Allocator`)."""

from .base import Allocator, AppendResult, KVCopy, SlotUsage, SwappedGroup
from .contiguous import PLACEMENTS, RESERVATIONS, ContiguousAllocator
from .paged import PagedAllocator
from .prefix_cache import PrefixCachingAllocator
from .radix import RadixAllocator
from .vattention import VAttentionAllocator

__all__ = [
    "PLACEMENTS",
    "RESERVATIONS",
    "Allocator",
    "AppendResult",
    "ContiguousAllocator",
    "KVCopy",
    "PagedAllocator",
    "PrefixCachingAllocator",
    "RadixAllocator",
    "SlotUsage",
    "SwappedGroup",
    "VAttentionAllocator",
]
