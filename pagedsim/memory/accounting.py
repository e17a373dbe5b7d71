"""Where every slot of the KV pool goes, at one instant.

The pool's ``capacity_slots`` split into exactly six parts (they always sum to
capacity):

1. ``token``: slots holding K/V of tokens that exist now (a physical slot shared by
   several sequences counts once);
2. ``reserved``: allocated, empty, and the owner will fill them before it finishes;
3. ``internal_frag``: allocated, empty, never to be filled (over-reservation, the
   tail of a last block, alignment or buddy rounding);
4. ``cached``: slots of blocks no running sequence holds whose K/V a prefix cache keeps
   for reuse (schemes ``prefix-cache`` and ``radix``): free to take, since evicting them
   costs only a recomputation later, so admission counts them as available;
5. ``external_frag``: free slots in holes too small for what the next waiting
   request needs (always 0 for paged allocation: any free block serves);
6. ``free``: the rest.

Sharing saving (vLLM paper section 6.3) is ``1 - physical_blocks / logical_blocks``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the allocators use the rules below, so no runtime import back
    from .base import Allocator, SeqId

CATEGORIES = ("token", "reserved", "internal_frag", "cached", "external_frag", "free")


# ----------------------------------------------------------------- the rules
# Every allocator's ``usage()`` and every picture (:mod:`pagedsim.plots.layout`) split
# allocated memory with these two functions, so the rules exist once.
def final_tokens(num_tokens: int, final_len: int | None) -> int:
    """Tokens a sequence holding ``num_tokens`` will hold when it finishes: its true
    final length (prompt + output), or ``num_tokens`` when that is unknown or already
    passed (the sequence is taken as finished)."""
    return final_len if final_len is not None and final_len > num_tokens else num_tokens


def split_slots(filled: int, future: int, size: int) -> tuple[int, int, int]:
    """Split ``size`` allocated slots of which ``filled`` hold tokens now and ``future``
    will hold tokens by the owner's end into ``(token, reserved, internal_frag)``."""
    future = min(future, size)
    return filled, future - filled, size - future


@dataclass(slots=True)
class SlotAccount:
    """The six categories in slots, plus block counts for sharing savings. (Not frozen:
    one is made every simulated step, and a frozen dataclass's ``__init__`` takes over
    twice as long.)"""

    token: int
    reserved: int
    internal_frag: int
    external_frag: int
    free: int
    capacity: int
    physical_blocks: int
    logical_blocks: int
    cached: int = 0  # last, so that schemes without a prefix cache need not name it

    def __post_init__(self) -> None:
        parts = (self.token, self.reserved, self.internal_frag, self.cached,
                 self.external_frag, self.free)
        if min(parts) < 0 or sum(parts) != self.capacity:
            raise AssertionError(f"slot categories {parts} do not partition {self.capacity}")

    @property
    def utilization(self) -> float:
        """Fraction of the pool holding live tokens' K/V."""
        return self.token / self.capacity

    @property
    def sharing_saving(self) -> float:
        """``1 - physical / logical`` blocks (0 when nothing is shared or nothing is used)."""
        return 1 - self.physical_blocks / self.logical_blocks if self.logical_blocks else 0.0

    def shares(self) -> dict[str, float]:
        """The six categories as fractions of capacity (they sum to 1)."""
        return {c: getattr(self, c) / self.capacity for c in CATEGORIES}

    def to_dict(self) -> dict:
        return asdict(self)


def account(
    allocator: Allocator,
    next_need_slots: int | None = None,
    final_lens: Mapping[SeqId, int] | None = None,
) -> SlotAccount:
    """Split ``allocator``'s pool into the six categories.

    ``next_need_slots`` is what the next waiting request would take
    (``allocator.slots_needed(prompt_len, final_len)``), or None when nobody waits:
    free holes smaller than it count as external fragmentation. ``final_lens`` gives
    live sequences' true final lengths (prompt + output, tokens) where the allocator
    was not told them at allocation.
    """
    usage = allocator.usage(final_lens)
    free_total = allocator.num_free_slots
    external = allocator.external_frag_slots(next_need_slots)
    return SlotAccount(
        token=usage.token_slots,
        reserved=usage.reserved_slots,
        internal_frag=usage.internal_frag_slots,
        external_frag=external,
        free=free_total - external,
        capacity=allocator.capacity_slots,
        physical_blocks=usage.physical_blocks,
        logical_blocks=usage.logical_blocks,
        cached=usage.cached_slots,
    )
