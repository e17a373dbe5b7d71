"""Lab 2: contiguous allocation, and where every slot of the pool goes.

Before PagedAttention, a serving engine gave each request one contiguous region of the
KV pool, reserved up front for the longest the request might become (FasterTransformer,
Orca). This module builds such an allocator in four pieces:

1. :func:`reserve_slots`: how many slots a request reserves (``max``, ``pow2``, ``oracle``);
2. :meth:`Arena.find_hole` and :meth:`Arena.alloc`: where the region goes in a linear
   arena of slots (first-fit or best-fit);
3. :meth:`Arena.free`: a region given back merges with the free holes on both sides;
4. :class:`ContiguousLab`: one region per sequence (allocate, append a token, free);
5. :func:`account`: the pool split into token / reserved / internal fragmentation /
   external fragmentation / free slots.

Units: every length and size is in token *slots* (one slot holds one token's K and V);
slot ``s`` of the arena is index ``s`` in ``[0, capacity_slots)``. Do not import
``pagedsim.memory`` or ``pagedsim.memory.accounting`` (the grader refuses a file that does).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from pagedsim.errors import OutOfMemoryError

RESERVATIONS = ("max", "pow2", "oracle")
PLACEMENTS = ("first-fit", "best-fit")


def next_pow2(n: int) -> int:
    """Smallest power of two >= ``n`` (1 for ``n`` <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


# --------------------------------------------------------------------- 2.1 reservation
def reserve_slots(num_tokens: int, final_len: int, policy: str, max_model_len: int) -> int:
    """Slots a request reserves when it is admitted, by reservation ``policy``.

    ``num_tokens`` is its prompt length and ``final_len`` its true final length (prompt
    + output), both in tokens, with ``0 <= num_tokens <= final_len <= max_model_len``.

    - ``max``: ``max_model_len`` slots, whatever the request (its output length is unknown);
    - ``pow2``: the prompt plus the next power of two of the output length, capped at
      ``max_model_len`` (vLLM paper, section 6.1: "if the true output length is 25, it
      reserves 32 positions for outputs");
    - ``oracle``: exactly ``final_len``.

    A region is never empty: the result is at least 1 slot.
    """
    if policy not in RESERVATIONS:
        raise ValueError(f"reservation policy must be one of {RESERVATIONS}, got {policy!r}")
    if not 0 <= num_tokens <= final_len <= max_model_len:
        raise ValueError(f"need 0 <= num_tokens ({num_tokens}) <= final_len ({final_len}) "
                         f"<= max_model_len ({max_model_len})")
    # BEGIN SOLUTION lab 2.1: max_model_len, prompt + next_pow2(output) or final_len
    if policy == "max":
        want = max_model_len
    elif policy == "pow2":
        want = min(num_tokens + next_pow2(final_len - num_tokens), max_model_len)
    else:
        want = final_len
    return max(want, 1)
    # END SOLUTION


# ----------------------------------------------------------------------- the arena
class Arena:
    """A linear arena of ``capacity_slots`` slots that hands out regions ``[start, start +
    size)``.

    State (keep these two attributes: the grader reads them):

    - ``holes``: the free holes as ``(start, size)`` tuples, **sorted by start**; two holes
      never touch (a hole that would touch another is merged with it);
    - ``used``: ``{start: size}`` of every region handed out.
    """

    def __init__(self, capacity_slots: int, best_fit: bool = False) -> None:
        if type(capacity_slots) is not int or capacity_slots < 1:
            raise ValueError(f"capacity_slots must be an int >= 1, got {capacity_slots!r}")
        self.capacity_slots = capacity_slots
        self.best_fit = best_fit
        self.holes: list[tuple[int, int]] = [(0, capacity_slots)]
        self.used: dict[int, int] = {}

    @classmethod
    def from_layout(cls, capacity_slots: int, used: Iterable[tuple[int, int]],
                    best_fit: bool = False) -> Arena:
        """An arena whose regions are ``used`` (``(start, size)`` pairs, not overlapping);
        the holes are the gaps between them (for tests that start from a given layout)."""
        arena = cls(capacity_slots, best_fit)
        arena.holes, pos = [], 0
        for start, size in sorted(used):
            if size < 1 or start < pos or start + size > capacity_slots:
                raise ValueError(f"region ({start}, {size}) overlaps another or leaves "
                                 f"the arena of {capacity_slots} slots")
            if start > pos:
                arena.holes.append((pos, start - pos))
            arena.used[start] = size
            pos = start + size
        if pos < capacity_slots:
            arena.holes.append((pos, capacity_slots - pos))
        return arena

    # ------------------------------------------------------------ 2.2 placement
    def find_hole(self, size: int) -> int:
        """Index in ``holes`` of the hole a region of ``size`` slots goes into, or -1 when
        no hole is big enough.

        First-fit (``best_fit`` False): the lowest-addressed hole that is big enough.
        Best-fit: the smallest hole that is big enough; among equal sizes, the lowest
        address.
        """
        # BEGIN SOLUTION lab 2.2: first-fit: first hole that fits; best-fit: smallest
        best = -1
        for i, (_, hole) in enumerate(self.holes):
            if hole < size:
                continue
            if not self.best_fit:
                return i
            if best < 0 or hole < self.holes[best][1]:
                best = i
        return best
        # END SOLUTION

    def alloc(self, size: int) -> int | None:
        """Start slot of a new region of ``size`` (>= 1) slots, taken from the *front* of
        the hole :meth:`find_hole` picks; None (nothing changed) when no hole fits."""
        if type(size) is not int or size < 1:
            raise ValueError(f"region size must be an int >= 1, got {size!r}")
        # BEGIN SOLUTION lab 2.2: take the region from the front of the chosen hole
        i = self.find_hole(size)
        if i < 0:
            return None
        start, hole = self.holes[i]
        if hole == size:
            del self.holes[i]
        else:
            self.holes[i] = (start + size, hole - size)
        self.used[start] = size
        return start
        # END SOLUTION

    # ------------------------------------------------------- 2.3 merging holes
    def free(self, start: int) -> None:
        """Give back the region starting at ``start``: it becomes a hole, merged with the
        hole right after it and the hole right before it when they touch it, so that
        ``holes`` stays sorted and no two holes touch. ``ValueError`` (nothing changed)
        when no region starts there."""
        if start not in self.used:
            raise ValueError(f"no region starts at slot {start!r}")
        # BEGIN SOLUTION lab 2.3: bisect for the place, merge right, then left
        size = self.used.pop(start)
        i = bisect_left(self.holes, (start, 0))  # first hole after the region
        if i < len(self.holes) and start + size == self.holes[i][0]:
            size += self.holes[i][1]  # the hole after touches it: swallow it
            del self.holes[i]
        if i > 0 and self.holes[i - 1][0] + self.holes[i - 1][1] == start:
            before_start, before_size = self.holes[i - 1]  # the hole before touches it
            self.holes[i - 1] = (before_start, before_size + size)
        else:
            self.holes.insert(i, (start, size))
        # END SOLUTION


# ------------------------------------------------------------ 2.4 one region per sequence
@dataclass(slots=True)
class Region:
    """One sequence's region: ``size`` slots from ``start``; it holds ``num_tokens``
    tokens now and will hold ``final_len`` (prompt + output) when it finishes."""

    start: int
    size: int
    num_tokens: int
    final_len: int


class ContiguousLab:
    """A pool of ``capacity_slots`` slots, one contiguous region per sequence.

    A region is reserved at admission by ``reservation`` (see :func:`reserve_slots`) and
    placed by ``placement`` (``first-fit`` or ``best-fit``). Token ``i`` of a sequence
    lives in slot ``start + i`` of its region. Errors, as pagedsim's allocators raise them:
    ``OutOfMemoryError`` when there is no room, ``ValueError`` for bad input (an unknown or
    duplicate sequence id, a negative length); a failed call changes nothing.
    """

    def __init__(self, capacity_slots: int, reservation: str = "max",
                 placement: str = "first-fit", max_model_len: int = 2048) -> None:
        if reservation not in RESERVATIONS:
            raise ValueError(f"reservation must be one of {RESERVATIONS}, got {reservation!r}")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        if type(max_model_len) is not int or max_model_len < 1:
            raise ValueError(f"max_model_len must be an int >= 1, got {max_model_len!r}")
        self.capacity_slots = capacity_slots
        self.reservation = reservation
        self.max_model_len = max_model_len
        self.arena = Arena(capacity_slots, best_fit=placement == "best-fit")
        self.regions: dict[Hashable, Region] = {}

    def allocate(self, seq_id: Hashable, num_tokens: int, final_len: int) -> None:
        """Reserve and place a region for a new sequence whose ``num_tokens``-token prompt
        is written into its first slots; ``final_len`` is its true final length."""
        # BEGIN SOLUTION lab 2.4: check the id, reserve, place (None: no room), record
        if seq_id in self.regions:
            raise ValueError(f"sequence id {seq_id!r} already exists")
        size = reserve_slots(num_tokens, final_len, self.reservation, self.max_model_len)
        start = self.arena.alloc(size)
        if start is None:
            raise OutOfMemoryError(f"sequence {seq_id!r} needs {size} contiguous slots; "
                                   f"no hole is that big")
        self.regions[seq_id] = Region(start, size, num_tokens, final_len)
        # END SOLUTION

    def append_slot(self, seq_id: Hashable) -> int:
        """Room for the sequence's next token: the slot to write its K/V into.
        ``OutOfMemoryError`` when the region is full (a region cannot grow in place)."""
        # BEGIN SOLUTION lab 2.4: the next slot of the region, unless the region is full
        region = self._get(seq_id)
        if region.num_tokens >= region.size:
            raise OutOfMemoryError(f"sequence {seq_id!r} filled its region of "
                                   f"{region.size} slots")
        region.num_tokens += 1
        return region.start + region.num_tokens - 1
        # END SOLUTION

    def free(self, seq_id: Hashable) -> None:
        """Give the sequence's region back to the arena."""
        # BEGIN SOLUTION lab 2.4: forget the region and free it in the arena
        region = self._get(seq_id)
        del self.regions[seq_id]
        self.arena.free(region.start)
        # END SOLUTION

    def slot_mapping(self, seq_id: Hashable) -> list[int]:
        """The slot of each of the sequence's tokens, in token order."""
        # BEGIN SOLUTION lab 2.4: token i is in slot start + i
        region = self._get(seq_id)
        return list(range(region.start, region.start + region.num_tokens))
        # END SOLUTION

    def _get(self, seq_id: Hashable) -> Region:
        try:
            return self.regions[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None

    def account(self, next_need_slots: int | None = None) -> Account:
        """This pool's slot account: the six categories less cached, which is 0 here (see
        :func:`account`)."""
        return account(self.capacity_slots, self.regions.values(), self.arena.holes,
                       next_need_slots)


# ------------------------------------------------------------------- 2.5 accounting
@dataclass(frozen=True, slots=True)
class Account:
    """Where the pool's slots are; the five parts must sum to ``capacity`` (all in slots)."""

    token: int  # hold a live token's K/V
    reserved: int  # allocated, empty, the owner will still fill them
    internal_frag: int  # allocated, empty, never to be filled
    external_frag: int  # free, in holes too small for the next waiting request
    free: int  # the rest of the free slots
    capacity: int  # the pool's slots

    def __post_init__(self) -> None:
        parts = (self.token, self.reserved, self.internal_frag, self.external_frag, self.free)
        if min(parts) < 0 or sum(parts) != self.capacity:  # a bug in the split, or the input
            raise AssertionError(f"the five parts {parts} do not split {self.capacity} slots")


def account(capacity_slots: int, regions: Iterable[Region],
            holes: Iterable[tuple[int, int]], next_need_slots: int | None = None) -> Account:
    """Split a pool of ``capacity_slots`` slots into the five parts of :class:`Account`.

    ``regions`` are the allocated regions; ``holes`` the free ``(start, size)`` holes;
    ``next_need_slots`` is the size of the region the next waiting request needs, or None
    when nobody waits (all in slots). A region of ``size`` slots holding ``num_tokens``
    tokens, which its sequence will fill up to ``final_len`` tokens, has ``num_tokens`` token
    slots, then reserved slots up to its final length (never past the region's end), and
    the rest is internal fragmentation. A free hole smaller than ``next_need_slots`` is external
    fragmentation (none when nobody waits); every other free slot is free.
    """
    # BEGIN SOLUTION lab 2.5: reserved up to min(final_len, size); holes < next need
    token = reserved = internal = 0
    for r in regions:
        future = min(max(r.final_len, r.num_tokens), r.size)
        token += r.num_tokens
        reserved += future - r.num_tokens
        internal += r.size - future
    external = free = 0
    for _, size in holes:
        if next_need_slots is not None and size < next_need_slots:
            external += size
        else:
            free += size
    return Account(token, reserved, internal, external, free, capacity_slots)
    # END SOLUTION
