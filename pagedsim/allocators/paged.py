"""PagedAttention's block manager: fixed-size blocks, block tables, reference counts.

The KV pool is ``num_blocks`` blocks of ``block_size`` token slots. A sequence owns
a *block table*: its i-th token lives in slot ``table[i // block_size] * block_size
+ i % block_size``. Blocks need not be consecutive, so any free block serves any
sequence (no external fragmentation), and a sequence wastes at most the unused tail
of its last block.

``fork`` lets a child share every block of its parent (ref counts + 1, nothing
copied). A sequence that appends into a block whose ref count is above 1 first gets
a private copy of that block (copy-on-write): only that one block is copied, and
only while it is shared.

Hot paths (``append_slot``, ``allocate``, ``free``) are kept lean on purpose: the
simulator calls them millions of times. Names follow vLLM and nano-vllm
(``block_table``, ``ref_count``, ``can_allocate``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from ..accounting import final_tokens, split_slots
from ..errors import OutOfMemoryError
from ..validate import check_int
from .base import AppendResult, KVCopy, SeqId, SlotUsage, SwappedGroup


class _Seq:
    """One sequence: its block table and how many tokens it holds."""

    __slots__ = ("table", "num_tokens", "final_len")

    def __init__(self, table: list[int], num_tokens: int, final_len: int | None) -> None:
        self.table = table
        self.num_tokens = num_tokens
        self.final_len = final_len  # true final length (prompt + output), for accounting


class PagedAllocator:
    """A pool of ``num_blocks`` blocks of ``block_size`` token slots each."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        self.capacity_slots = self.num_blocks * self.block_size
        self.kernel_block_slots: int | None = self.block_size  # read through block tables
        # Free list used as a stack; reversed so the first allocations get blocks 0, 1, 2...
        self._free: list[int] = list(range(self.num_blocks - 1, -1, -1))
        self._ref: list[int] = [0] * self.num_blocks
        self._seqs: dict[SeqId, _Seq] = {}
        self._num_shared_blocks = 0  # blocks with ref count > 1 (accounting's slow path)
        self._num_logical_blocks = 0  # sum of block-table lengths
        #: Called as ``on_release(start_slot, num_slots)`` for every block that returns to
        #: the free list, so a real cache can scrub it (see ``pagedsim.kernels.executor``).
        self.on_release: Callable[[int, int], None] | None = None
        self._swap_token = object()  # marks the groups this allocator swapped out
        self.evicted_blocks = 0  # no prefix cache: nothing is ever evicted

    # ----------------------------------------------------------------- queries
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def num_shared_blocks(self) -> int:
        return self._num_shared_blocks

    @property
    def num_seqs(self) -> int:
        return len(self._seqs)

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._seqs

    def seq_ids(self) -> Iterator[SeqId]:
        return iter(self._seqs)

    def _get(self, seq_id: SeqId) -> _Seq:
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None

    def block_table(self, seq_id: SeqId) -> list[int]:
        """A copy of the sequence's block table (physical block ids, in token order)."""
        return list(self._get(seq_id).table)

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    def seq_len(self, seq_id: SeqId) -> int:
        return self._get(seq_id).num_tokens

    def final_len(self, seq_id: SeqId) -> int | None:
        return self._get(seq_id).final_len

    def slot_of(self, seq_id: SeqId, index: int) -> int:
        seq = self._get(seq_id)
        if not 0 <= index < seq.num_tokens:
            raise ValueError(
                f"token index {index!r} out of range for sequence {seq_id!r} "
                f"of {seq.num_tokens} tokens"
            )
        bs = self.block_size
        return seq.table[index // bs] * bs + index % bs

    def slot_mapping(self, seq_id: SeqId, start: int = 0, end: int | None = None) -> list[int]:
        seq = self._get(seq_id)
        end = seq.num_tokens if end is None else end
        if not 0 <= start <= end <= seq.num_tokens:
            raise ValueError(
                f"token range [{start}, {end}) out of range for sequence {seq_id!r} "
                f"of {seq.num_tokens} tokens"
            )
        bs, table = self.block_size, seq.table
        return [table[i // bs] * bs + i % bs for i in range(start, end)]

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks a ``num_tokens``-token prompt occupies."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        return -(-num_tokens // self.block_size)

    def slots_needed(self, num_tokens: int, final_len: int | None = None) -> int:
        return self.blocks_needed(num_tokens) * self.block_size

    def can_allocate(self, num_tokens: int, final_len: int | None = None) -> bool:
        return self.blocks_needed(num_tokens) <= len(self._free)

    def can_append(self, seq_id: SeqId) -> bool:
        seq = self._get(seq_id)
        if seq.num_tokens % self.block_size and self._ref[seq.table[-1]] == 1:
            return True  # room in a private last block
        return bool(self._free)

    def append_blocks_needed(self, seq_ids: Iterable[SeqId]) -> int:
        """New blocks that one append to each of ``seq_ids`` (in order) would take.

        Exact for sharers: when all k sharers of a last block append, the first k-1
        copy it and the last one finds it private again and writes in place.
        """
        bs, ref = self.block_size, self._ref
        needed = 0
        shared_last: Counter[int] = Counter()
        for seq_id in seq_ids:
            seq = self._get(seq_id)
            if seq.num_tokens % bs == 0:
                needed += 1
            elif ref[seq.table[-1]] > 1:
                shared_last[seq.table[-1]] += 1
        for block, k in shared_last.items():
            needed += k - 1 if k == ref[block] else k
        return needed

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        """Whether ``num_tokens`` more tokens fit (a shared partial last block is copied)."""
        seq = self._get(seq_id)
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        n, bs = seq.num_tokens, self.block_size
        need = -(-(n + num_tokens) // bs) - len(seq.table)
        if num_tokens and n % bs and self._ref[seq.table[-1]] > 1:
            need += 1  # copy-on-write of the shared last block
        return need <= len(self._free)

    def extend(self, seq_id: SeqId, num_tokens: int) -> list[KVCopy]:
        """Room for ``num_tokens`` more tokens, or OutOfMemoryError and nothing changed."""
        if not self.can_extend(seq_id, num_tokens):
            raise OutOfMemoryError(f"no room for {num_tokens} more tokens of sequence "
                                   f"{seq_id!r} ({len(self._free)} free blocks)")
        copies = []
        for _ in range(num_tokens):
            _, copy = self.append_slot(seq_id)
            if copy is not None:
                copies.append(copy)
        return copies

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        return self.append_blocks_needed(seq_ids) <= len(self._free)

    def _check_new_ids(self, seq_ids: Sequence[SeqId]) -> None:
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"duplicate sequence ids in {tuple(seq_ids)!r}")
        clash = [s for s in seq_ids if s in self._seqs]
        if clash:
            raise ValueError(f"sequence ids {clash!r} already exist")

    def watermark_blocks(self, watermark: float) -> int:
        """Blocks kept free at admission for a ``watermark`` fraction (as vLLM v0)."""
        if not 0 <= watermark < 1:
            raise ValueError(f"watermark must be in [0, 1), got {watermark!r}")
        return int(watermark * self.num_blocks)

    def lookup_prefix(self, content: object, num_tokens: int, seq_id: SeqId) -> int:
        """0: no prefix cache (see ``PrefixCachingAllocator``)."""
        return 0

    def prefix_hit_tokens(self, seq_id: SeqId) -> int:
        """0: no prefix cache."""
        return 0

    # -------------------------------------------------------------- mutations
    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, content: object = None) -> bool:
        """Blocks for each of ``seq_ids`` (``num_tokens`` tokens each), keeping
        ``watermark`` of the blocks free; False (nothing changed) when they do not fit.
        Forked children need no room held: they share their parent's blocks."""
        self._check_new_ids([*seq_ids, *fork_ids])
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        need = -(-num_tokens // self.block_size) * len(seq_ids)
        if len(self._free) - need < self.watermark_blocks(watermark):
            return False
        for seq_id in seq_ids:
            self.allocate(seq_id, num_tokens, final_len)
        return True

    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None) -> None:
        """Blocks for a new ``num_tokens``-token prompt (``final_len`` kept for accounting)."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence id {seq_id!r} already exists")
        if type(num_tokens) is not int:
            num_tokens = check_int("num_tokens", num_tokens)
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        if final_len is not None:
            if type(final_len) is not int:
                final_len = check_int("final_len", final_len)
            if final_len < num_tokens:
                raise ValueError(
                    f"final_len ({final_len}) must be >= num_tokens ({num_tokens})"
                )
        n = -(-num_tokens // self.block_size)
        free = self._free
        if n > len(free):
            raise OutOfMemoryError(
                f"sequence {seq_id!r} needs {n} blocks for {num_tokens} tokens, "
                f"{len(free)} free"
            )
        if n:
            table = free[-n:]
            table.reverse()
            del free[-n:]
        else:
            table = []
        ref = self._ref
        for b in table:
            ref[b] = 1
        self._seqs[seq_id] = _Seq(table, num_tokens, final_len)
        self._num_logical_blocks += n

    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one new token: ``(slot, copy)``; ``copy`` is the copy-on-write
        copy of the shared last block to carry out before writing, or None."""
        try:
            seq = self._seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None
        n = seq.num_tokens
        bs = self.block_size
        offset = n % bs
        if offset == 0:  # last block full (or no block yet): take a fresh one
            if not self._free:
                raise OutOfMemoryError(f"no free block for sequence {seq_id!r}")
            block = self._free.pop()
            self._ref[block] = 1
            seq.table.append(block)
            seq.num_tokens = n + 1
            self._num_logical_blocks += 1
            return block * bs, None
        table = seq.table
        block = table[-1]
        ref = self._ref
        if ref[block] == 1:
            seq.num_tokens = n + 1
            return block * bs + offset, None
        # Copy-on-write: the last block is shared; give this sequence its own copy.
        if not self._free:
            raise OutOfMemoryError(
                f"no free block for the copy-on-write of sequence {seq_id!r}"
            )
        new = self._free.pop()
        ref[new] = 1
        ref[block] -= 1
        if ref[block] == 1:
            self._num_shared_blocks -= 1
        table[-1] = new
        seq.num_tokens = n + 1
        return new * bs + offset, KVCopy(block * bs, new * bs, offset)

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` shares every block of ``parent_id``; nothing is copied now."""
        parent = self._get(parent_id)
        if child_id in self._seqs:
            raise ValueError(f"sequence id {child_id!r} already exists")
        ref = self._ref
        for b in parent.table:
            ref[b] += 1
            if ref[b] == 2:
                self._num_shared_blocks += 1
        self._seqs[child_id] = _Seq(list(parent.table), parent.num_tokens, parent.final_len)
        self._num_logical_blocks += len(parent.table)
        return []

    def _pop_seq(self, seq_id: SeqId) -> _Seq:
        """Remove and return a sequence's record (the first step of every ``free``)."""
        try:
            return self._seqs.pop(seq_id)
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown sequence id {seq_id!r} (never allocated, or already freed)"
            ) from None

    def _check_swap_in(self, group: SwappedGroup) -> int:
        """Blocks ``group`` needs back, after checking it may return here and that none
        of its ids is live (the common checks of every paged ``swap_in``)."""
        group.check_can_return_to(self._swap_token)
        clash = [s for s in group.seq_ids if s in self._seqs]
        if clash:
            raise ValueError(f"sequence ids {clash!r} already exist")
        return group.state["num_blocks"]

    def free(self, seq_id: SeqId) -> None:
        """Drop the sequence; blocks whose ref count reaches 0 return to the free list."""
        seq = self._pop_seq(seq_id)
        ref, free = self._ref, self._free
        table = seq.table
        hook = self.on_release
        # Walk backwards so a prompt freed and re-allocated gets the same blocks back.
        for i in range(len(table) - 1, -1, -1):
            b = table[i]
            r = ref[b] - 1
            ref[b] = r
            if r == 0:
                free.append(b)
                if hook is not None:
                    hook(b * self.block_size, self.block_size)
            elif r == 1:
                self._num_shared_blocks -= 1
        self._num_logical_blocks -= len(table)

    # --------------------------------------------------------------- swapping
    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """Move ``seq_ids`` to a CPU buffer, keeping their sharing: a block shared by
        several of them is copied out once. Their GPU blocks are released."""
        seq_ids = tuple(seq_ids)
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"duplicate sequence ids in {seq_ids!r}")
        seqs = [self._get(s) for s in seq_ids]
        bs = self.block_size
        local: dict[int, int] = {}  # GPU block -> index in the CPU buffer (in blocks)
        tables = []
        for seq in seqs:
            tables.append([local.setdefault(b, len(local)) for b in seq.table])
        out = [KVCopy(b * bs, i * bs, bs) for b, i in local.items()]
        meta = [(seq.num_tokens, seq.final_len) for seq in seqs]
        for s in seq_ids:
            self.free(s)
        return SwappedGroup(
            seq_ids=seq_ids,
            cpu_slots=len(local) * bs,
            out_copies=out,
            state={"tables": tables, "meta": meta, "num_blocks": len(local)},
            owner=self._swap_token,
        )

    def swap_out_slots(self, seq_ids: Iterable[SeqId]) -> int:
        """CPU slots a swap-out would take: every distinct block once."""
        blocks = {b for s in seq_ids for b in self._get(s).table}
        return len(blocks) * self.block_size

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        """Whether the group's blocks fit and leave ``watermark`` of the blocks free."""
        group.check_can_return_to(self._swap_token)
        need = group.state["num_blocks"]
        return len(self._free) - need >= self.watermark_blocks(watermark)

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Bring a swapped group back into fresh blocks (all or nothing)."""
        n = self._check_swap_in(group)
        if n > len(self._free):
            raise OutOfMemoryError(f"swap-in needs {n} blocks, {len(self._free)} free")
        new_blocks = [self._free.pop() for _ in range(n)]
        ref = self._ref
        for seq_id, table, (num_tokens, final_len) in zip(
            group.seq_ids, group.state["tables"], group.state["meta"], strict=True
        ):
            phys = [new_blocks[i] for i in table]
            for b in phys:
                ref[b] += 1
                if ref[b] == 2:
                    self._num_shared_blocks += 1
            self._seqs[seq_id] = _Seq(phys, num_tokens, final_len)
            self._num_logical_blocks += len(phys)
        group.swapped_in = True
        bs = self.block_size
        return [KVCopy(i * bs, b * bs, bs) for i, b in enumerate(new_blocks)]

    # ------------------------------------------------------------- accounting
    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """Split the allocated slots into token / reserved / internal fragmentation.

        A block's future fill is what its owner(s) will have written into it when they
        finish, from each sequence's final length (``final_lens``, else the ``final_len``
        given at allocation; a sequence with neither is taken as finished). A shared
        block counts once, with the largest future among its sharers.
        """
        bs = self.block_size
        token = reserved = 0
        fl = final_lens or {}
        if self._num_shared_blocks == 0:  # fast path: every block has one owner
            for seq_id, seq in self._seqs.items():
                n = seq.num_tokens
                final = final_tokens(n, fl.get(seq_id, seq.final_len) if fl else seq.final_len)
                t, r, _ = split_slots(n, final, len(seq.table) * bs)
                token += t
                reserved += r
        else:
            seen: dict[int, tuple[int, int]] = {}  # shared block -> (fill, future fill)
            for seq_id, seq in self._seqs.items():
                n = seq.num_tokens
                final = final_tokens(n, fl.get(seq_id, seq.final_len) if fl else seq.final_len)
                for j, b in enumerate(seq.table):
                    fill = min(bs, n - j * bs)
                    future = min(bs, final - j * bs)
                    if self._ref[b] == 1:
                        token += fill
                        reserved += future - fill
                    else:
                        old = seen.get(b)
                        if old is None or future > old[1]:
                            seen[b] = (fill, future)
            for fill, future in seen.values():
                t, r, _ = split_slots(fill, future, bs)
                token += t
                reserved += r
        used_slots = (self.num_blocks - len(self._free)) * bs
        return SlotUsage(
            token_slots=token,
            reserved_slots=reserved,
            internal_frag_slots=used_slots - token - reserved,
            physical_blocks=self.num_blocks - len(self._free),
            logical_blocks=self._num_logical_blocks,
        )

    @property
    def num_free_slots(self) -> int:
        return len(self._free) * self.block_size

    def external_frag_slots(self, need_slots: int | None) -> int:
        """Always 0: any free block serves any sequence."""
        return 0

    def snapshot(self) -> dict:
        """The whole state as plain data (for pictures, step-through recorders and tests)."""
        return {
            "kind": "paged",
            "view": "blocks",
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "free_blocks": list(self._free),
            "ref_counts": list(self._ref),
            "seqs": {
                sid: {"block_table": list(s.table), "num_tokens": s.num_tokens,
                      "final_len": s.final_len}
                for sid, s in self._seqs.items()
            },
        }

    # ------------------------------------------------------------- invariants
    def _referenced_blocks(self) -> Counter[int]:
        """How many references each used block has (block tables; subclasses add theirs)."""
        return Counter(b for seq in self._seqs.values() for b in seq.table)

    def check_invariants(self) -> None:
        """Assert the bookkeeping is consistent (used by the property tests)."""
        free = self._free
        assert len(set(free)) == len(free), "a block is on the free list twice"
        assert all(0 <= b < self.num_blocks for b in free), "free list holds an unknown block"
        counts = self._referenced_blocks()
        free_set = set(free)
        for b in range(self.num_blocks):
            assert (b in free_set) != (counts[b] > 0), f"block {b} is neither free xor referenced"
            assert self._ref[b] == counts[b], (
                f"block {b}: ref count {self._ref[b]} != {counts[b]} table entries"
            )
        assert len(free) + len(counts) == self.num_blocks, "free + used != total"
        assert self._num_shared_blocks == sum(1 for c in counts.values() if c > 1)
        assert self._num_logical_blocks == sum(len(s.table) for s in self._seqs.values())
        for seq_id, seq in self._seqs.items():
            assert len(seq.table) == -(-seq.num_tokens // self.block_size), (
                f"sequence {seq_id!r}: {len(seq.table)} blocks for {seq.num_tokens} tokens"
            )
