"""The only coupling between lab 2's graders and your code.

The graders call the functions and the class below, never ``contiguous_lab`` directly.
The grader grades your file alone, with its own copy of this file (changing yours
changes nothing): keep the names used below; do not change what it returns.

:class:`LabContiguous` presents your allocator to pagedsim's allocator state machine
(:mod:`pagedsim.testing.allocator_machine`) through the part of pagedsim's allocator
interface that the machine's core rules use.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import contiguous_lab as lab

from pagedsim.errors import OutOfMemoryError
from pagedsim.testing.state_checks import check_arena


# ------------------------------------------------------------------ 2.1 reservation
def reserve_slots(num_tokens: int, final_len: int, policy: str, max_model_len: int) -> int:
    return lab.reserve_slots(num_tokens, final_len, policy, max_model_len)


# --------------------------------------------------------------- 2.2 / 2.3 the arena
def new_arena(capacity_slots: int, best_fit: bool = False,
              used: Iterable[tuple[int, int]] = ()) -> lab.Arena:
    """An arena; with ``used``, one whose regions are those ``(start, size)`` pairs."""
    return lab.Arena.from_layout(capacity_slots, used, best_fit)


def arena_alloc(arena: lab.Arena, size: int) -> int | None:
    return arena.alloc(size)


def arena_free(arena: lab.Arena, start: int) -> None:
    arena.free(start)


def arena_holes(arena: lab.Arena) -> list[tuple[int, int]]:
    return [(int(s), int(n)) for s, n in arena.holes]


def arena_used(arena: lab.Arena) -> dict[int, int]:
    return dict(arena.used)


# -------------------------------------------------------------------- 2.5 accounting
def account(capacity_slots: int, regions: Iterable[tuple[int, int, int, int]],
            holes: Iterable[tuple[int, int]], next_need_slots: int | None = None) -> dict:
    """The slot account of a pool (the six categories but cached, which is 0 here) given
    as plain data: ``regions`` as ``(start, size, num_tokens, final_len)`` tuples,
    ``holes`` as ``(start, size)``."""
    acct = lab.account(capacity_slots, [lab.Region(*r) for r in regions], list(holes),
                       next_need_slots)
    return {"token": acct.token, "reserved": acct.reserved, "internal_frag": acct.internal_frag,
            "external_frag": acct.external_frag, "free": acct.free}


# ------------------------------------------------------------ 2.4 the allocator
class LabContiguous:
    """Your :class:`contiguous_lab.ContiguousLab`, as the allocator state machine sees it."""

    def __init__(self, capacity_slots: int, reservation: str = "max",
                 placement: str = "first-fit", max_model_len: int = 2048) -> None:
        self.lab = lab.ContiguousLab(capacity_slots, reservation, placement, max_model_len)
        self.capacity_slots = capacity_slots

    # What the graders ask of the allocator.
    def allocate(self, seq_id: Hashable, num_tokens: int, final_len: int) -> None:
        self.lab.allocate(seq_id, num_tokens, final_len)

    def append_slot(self, seq_id: Hashable) -> tuple[int, None]:
        return self.lab.append_slot(seq_id), None  # a region never copies

    def free(self, seq_id: Hashable) -> None:
        self.lab.free(seq_id)

    def slot_mapping(self, seq_id: Hashable) -> list[int]:
        return list(self.lab.slot_mapping(seq_id))

    def regions(self) -> dict[Hashable, tuple[int, int, int, int]]:
        """``seq_id -> (start, size, num_tokens, final_len)``."""
        return {s: (r.start, r.size, r.num_tokens, r.final_len)
                for s, r in self.lab.regions.items()}

    def holes(self) -> list[tuple[int, int]]:
        return arena_holes(self.lab.arena)

    def account(self, next_need_slots: int | None = None) -> dict:
        acct = self.lab.account(next_need_slots)
        return {"token": acct.token, "reserved": acct.reserved,
                "internal_frag": acct.internal_frag, "external_frag": acct.external_frag,
                "free": acct.free}

    # What the state machine's core rules ask besides (lab infrastructure, not graded).
    def allocate_group(self, seq_ids: Sequence[Hashable], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[Hashable] = (),
                       watermark: float = 0.0, block_hashes: object = None) -> bool:
        """Admission of one request: a region per id, all or nothing (no watermark: the
        paper's Orca baselines keep none)."""
        if fork_ids:
            raise ValueError("lab 2 has no forks")
        done: list[Hashable] = []
        try:
            for seq_id in seq_ids:
                self.lab.allocate(seq_id, num_tokens, final_len)
                done.append(seq_id)
        except OutOfMemoryError:
            for seq_id in reversed(done):
                self.lab.free(seq_id)
            return False
        return True

    def can_append_all(self, seq_ids: Iterable[Hashable]) -> bool:
        regions = self.regions()
        return all(regions[s][2] < regions[s][1] for s in seq_ids)

    def slot_of(self, seq_id: Hashable, index: int) -> int:
        return self.slot_mapping(seq_id)[index]

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self.lab.regions

    def snapshot(self) -> dict:
        return {"holes": self.holes(), "seqs": self.regions()}

    def check_invariants(self) -> None:
        regions = self.regions()
        check_arena(self.capacity_slots, [(s, n) for s, n, _, _ in regions.values()],
                    self.holes())
        assert arena_used(self.lab.arena) == {s: n for s, n, _, _ in regions.values()}, (
            "the arena's regions and the sequences' regions differ")
        for seq_id, (_, size, num_tokens, _) in regions.items():
            assert 0 <= num_tokens <= size, f"sequence {seq_id!r} overflows its region"
