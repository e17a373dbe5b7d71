"""A host-memory tier behind a prefix cache's GPU pool (SGLang HiCache's L2, LMCache's CPU
backend, vLLM's CPU offloading connector, Mooncake's DRAM pool).

The GPU pool keeps cached blocks only until it needs their memory. The host tier keeps
them longer: ``capacity_blocks`` blocks of host memory, each holding one GPU block's K/V,
found by the block's chained hash (the same name the GPU tier gives it, so a prefix found
in one tier continues in the other). The pool and the prefix-cache policy are given one
(:class:`~.block_pool.BlockPool` and :class:`~.hash_cache.HashCache`,
:class:`~.radix_pool.RadixPool` and :class:`~.radix_cache.RadixCache`); this module is
all the host tier there is:

* **Write-back** (:meth:`HostTier.evicted`): when the GPU evicts a cached block, its K/V is
  copied to the host unless the host holds that hash already (then it is only marked as
  used). With ``write_through`` every block is also written when it is first named
  (HiCache's ``write_through``): queued by :meth:`inserted`, copied after the step's
  model has computed it (:meth:`flush`), or at its eviction if that comes first.
* **Lookup and load** (:meth:`run`, :meth:`pin`, :meth:`load`): a request's lookup walks
  the GPU tier, then continues its prefix here; an admission pins the host hits (so that
  the write-backs of the GPU blocks it takes cannot evict them), takes fresh GPU blocks,
  and records one host -> GPU copy per hit, before the prefill that follows them.
* **Eviction**: least recently used first. Using an entry (a write, a load, its GPU copy
  being evicted again) makes it most recent; a run of a chain is marked tail first, so
  its head stays longest (a chain's tail is unreachable once its head is gone). When every
  entry is pinned, a write-back is dropped (``dropped_blocks``): a cache may forget.

Every copy is a :class:`HostCopy`, recorded in the order the bookkeeping happened;
:meth:`flush` hands the step's out as :class:`HostTransfers`: ``copies`` to carry out
before the model runs (in list order: a host block written back may be one a load
earlier in the list read; a GPU block loaded into may be one written back before), and
``writes`` after it (write-through of blocks computed in this step). Host blocks are
numbered ``0 .. capacity_blocks - 1``; a real cache keeps a CPU tensor of that many.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

from ..validate import check_int


class HostCopy(NamedTuple):
    """Copy one whole block between the GPU pool and the host tier."""

    to_host: bool  # True: GPU -> host (write-back or write-through); False: a load
    gpu_block: int
    host_block: int


class HostTransfers(NamedTuple):
    """One step's host-tier copies (see the module docstring for their order)."""

    copies: list[HostCopy]  # before the model: loads and write-backs, in this order
    writes: list[HostCopy]  # after the model: write-through of blocks it computed


