"""Where a contiguous region goes in a linear arena: first-fit, best-fit, or buddy.

An arena hands out ranges ``[start, start + size)`` of slot indices. It knows
nothing of tokens; :class:`~pagedsim.memory.contiguous.ContiguousAllocator`
decides how big a region a request gets, the arena decides where it goes.

- first-fit: the lowest-addressed hole that is big enough.
- best-fit: the smallest hole that is big enough (ties: lowest address).
- buddy: sizes rounded up to a power of two, blocks split in halves and merged
  with their "buddy" on free (the allocator the vLLM paper assumes for Orca).
  The rounding is memory the region owns but never uses.
"""

from __future__ import annotations

from bisect import bisect_left, insort


def _check_tiling(used: dict[int, int], holes: list[tuple[int, int]], capacity: int) -> None:
    """Regions and holes together cover ``[0, capacity)`` exactly: no gap, no overlap."""
    pos = 0
    for start, size in sorted([*used.items(), *holes]):
        assert size > 0, f"empty span at {start}"
        assert start == pos, f"gap or overlap at slot {start} (expected {pos})"
        pos = start + size
    assert pos == capacity, f"spans end at {pos}, capacity {capacity}"


class Arena:
    """Holes kept sorted by address; neighbouring holes are merged on free."""

    def __init__(self, capacity_slots: int, best_fit: bool = False) -> None:
        self.capacity_slots = capacity_slots
        self.best_fit = best_fit
        self._starts: list[int] = [0] if capacity_slots else []  # hole starts, sorted
        self._sizes: list[int] = [capacity_slots] if capacity_slots else []
        self._used: dict[int, int] = {}  # region start -> size

    def placed_size(self, size: int) -> int:
        """Slots a request for ``size`` slots really takes (no rounding here)."""
        return size

    def _find(self, size: int) -> int:
        """Index of the hole to use, or -1."""
        best = -1
        for i, hole in enumerate(self._sizes):
            if hole >= size:
                if not self.best_fit:
                    return i
                if best < 0 or hole < self._sizes[best]:
                    best = i
        return best

    def can_alloc(self, size: int) -> bool:
        return self._find(size) >= 0

    def alloc(self, size: int) -> int | None:
        """Start of a new region of ``size`` slots, or None if no hole fits."""
        i = self._find(size)
        if i < 0:
            return None
        start = self._starts[i]
        if self._sizes[i] == size:
            del self._starts[i], self._sizes[i]
        else:
            self._starts[i] += size
            self._sizes[i] -= size
        self._used[start] = size
        return start

    def free(self, start: int) -> None:
        size = self._used.pop(start)
        i = bisect_left(self._starts, start)
        starts, sizes = self._starts, self._sizes
        # Merge with the hole after, then with the hole before.
        if i < len(starts) and start + size == starts[i]:
            size += sizes[i]
            del starts[i], sizes[i]
        if i > 0 and starts[i - 1] + sizes[i - 1] == start:
            sizes[i - 1] += size
        else:
            starts.insert(i, start)
            sizes.insert(i, size)

    def holes(self) -> list[tuple[int, int]]:
        """Free holes as ``(start, size)``, by address."""
        return list(zip(self._starts, self._sizes, strict=True))

    def used(self) -> dict[int, int]:
        return dict(self._used)

    def check_invariants(self) -> None:
        _check_tiling(self._used, self.holes(), self.capacity_slots)
        for (s1, n1), (s2, _) in zip(self.holes(), self.holes()[1:], strict=False):
            assert s1 + n1 < s2, f"adjacent holes at {s1} and {s2} were not merged"


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class BuddyArena:
    """A binary buddy allocator. A capacity that is not a power of two is split into
    power-of-two roots (largest first, so each root is aligned to its size)."""

    def __init__(self, capacity_slots: int, min_block_slots: int = 1) -> None:
        if min_block_slots & (min_block_slots - 1):
            raise ValueError(f"buddy min block must be a power of two, got {min_block_slots}")
        self.capacity_slots = capacity_slots
        self.min_block_slots = min_block_slots
        self._free: dict[int, list[int]] = {}  # block size -> sorted starts of free blocks
        self._used: dict[int, int] = {}
        pos, rest = 0, capacity_slots
        while rest >= min_block_slots:
            size = 1 << (rest.bit_length() - 1)
            self._free.setdefault(size, []).append(pos)
            pos += size
            rest -= size
        self._roots_end = pos  # slots past this (< min block) can never be used
        self.largest_block_slots = max(self._free, default=0)

    def placed_size(self, size: int) -> int:
        return max(next_pow2(size), self.min_block_slots)

    def _smallest_fit(self, size: int) -> int:
        fits = [s for s, starts in self._free.items() if s >= size and starts]
        return min(fits) if fits else 0

    def can_alloc(self, size: int) -> bool:
        return self._smallest_fit(self.placed_size(size)) > 0

    def alloc(self, size: int) -> int | None:
        need = self.placed_size(size)
        have = self._smallest_fit(need)
        if not have:
            return None
        start = self._free[have].pop(0)  # lowest address of that size
        while have > need:  # split, keeping the lower half, freeing the upper
            have //= 2
            insort(self._free.setdefault(have, []), start + have)
        self._used[start] = need
        return start

    def free(self, start: int) -> None:
        size = self._used.pop(start)
        while True:
            buddy = start ^ size
            peers = self._free.get(size, [])
            i = bisect_left(peers, buddy)
            if i < len(peers) and peers[i] == buddy:
                del peers[i]
                start = min(start, buddy)
                size *= 2
            else:
                break
        insort(self._free.setdefault(size, []), start)

    def holes(self) -> list[tuple[int, int]]:
        """Free blocks as ``(start, size)``; buddies never merge with non-buddies, so each
        free block is a hole of its own. A tail below the minimum block is a hole too."""
        out = [(s, size) for size, starts in self._free.items() for s in starts]
        if self._roots_end < self.capacity_slots:
            out.append((self._roots_end, self.capacity_slots - self._roots_end))
        return sorted(out)

    def used(self) -> dict[int, int]:
        return dict(self._used)

    def check_invariants(self) -> None:
        _check_tiling(self._used, self.holes(), self.capacity_slots)
        for start, size in self._used.items():
            assert start % size == 0, f"buddy block at {start} not aligned to its size {size}"
        for size, starts in self._free.items():
            assert starts == sorted(starts)
            for s in starts:
                assert s % size == 0
                assert (s ^ size) not in starts, (
                    f"free buddies {s} and {s ^ size} of size {size} were not merged"
                )
