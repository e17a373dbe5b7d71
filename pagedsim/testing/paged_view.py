"""A block-table allocator written elsewhere (a classroom lab's) seen as a pagedsim allocator.

A lab asks students for a small paged allocator: a free list, block tables, reference
counts, ``allocate`` / ``append_slot`` / ``free`` (and ``fork`` with copy-on-write). The
scheduler, the simulator, the accounting and the allocator state machine
(:mod:`pagedsim.testing.allocator_machine`) want pagedsim's narrow
:class:`~pagedsim.memory.base.Allocator` interface. :class:`PagedView` provides that
interface on top of a few accessors, which by default read the student's object
(``self.lab``: its calls and its state attributes, named in the class) and a lab's
``adapters.py`` overrides where its lab differs; everything the student did not write
(admission with a watermark, whether a group's appends fit, the reserved /
internal-fragmentation split) is computed
here from the student's block tables and reference counts, so a wrong table or count
shows up as a wrong answer.

Swapping is not offered: run the scheduler with ``cpu_swap_slots=0`` (its default), so
that preempted requests are recomputed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence

from ..errors import OutOfMemoryError
from ..memory.accounting import final_tokens
from ..memory.base import AppendResult, KVCopy, SlotUsage, SwappedGroup
from ..validate import check_fraction
from .state_checks import check_blocks


class PagedView:
    """pagedsim's allocator interface over a block-table allocator (``self.lab``);
    subclass, set ``self.lab``, and override the accessors where the lab differs.
    ``num_blocks`` blocks of ``block_size`` token slots."""

    kernel_block_slots: int | None
    kernel_window_tokens: tuple[int, ...] = ()  # every layer full attention
    prefix_block_size: int | None = None  # no prefix cache: nothing is hashed
    on_release: Callable[[int, int], None] | None = None
    evicted_blocks: int = 0  # no prefix cache: nothing cached, nothing evicted

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.capacity_slots = num_blocks * block_size
        self.kernel_block_slots = block_size
        self._final: dict[Hashable, int | None] = {}  # true final lengths, for accounting

    # ------------------------------------------ accessors (read from ``self.lab``)
    # By default the lab's object (``self.lab``, set by the adapter) has the calls
    # ``allocate`` / ``append_slot`` / ``free`` / ``slot_mapping`` (and ``fork``), and
    # its state in attributes named below; an adapter whose lab differs overrides these.
    lab: object
    free_attr, refs_attr, tables_attr, lens_attr = (
        "free_blocks", "ref_counts", "block_tables", "seq_lens")

    def _allocate(self, seq_id: Hashable, num_tokens: int) -> None:
        self.lab.allocate(seq_id, num_tokens)

    def _append(self, seq_id: Hashable) -> AppendResult:
        """The lab's ``append_slot``: a slot (no sharing yet: never a copy) or a pair."""
        out = self.lab.append_slot(seq_id)
        return out if isinstance(out, tuple) else (out, None)

    def _free(self, seq_id: Hashable) -> None:
        self.lab.free(seq_id)

    def _fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        fork = getattr(self.lab, "fork", None)
        if fork is None:
            raise NotImplementedError("this allocator has no fork")
        fork(parent_id, child_id)

    def slot_mapping(self, seq_id: Hashable, start: int = 0, end: int | None = None
                     ) -> list[int]:
        return list(self.lab.slot_mapping(seq_id))[start:end]

    def free_block_ids(self) -> list[int]:
        """The free list, in its own order."""
        return list(getattr(self.lab, self.free_attr))

    def ref_count(self, block: int) -> int:
        return getattr(self.lab, self.refs_attr)[block]

    def block_table(self, seq_id: Hashable) -> list[int]:
        try:
            return list(getattr(self.lab, self.tables_attr)[seq_id])
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None

    def seq_len(self, seq_id: Hashable) -> int:
        return getattr(self.lab, self.lens_attr)[seq_id]

    def seq_ids(self) -> Iterator[Hashable]:
        return iter(list(getattr(self.lab, self.tables_attr)))

    def share(self, parent_id: Hashable, child_id: Hashable) -> None:
        """A fork done by hand on the lab's state (for a lab before copy-on-write):
        ``child_id`` gets a copy of the parent's block table; every block in it gains a
        reference."""
        table = self.block_table(parent_id)
        getattr(self.lab, self.tables_attr)[child_id] = list(table)
        lens = getattr(self.lab, self.lens_attr)
        lens[child_id] = lens[parent_id]
        refs = getattr(self.lab, self.refs_attr)
        for block in table:
            refs[block] += 1
        self._final[child_id] = self._final.get(parent_id)

    def counts(self) -> tuple[int, int, int]:
        """``(token_slots, physical_blocks, logical_blocks)``; a lab whose students write
        this overrides it. Token slots count a slot shared by several sequences once."""
        bs = self.block_size
        filled: dict[int, int] = {}
        logical = 0
        for seq_id in self.seq_ids():
            table, n = self.block_table(seq_id), self.seq_len(seq_id)
            logical += len(table)
            for j, b in enumerate(table):
                filled[b] = max(filled.get(b, 0), min(bs, n - j * bs))
        return sum(filled.values()), len(filled), logical

    # ------------------------------------------------------------------ queries
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids())

    @property
    def num_free_slots(self) -> int:
        return self.num_free_blocks * self.block_size

    @property
    def num_seqs(self) -> int:
        return sum(1 for _ in self.seq_ids())

    def __contains__(self, seq_id: object) -> bool:
        return any(s == seq_id for s in self.seq_ids())

    def slot_of(self, seq_id: Hashable, index: int) -> int:
        return self.slot_mapping(seq_id)[index]

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def slots_needed(self, num_tokens: int, final_len: int | None = None) -> int:
        return self.blocks_needed(num_tokens) * self.block_size

    def external_frag_slots(self, need_slots: int | None) -> int:
        return 0  # any free block serves any sequence

    def append_blocks_needed(self, seq_ids: Iterable[Hashable]) -> int:
        """New blocks one append to each of ``seq_ids`` takes: a full last block needs a
        new one; of k sharers of a shared last block, all copy it but the last, who finds
        it private by then (k - 1 copies when all sharers append, else k)."""
        bs = self.block_size
        needed, shared_last = 0, Counter()
        for seq_id in seq_ids:
            n, table = self.seq_len(seq_id), self.block_table(seq_id)
            if n % bs == 0:
                needed += 1
            elif self.ref_count(table[-1]) > 1:
                shared_last[table[-1]] += 1
        for block, k in shared_last.items():
            needed += k - 1 if k == self.ref_count(block) else k
        return needed

    def can_append_all(self, seq_ids: Iterable[Hashable]) -> bool:
        return self.append_blocks_needed(seq_ids) <= self.num_free_blocks

    def can_extend(self, seq_id: Hashable, num_tokens: int) -> bool:
        n, table = self.seq_len(seq_id), self.block_table(seq_id)
        need = self.blocks_needed(n + num_tokens) - len(table)
        if num_tokens and n % self.block_size and self.ref_count(table[-1]) > 1:
            need += 1  # copy-on-write of the shared last block
        return need <= self.num_free_blocks

    def lookup_prefix(self, block_hashes: object, num_tokens: int, seq_id: Hashable) -> int:
        return 0  # no prefix cache

    def prefix_hit_tokens(self, seq_id: Hashable) -> int:
        return 0

    def watermark_blocks(self, watermark: float) -> int:
        return int(check_fraction("watermark", watermark) * self.num_blocks)

    # ---------------------------------------------------------------- mutations
    def allocate(self, seq_id: Hashable, num_tokens: int, final_len: int | None = None) -> None:
        self._allocate(seq_id, num_tokens)
        self._final[seq_id] = final_len

    def allocate_group(self, seq_ids: Sequence[Hashable], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[Hashable] = (),
                       watermark: float = 0.0, block_hashes: object = None) -> bool:
        """Admit a request, keeping ``watermark`` of the blocks free (forks share their
        parent's blocks, so no room is held for them; ``block_hashes`` is for prefix caches)."""
        ids = [*seq_ids, *fork_ids]
        if len(set(ids)) != len(ids) or any(s in self for s in ids):
            raise ValueError(f"sequence ids {ids!r} repeat or already exist")
        need = self.blocks_needed(num_tokens) * len(seq_ids)
        if self.num_free_blocks - need < self.watermark_blocks(watermark):
            return False
        for seq_id in seq_ids:
            self.allocate(seq_id, num_tokens, final_len)
        return True

    def append_slot(self, seq_id: Hashable) -> AppendResult:
        return self._append(seq_id)

    def extend(self, seq_id: Hashable, num_tokens: int) -> list[KVCopy]:
        if not self.can_extend(seq_id, num_tokens):
            raise OutOfMemoryError(f"no room for {num_tokens} more tokens of {seq_id!r}")
        copies = []
        for _ in range(num_tokens):
            _, kv_copy = self._append(seq_id)
            if kv_copy is not None:
                copies.append(kv_copy)
        return copies

    def fork(self, parent_id: Hashable, child_id: Hashable) -> list[KVCopy]:
        self._fork(parent_id, child_id)
        self._final[child_id] = self._final.get(parent_id)
        return []  # the child shares every block: nothing moves now

    def free(self, seq_id: Hashable) -> None:
        self._free(seq_id)
        self._final.pop(seq_id, None)

    # ------------------------------------------------- swapping: not offered
    def swap_out_slots(self, seq_ids: Iterable[Hashable]) -> int:
        return len({b for s in seq_ids for b in self.block_table(s)}) * self.block_size

    def swap_out(self, seq_ids: Iterable[Hashable]) -> SwappedGroup:
        raise NotImplementedError("a lab allocator does not swap: run the scheduler with "
                                  "cpu_swap_slots=0, so that preemption recomputes")

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        raise NotImplementedError("a lab allocator does not swap")

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        raise NotImplementedError("a lab allocator does not swap")

    # --------------------------------------------------------------- accounting
    def usage(self, final_lens: Mapping[Hashable, int] | None = None) -> SlotUsage:
        """Token slots and block counts from :meth:`counts`; reserved slots are what the
        sequences will still write into their blocks by their final lengths (a shared
        block once, with its sharers' largest future fill); the rest of the used blocks'
        slots is internal fragmentation."""
        bs = self.block_size
        fl = final_lens or {}
        fill_future: dict[int, tuple[int, int]] = {}  # block -> (fill, future fill)
        for seq_id in self.seq_ids():
            n, table = self.seq_len(seq_id), self.block_table(seq_id)
            final = final_tokens(n, fl.get(seq_id, self._final.get(seq_id)))
            for j, b in enumerate(table):
                fill, future = min(bs, n - j * bs), min(bs, final - j * bs)
                old = fill_future.get(b)
                if old is None or future > old[1]:
                    fill_future[b] = (fill, future)
        reserved = sum(future - fill for fill, future in fill_future.values())
        token, physical, logical = self.counts()
        used = (self.num_blocks - self.num_free_blocks) * bs
        return SlotUsage(token_slots=token, reserved_slots=reserved,
                         internal_frag_slots=used - token - reserved,
                         physical_blocks=physical, logical_blocks=logical)

    # ------------------------------------------------------- pictures and checks
    def snapshot(self) -> dict:
        """The state as plain data, in :class:`pagedsim.PagedAllocator`'s snapshot shape
        (so ``pagedsim.plots.block_map`` can draw it)."""
        return {
            "kind": "paged",
            "view": "blocks",
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "free_blocks": list(self.free_block_ids()),
            "ref_counts": [self.ref_count(b) for b in range(self.num_blocks)],
            "seqs": {s: {"block_table": list(self.block_table(s)),
                         "num_tokens": self.seq_len(s), "final_len": self._final.get(s)}
                     for s in self.seq_ids()},
        }

    def check_invariants(self) -> None:
        snap = self.snapshot()
        check_blocks(self.num_blocks, self.block_size, snap["free_blocks"],
                     snap["ref_counts"],
                     {s: v["block_table"] for s, v in snap["seqs"].items()},
                     {s: v["num_tokens"] for s, v in snap["seqs"].items()})
        assert set(self._final) == set(snap["seqs"]), "final lengths kept for other sequences"
        for s in snap["seqs"]:
            bs, table = self.block_size, snap["seqs"][s]["block_table"]
            want = [table[i // bs] * bs + i % bs for i in range(snap["seqs"][s]["num_tokens"])]
            assert list(self.slot_mapping(s)) == want, f"sequence {s!r}: wrong slot mapping"