class HostTier:
    """``capacity_blocks`` host blocks of ``block_size`` slots, by chained hash, LRU."""

    def __init__(self, capacity_blocks: int, block_size: int = 16,
                 write_through: bool = False) -> None:
        self.capacity_blocks = check_int("capacity_blocks", capacity_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        if not isinstance(write_through, bool):
            raise ValueError(f"write_through must be True or False, got {write_through!r}")
        self.write_through = write_through
        self.entries: OrderedDict[int, int] = OrderedDict()  # hash -> host block, LRU first
        # Host blocks never used yet are ``_fresh .. capacity_blocks - 1``, taken in order;
        # a counter, not a list, so that a tier of 2**20 GiB (tens of millions of blocks)
        # costs nothing until blocks are written (an evicted entry's block is reused
        # directly, so a used block never returns to the never-used ones).
        self._fresh = 0
        self.pinned: set[int] = set()  # hashes an admission is about to load
        self.pending: dict[int, int] = {}  # GPU block -> hash, to write through at flush
        self.copies: list[HostCopy] = []  # this step's, in order
        self.loaded_blocks = 0  # host -> GPU copies so far
        self.written_back_blocks = 0  # GPU -> host copies at eviction
        self.written_through_blocks = 0  # GPU -> host copies at insertion
        self.evicted_blocks = 0  # host entries evicted for other content
        self.dropped_blocks = 0  # write-backs not kept: every entry was pinned

    @property
    def free(self) -> range:
        """The never-used host blocks, in the order a list popped from its end would give
        them (the last item is taken next): ``capacity_blocks - 1`` down to the next one."""
        return range(self.capacity_blocks - 1, self._fresh - 1, -1)

    def __contains__(self, h: object) -> bool:
        return h in self.entries

    def __len__(self) -> int:
        """Host blocks in use (hashes held)."""
        return len(self.entries)

    # ---------------------------------------------------------------- lookups
    def run(self, chain: Sequence[int], start: int, stop: int) -> int:
        """How many of ``chain[start:stop]``, from ``start`` on, the host holds in a row."""
        if start >= stop or chain[start] not in self.entries:
            return 0  # the common miss, without building anything
        held = list(map(self.entries.__contains__, chain[start:stop]))  # C speed: hot
        try:
            return held.index(False)
        except ValueError:
            return len(held)

    # ---------------------------------------------------------------- loading
    def pin(self, hashes: Sequence[int]) -> None:
        """An admission will load these (held) hashes: no write-back may evict them until
        :meth:`load`; they become the most recently used, head last."""
        move = self.entries.move_to_end
        for h in reversed(hashes):
            move(h)
        self.pinned.update(hashes)

    def load(self, hashes: Sequence[int], gpu_blocks: Sequence[int]) -> None:
        """Record the host -> GPU copy of each pinned hash into its fresh GPU block, and
        unpin them."""
        entries, copies = self.entries, self.copies
        for h, b in zip(hashes, gpu_blocks, strict=True):
            copies.append(HostCopy(False, b, entries[h]))
        self.loaded_blocks += len(hashes)
        self.pinned.difference_update(hashes)

    # ---------------------------------------------------------------- writing
    def evicted(self, gpu_block: int, h: int) -> None:
        """The GPU evicts ``gpu_block``, named ``h``: write it back unless the host holds
        ``h`` (then it only becomes the most recently used)."""
        if self.pending:  # written now or never: the block is reused
            self.pending.pop(gpu_block, None)
        entries = self.entries
        if h in entries:
            entries.move_to_end(h)
            return
        slot = self._room()
        if slot is None:
            self.dropped_blocks += 1
            return
        entries[h] = slot
        self.copies.append(HostCopy(True, gpu_block, slot))
        self.written_back_blocks += 1

    def inserted(self, gpu_block: int, h: int) -> None:
        """``gpu_block`` is newly named ``h`` (write-through only: to copy at :meth:`flush`,
        once the step has computed it)."""
        if self.write_through:
            self.pending[gpu_block] = h

    def flush(self) -> HostTransfers:
        """The step's copies so far, then the write-through of the blocks named during it
        (host blocks taken now: no copy of this step reads them); starts the next step's."""
        copies, self.copies = self.copies, []
        writes = []
        entries = self.entries
        for b, h in self.pending.items():
            if h in entries:
                entries.move_to_end(h)
                continue
            slot = self._room()
            if slot is None:
                self.dropped_blocks += 1
                continue
            entries[h] = slot
            writes.append(HostCopy(True, b, slot))
        self.written_through_blocks += len(writes)
        self.pending = {}
        return HostTransfers(copies, writes)

    def _room(self) -> int | None:
        """A host block for new content: a never-used one, else the least recently used
        entry's that is not pinned (evicted now); None when every entry is pinned."""
        if self._fresh < self.capacity_blocks:
            self._fresh += 1
            return self._fresh - 1
        pinned, entries = self.pinned, self.entries
        if not pinned and entries:  # the common case: the head goes
            self.evicted_blocks += 1
            return entries.popitem(last=False)[1]
        for h in entries:
            if h not in pinned:
                self.evicted_blocks += 1
                return entries.pop(h)
        return None

    # -------------------------------------------------------------- pictures
    def describe(self) -> dict:
        """The tier as plain data: entries (hash, host block) least recently used first,
        the never-used host blocks, and the GPU blocks waiting to be written through."""
        return {"capacity_blocks": self.capacity_blocks, "entries": list(self.entries.items()),
                "free": list(self.free), "pending": sorted(self.pending.items()),
                "copies": list(self.copies)}

    def check(self) -> None:
        """Assert the entries and the free host blocks partition the tier (in time and
        memory of the entries, not of the capacity: the never-used blocks are a range)."""
        used = list(self.entries.values())
        assert 0 <= self._fresh <= self.capacity_blocks, "next never-used block out of range"
        assert len(used) <= self.capacity_blocks, "more host entries than host blocks"
        assert len(set(used)) == len(used), "two hashes in one host block"
        assert all(0 <= s < self._fresh for s in used), "a host block is both used and free"
        assert len(used) + len(self.free) == self.capacity_blocks, "host blocks lost"
        assert not self.pinned, f"host entries {sorted(self.pinned)} left pinned"
