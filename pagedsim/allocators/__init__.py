"""KV-cache allocators: contiguous regions and paged blocks, behind one protocol."""

from .base import Allocator, AppendResult, KVCopy, SlotUsage, SwappedGroup

__all__ = ["Allocator", "AppendResult", "KVCopy", "SlotUsage", "SwappedGroup"]
