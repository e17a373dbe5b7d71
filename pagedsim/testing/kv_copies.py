"""The state machines' model of a KV cache: copies carried out on ``slot -> value`` dicts."""

from __future__ import annotations

from collections.abc import Iterable

from ..memory.base import KVCopy


def apply_copies(src_mem: dict, dst_mem: dict, copies: Iterable[KVCopy | list[KVCopy]]
                 ) -> None:
    """Carry out KVCopy records on the model memories (copy reads first: copies may chain).
    An entry may be a list of records: one append's copies in several KV-cache groups
    (:meth:`pagedsim.memory.hybrid.HybridAllocator.append_slot`)."""
    for c in copies:
        if type(c) is list:
            apply_copies(src_mem, dst_mem, c)
            continue
        values = [src_mem.get(c.src_slot + i) for i in range(c.num_slots)]
        for i, v in enumerate(values):
            if v is None:
                dst_mem.pop(c.dst_slot + i, None)
            else:
                dst_mem[c.dst_slot + i] = v
