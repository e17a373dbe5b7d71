"""SGLang's ``--radix-eviction-policy lfu`` for the radix cache: evict the unlocked leaf
hit least often, and among those the least recently used.

A node's ``hit_count`` counts the admissions whose cached prefix reached into it
(:meth:`~pagedsim.memory.radix_tree.RadixTree.hit`), so a system prompt that every
request reuses outlives a burst of one-off documents that LRU would keep, having seen
them last. The scheme ``radix-lfu`` is :class:`~pagedsim.memory.radix.RadixAllocator`
with this priority; everything else (matching, locking, insertion, the accounting) is the
radix scheme's.
"""

from __future__ import annotations

from .radix_tree import Node


def lfu(node: Node) -> tuple:
    """Eviction priority, smallest first: fewest hits, then least recently used."""
    return (node.hit_count, node.last_access)
