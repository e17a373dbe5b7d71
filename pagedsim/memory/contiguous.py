"""Contiguous allocation, as FasterTransformer and Orca do it: one region per sequence.

Each sequence gets one contiguous run of slots in a linear arena, reserved up front
for the longest it might become, because a contiguous region cannot grow in place:

- ``max``: ``max_model_len`` slots for everyone (the output length is unknown);
- ``pow2``: the prompt plus the next power of two of the true output length, capped at
  ``max_model_len`` (the vLLM paper's Orca (Pow2): "if the true output length is 25, it
  reserves 32 positions for outputs", an over-reservation of at most 2x);
- ``oracle``: exactly the true final length (an upper bound on what any
  reservation scheme could do).

The unused part of a region is memory nobody else can use: ``reserved`` while the
sequence will still fill it, ``internal fragmentation`` where it never will. Between
regions, holes too small for the next request are ``external fragmentation``.
Nothing is shared: a fork copies the parent's tokens into a region of its own.

The reservation policies are :mod:`.reservation`, the placements :mod:`.placement`. The
class reads: admission, growing, forks and frees, then swapping (each region's tokens are
copied out and the region released; coming back, every region of the group is placed
again, all or nothing, wherever the arena has room), then the accounting's view.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from ..errors import OutOfMemoryError
from ..validate import check_choice, check_fraction, check_int
from ..workloads.block_hashes import is_request, not_a_request
from .accounting import final_tokens, split_slots
from .base import AppendResult, KVCopy, SeqId, SlotUsage, SwappedGroup, distinct_ids
from .placement import Arena, BuddyArena
from .region import Region
from .reservation import RESERVATIONS, reserve_slots

PLACEMENTS = ("first-fit", "best-fit", "buddy")
__all__ = ["PLACEMENTS", "RESERVATIONS", "ContiguousAllocator"]


class ContiguousAllocator:
    """A linear arena of ``capacity_slots`` token slots, one region per sequence.

    ``align_slots`` rounds every region's size (and so its start) up to a multiple,
    e.g. a kernel's block size, so that a region is a run of whole blocks; the padding
    is counted as internal fragmentation, because it is memory the region owns and
    never fills.
    """

    def __init__(
        self,
        capacity_slots: int,
        reservation: str = "max",
        placement: str = "first-fit",
        max_model_len: int = 2048,
        align_slots: int = 1,
    ) -> None:
        self.capacity_slots = check_int("capacity_slots", capacity_slots, minimum=1)
        self.reservation = check_choice("reservation", reservation, RESERVATIONS)
        self.placement = check_choice("placement", placement, PLACEMENTS)
        self.max_model_len = check_int("max_model_len", max_model_len, minimum=1)
        self.align_slots = check_int("align_slots", align_slots, minimum=1)
        if self.capacity_slots % self.align_slots:
            raise ValueError(
                f"capacity_slots ({capacity_slots}) must be a multiple of "
                f"align_slots ({align_slots})"
            )
        if self.placement == "buddy":
            if self.align_slots & (self.align_slots - 1):
                raise ValueError(
                    f"buddy placement needs align_slots to be a power of two, got {align_slots}"
                )
            self._arena: Arena | BuddyArena = BuddyArena(self.capacity_slots, self.align_slots)
        else:
            self._arena = Arena(self.capacity_slots, best_fit=self.placement == "best-fit")
        self._regions: dict[SeqId, Region] = {}
        self.kernel_block_slots: int | None = None  # a region is read contiguously
        self.kernel_window_tokens: tuple[int, ...] = ()  # every layer full attention
        self.prefix_block_size: int | None = None  # no prefix cache: nothing is hashed
        # Children whose regions are held (empty) from their request's admission, so that
        # forking them later cannot fail; ``fork`` fills them.
        self._held: set[SeqId] = set()
        self._swap_token = object()  # marks the groups this allocator swapped out
        self._swapped: set[SeqId] = set()  # their ids, kept from reuse until they return
        self.evicted_blocks = 0  # no prefix cache: nothing is ever evicted
        #: Called as ``on_release(start_slot, num_slots)`` for every region given back,
        #: so a real cache can scrub it (see ``pagedsim.kernels.executor``).
        self.on_release: Callable[[int, int], None] | None = None

    # ----------------------------------------------------------------- queries
    @property
    def num_seqs(self) -> int:
        return len(self._regions)

    def __contains__(self, seq_id: object) -> bool:
        try:
            return seq_id in self._regions
        except TypeError:  # unhashable: no sequence has it
            return False

    def seq_ids(self) -> Iterator[SeqId]:
        return iter(self._regions)

    def _get(self, seq_id: SeqId) -> Region:
        try:
            return self._regions[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None

    def _running(self, seq_id: SeqId) -> Region:
        """The region of a running sequence: not an empty one held for a fork."""
        r = self._get(seq_id)
        if seq_id in self._held:
            raise ValueError(f"sequence {seq_id!r} is held for a fork, not running")
        return r

    def _check_new(self, seq_ids: Sequence[SeqId]) -> None:
        """Refuse ids given twice, in use, or of a swapped-out group."""
        for s in distinct_ids(seq_ids):
            if s in self._regions:
                raise ValueError(f"sequence id {s!r} already exists")
            if s in self._swapped:
                raise ValueError(f"sequence id {s!r} belongs to a swapped-out group")

    def region(self, seq_id: SeqId) -> tuple[int, int]:
        """``(start_slot, size_slots)`` of the sequence's region."""
        r = self._get(seq_id)
        return r.start, r.size

    def seq_len(self, seq_id: SeqId) -> int:
        return self._get(seq_id).num_tokens

    def final_len(self, seq_id: SeqId) -> int | None:
        return self._get(seq_id).final_len

    def slot_of(self, seq_id: SeqId, index: int) -> int:
        r = self._get(seq_id)
        if not 0 <= index < r.num_tokens:
            raise ValueError(
                f"token index {index!r} out of range for sequence {seq_id!r} "
                f"of {r.num_tokens} tokens"
            )
        return r.start + index

    def slot_mapping(self, seq_id: SeqId, start: int = 0, end: int | None = None) -> list[int]:
        r = self._get(seq_id)
        end = r.num_tokens if end is None else end
        if not 0 <= start <= end <= r.num_tokens:
            raise ValueError(
                f"token range [{start}, {end}) out of range for sequence {seq_id!r} "
                f"of {r.num_tokens} tokens"
            )
        return list(range(r.start + start, r.start + end))

    def reserve_slots(self, num_tokens: int, final_len: int | None = None) -> int:
        """Slots the reservation policy asks for (before alignment and placement)."""
        return reserve_slots(self.reservation, num_tokens, final_len, self.max_model_len)

    def _region_size(self, reserve: int) -> int:
        a = self.align_slots
        return self._arena.placed_size(-(-reserve // a) * a)

    def slots_needed(self, num_tokens: int, final_len: int | None = None) -> int:
        return self._region_size(self.reserve_slots(num_tokens, final_len))

    def can_allocate(self, num_tokens: int, final_len: int | None = None) -> bool:
        return self._arena.can_alloc(self._region_size(self.reserve_slots(num_tokens, final_len)))

    def can_append(self, seq_id: SeqId) -> bool:
        r = self._running(seq_id)
        return r.num_tokens < r.size

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        """Whether ``num_tokens`` more tokens fit in the sequence's region."""
        r = self._running(seq_id)
        return r.num_tokens + check_int("num_tokens", num_tokens, minimum=0) <= r.size

    def extend(self, seq_id: SeqId, num_tokens: int) -> list[KVCopy]:
        """``num_tokens`` more slots of the region, or OutOfMemoryError; never copies."""
        if not self.can_extend(seq_id, num_tokens):
            r = self._get(seq_id)
            raise OutOfMemoryError(f"sequence {seq_id!r} holds {r.num_tokens} of its region's "
                                   f"{r.size} slots; {num_tokens} more do not fit")
        self._regions[seq_id].num_tokens += num_tokens
        return []

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        seq_ids = list(seq_ids)
        distinct_ids(seq_ids)  # a second append of one id is another count
        return all([self.can_append(s) for s in seq_ids])  # every id checked

    # -------------------------------------------------------------- mutations
    def lookup_prefix(self, block_hashes: object, num_tokens: int, seq_id: SeqId) -> int:
        """0: no prefix cache."""
        return 0

    def prefix_hit_tokens(self, seq_id: SeqId) -> int:
        """0: no prefix cache."""
        return 0

    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, block_hashes: object = None) -> bool:
        """A region for each of ``seq_ids`` (``num_tokens`` tokens placed), and an empty
        region of the same size held for each of ``fork_ids``: a contiguous fork needs a
        region of its own, and holding it from admission means the fork cannot fail.
        False (nothing changed) when they do not fit. ``watermark`` does not apply: the
        paper's Orca baselines keep none (it is checked all the same)."""
        check_fraction("watermark", watermark)
        self._check_new([*seq_ids, *fork_ids])
        if block_hashes is not None and not is_request(block_hashes):
            raise not_a_request(block_hashes)
        taken: list[SeqId] = []
        try:
            for seq_id in seq_ids:
                self.allocate(seq_id, num_tokens, final_len)
                taken.append(seq_id)
            if fork_ids:  # a fork gets a region the size of its parent's
                size = self._region_size(self.reserve_slots(num_tokens, final_len))
                for child in fork_ids:
                    if child in self._regions:
                        raise ValueError(f"sequence id {child!r} already exists")
                    self._regions[child] = Region(self._place(child, size), size, 0,
                                                   final_len)
                    taken.append(child)
                    self._held.add(child)
        except Exception as exc:
            for seq_id in reversed(taken):  # frees merge back exactly: nothing changed
                self.free(seq_id)
            if isinstance(exc, OutOfMemoryError):
                return False
            raise
        return True

    def _place(self, seq_id: SeqId, size: int) -> int:
        start = self._arena.alloc(size)
        if start is None:
            largest = max((n for _, n in self._arena.holes()), default=0)
            raise OutOfMemoryError(
                f"sequence {seq_id!r} needs a contiguous region of {size} slots; "
                f"largest hole is {largest}"
            )
        return start

    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None) -> None:
        """Reserve a region by policy and place the ``num_tokens``-token prompt in it."""
        self._check_new([seq_id])
        size = self._region_size(self.reserve_slots(num_tokens, final_len))
        start = self._place(seq_id, size)
        self._regions[seq_id] = Region(start, size, num_tokens, final_len)

    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """The next slot of the sequence's region; never copies."""
        r = self._running(seq_id)
        if r.num_tokens >= r.size:
            raise OutOfMemoryError(
                f"sequence {seq_id!r} filled its region of {r.size} slots; "
                "a contiguous region cannot grow in place"
            )
        r.num_tokens += 1
        return r.start + r.num_tokens - 1, None

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """The child gets a region of its own and a copy of the parent's tokens. Checked
        first: a failed fork changes nothing (the room held for the child included)."""
        p = self._running(parent_id)
        distinct_ids([child_id])  # (refuses an unhashable one before the lookups below)
        if child_id in self._held:  # its room was held since admission: give it back
            trial = copy.deepcopy(self._arena)  # and place the child anew, if it fits
            trial.free(self._regions[child_id].start)
            if trial.alloc(p.size) is None:  # a parent larger than the held room
                largest = max((n for _, n in trial.holes()), default=0)
                raise OutOfMemoryError(f"sequence {child_id!r} needs a contiguous region of "
                                       f"{p.size} slots; largest hole is {largest}")
            self._held.discard(child_id)
            self._arena.free(self._regions.pop(child_id).start)
        else:
            self._check_new([child_id])
        start = self._place(child_id, p.size)
        self._regions[child_id] = Region(start, p.size, p.num_tokens, p.final_len)
        return [KVCopy(p.start, start, p.num_tokens)] if p.num_tokens else []

    def free(self, seq_id: SeqId) -> None:
        try:
            r = self._regions.pop(seq_id)
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown sequence id {seq_id!r} (never allocated, or already freed)"
            ) from None
        self._held.discard(seq_id)
        self._arena.free(r.start)
        if self.on_release is not None:
            self.on_release(r.start, r.size)

    # ------------------- swapping: each region's tokens copied out, placed again coming back
    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """Copy each sequence's tokens to a CPU buffer and release its region."""
        seq_ids = distinct_ids(seq_ids)
        regions = [self._running(s) for s in seq_ids]
        out, meta, offset = [], [], 0
        for r in regions:
            if r.num_tokens:
                out.append(KVCopy(r.start, offset, r.num_tokens))
            meta.append((r.size, r.num_tokens, r.final_len, offset))
            offset += r.num_tokens
        for s in seq_ids:
            self.free(s)
        self._swapped.update(seq_ids)
        return SwappedGroup(seq_ids, offset, out, {"meta": meta}, owner=self._swap_token)

    def swap_out_slots(self, seq_ids: Iterable[SeqId]) -> int:
        """CPU slots a swap-out would take: every sequence's tokens (nothing is shared)."""
        return sum(self._get(s).num_tokens for s in seq_ids)

    def _try_place_all(self, sizes: list[int]) -> list[int] | None:
        starts: list[int] = []
        for size in sizes:
            start = self._arena.alloc(size)
            if start is None:
                for s in reversed(starts):  # roll back: frees merge back exactly
                    self._arena.free(s)  # (never written: no release to report)
                return None
            starts.append(start)
        return starts

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        """Whether every region of the group can be placed (no watermark, as admission;
        it is checked all the same)."""
        check_fraction("watermark", watermark)
        group.check_can_return_to(self._swap_token)
        starts = self._try_place_all([m[0] for m in group.state["meta"]])
        if starts is None:
            return False
        for s in reversed(starts):
            self._arena.free(s)
        return True

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Place every region of the group again (all or nothing); copies CPU -> GPU."""
        group.check_can_return_to(self._swap_token)
        clash = [s for s in group.seq_ids if s in self._regions]
        if clash:
            raise ValueError(f"sequence ids {clash!r} already exist")
        meta = group.state["meta"]
        starts = self._try_place_all([m[0] for m in meta])
        if starts is None:
            raise OutOfMemoryError(f"no room to swap in {len(meta)} regions")
        copies = []
        for seq_id, start, (size, n, final, offset) in zip(
            group.seq_ids, starts, meta, strict=True
        ):
            self._regions[seq_id] = Region(start, size, n, final)
            if n:
                copies.append(KVCopy(offset, start, n))
        group.swapped_in = True
        self._swapped.difference_update(group.seq_ids)
        return copies

    # ------------------------- the accounting's view: regions split, holes, snapshot, checks
    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """Token, reserved (will be filled) and internal-fragmentation slots of all regions.

        Final lengths come from ``final_lens``, else from ``final_len`` at allocation;
        a sequence with neither is taken as finished.
        """
        token = reserved = allocated = 0
        fl = final_lens or {}
        for seq_id, r in self._regions.items():
            n = r.num_tokens
            final = final_tokens(n, fl.get(seq_id, r.final_len) if fl else r.final_len)
            t, res, _ = split_slots(n, final, r.size)
            token += t
            reserved += res
            allocated += r.size
        return SlotUsage(
            token_slots=token,
            reserved_slots=reserved,
            internal_frag_slots=allocated - token - reserved,
            physical_blocks=len(self._regions),
            logical_blocks=len(self._regions),
        )

    def holes(self) -> list[tuple[int, int]]:
        """Free holes as ``(start_slot, size_slots)``, by address."""
        return self._arena.holes()

    @property
    def num_free_slots(self) -> int:
        return sum(size for _, size in self._arena.holes())

    def external_frag_slots(self, need_slots: int | None) -> int:
        """Free slots in holes smaller than ``need_slots`` (0 when nobody waits)."""
        if not need_slots:
            return 0
        return sum(size for _, size in self._arena.holes() if size < need_slots)

    def snapshot(self) -> dict:
        """The whole state as plain data (for pictures, step-through recorders and tests)."""
        return {
            "kind": "contiguous",
            "view": "arena",
            "capacity_slots": self.capacity_slots,
            "reservation": self.reservation,
            "placement": self.placement,
            "max_model_len": self.max_model_len,
            "align_slots": self.align_slots,
            "holes": self._arena.holes(),
            "seqs": {
                sid: {"start": r.start, "size": r.size, "num_tokens": r.num_tokens,
                      "final_len": r.final_len}
                for sid, r in self._regions.items()
            },
        }

    def check_invariants(self) -> None:
        self._arena.check_invariants()
        used = self._arena.used()
        assert len(used) == len(self._regions), "arena and region table disagree"
        for seq_id, r in self._regions.items():
            assert used.get(r.start) == r.size, f"sequence {seq_id!r}: region not in arena"
            assert 0 <= r.start and r.start + r.size <= self.capacity_slots, "region out of bounds"
            assert 0 <= r.num_tokens <= r.size, f"sequence {seq_id!r} overflows its region"
            assert r.start % self.align_slots == 0, f"sequence {seq_id!r}: unaligned region"
        for child in self._held:
            assert child in self._regions and self._regions[child].num_tokens == 0, (
                f"held child {child!r} has no empty region")

