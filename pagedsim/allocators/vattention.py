"""vAttention (Prabhu et al., ASPLOS'25): virtual contiguity, physical pages on demand.

Each request owns a *virtual* region of ``max_model_len`` tokens in every layer's K and
V tensor. Reserving address space costs no physical memory, but the number of regions
is fixed when the engine starts (``max_regions``, vAttention's max batch size), which
caps concurrency. Physical memory is mapped into a region on demand, one page at a
time; a growth step maps the same page index in all ``2 x num_layers`` tensors, so in
token slots a page is ``page_tokens = page_bytes / (num_kv_heads x head_dim x
dtype_bytes)`` slots (Llama-3-8B in fp16: 1,024 tokens per 2 MiB page, 32 per 64 KiB).

For memory this is paging with very large pages and no sharing: any free page serves
any request (no external fragmentation), the unfilled tail of a request's last page is
internal fragmentation, and a fork copies the parent's pages (there is no block table
through which two requests could map one page). Pages mapped for a forked sample are
held from admission (counted as reserved) so that the fork cannot fail. vAttention
leaves a finished request's pages mapped until they are reclaimed, to save remapping;
such pages hold nothing a new request can use except as fresh room, so they count as
free, and this model returns them to the free pool at once.

On the kernel side a request's tokens are one contiguous virtual tensor: the attention
kernel needs no block table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from ..accounting import final_tokens, split_slots
from ..errors import OutOfMemoryError
from ..specs import ModelSpec
from ..validate import check_int
from .base import AppendResult, KVCopy, SeqId, SlotUsage, SwappedGroup
from .paged import PagedAllocator

#: Page sizes by scheme-name suffix: 2 MiB (the GPU's large page, vAttention's default)
#: and 64 KiB (its small-page option).
PAGE_BYTES_OPTIONS: dict[str, int] = {"": 2 * 1024 * 1024, "-64k": 64 * 1024}


def page_tokens_for(model: ModelSpec, page_bytes: int) -> int:
    """Tokens one page holds: ``page_bytes`` over one token's K (or V) row in one layer."""
    row_bytes = model.num_kv_heads * model.head_dim * model.dtype_bytes
    page_bytes = check_int("page_bytes", page_bytes, minimum=1)
    if page_bytes < row_bytes:
        raise ValueError(f"a page of {page_bytes} bytes holds no token of {model.name} "
                         f"({row_bytes} bytes per token per layer and K/V tensor)")
    return page_bytes // row_bytes


class VAttentionAllocator(PagedAllocator):
    """``num_pages`` physical pages of ``page_tokens`` slots, at most ``max_regions``
    requests (virtual regions of ``max_model_len`` tokens) at once."""

    def __init__(self, num_pages: int, page_tokens: int, max_model_len: int = 2048,
                 max_regions: int = 256) -> None:
        super().__init__(num_pages, page_tokens)
        self.page_tokens = self.block_size
        self.kernel_block_slots = None  # the kernel reads a virtually contiguous tensor
        self.max_model_len = check_int("max_model_len", max_model_len, minimum=1)
        self.max_regions = check_int("max_regions", max_regions, minimum=1)
        # Pages held for samples to be forked: child -> (pages, final_len).
        self._held: dict[SeqId, tuple[list[int], int | None]] = {}

    @classmethod
    def for_model(cls, capacity_slots: int, model: ModelSpec, page_bytes: int = 2 << 20,
                  max_model_len: int = 2048, max_regions: int = 256) -> VAttentionAllocator:
        """A pool of ``capacity_slots`` token slots cut into pages of ``page_bytes`` per
        layer and K/V tensor of ``model``."""
        page_tokens = page_tokens_for(model, page_bytes)
        num_pages = check_int("capacity_slots", capacity_slots, minimum=1) // page_tokens
        if num_pages < 1:
            raise ValueError(f"a pool of {capacity_slots} slots holds no page of "
                             f"{page_tokens} tokens ({page_bytes} bytes of {model.name})")
        return cls(num_pages, page_tokens, max_model_len, max_regions)

    # ----------------------------------------------------------------- queries
    @property
    def num_seqs(self) -> int:
        """Regions in use: sequences plus samples whose pages are held."""
        return len(self._seqs) + len(self._held)

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._seqs or seq_id in self._held

    def _check_fits_region(self, num_tokens: int) -> None:
        if num_tokens > self.max_model_len:
            raise ValueError(f"num_tokens ({num_tokens}) exceeds the virtual region of "
                             f"max_model_len ({self.max_model_len}) tokens")

    # -------------------------------------------------------------- mutations
    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None) -> None:
        """Map pages for a new request's prompt in a free virtual region."""
        if seq_id in self._held or seq_id in self._seqs:
            raise ValueError(f"sequence id {seq_id!r} already exists")
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if final_len is not None and check_int("final_len", final_len) < num_tokens:
            raise ValueError(f"final_len ({final_len}) must be >= num_tokens ({num_tokens})")
        self._check_fits_region(num_tokens)
        if self.num_seqs >= self.max_regions:  # bad input is reported before a full pool
            raise OutOfMemoryError(f"all {self.max_regions} virtual regions are in use")
        super().allocate(seq_id, num_tokens, final_len)

    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, content: object = None) -> bool:
        """Regions and pages for ``seq_ids``, plus regions and the prompt's pages held for
        each of ``fork_ids`` (a fork copies, so its room must exist); all or nothing."""
        self._check_new_ids([*seq_ids, *fork_ids])
        clash = [s for s in (*seq_ids, *fork_ids) if s in self._held]
        if clash:
            raise ValueError(f"sequence ids {clash!r} already exist")
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        self._check_fits_region(num_tokens)
        width = len(seq_ids) + len(fork_ids)
        if self.num_seqs + width > self.max_regions:
            return False
        pages = -(-num_tokens // self.page_tokens)
        if len(self._free) - pages * width < self.watermark_blocks(watermark):
            return False
        for seq_id in seq_ids:
            super().allocate(seq_id, num_tokens, final_len)
        for child in fork_ids:
            held = [self._free.pop() for _ in range(pages)]
            for p in held:
                self._ref[p] = 1
            self._held[child] = (held, final_len)
        return True

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """The child gets pages of its own (those held for it, if any) and a copy of
        the parent's tokens, page by page."""
        parent = self._get(parent_id)
        if child_id in self._seqs:
            raise ValueError(f"sequence id {child_id!r} already exists")
        n, pt = parent.num_tokens, self.page_tokens
        held = len(self._held[child_id][0]) if child_id in self._held else 0
        if -(-n // pt) > len(self._free) + held:  # check first: a failed fork changes nothing
            raise OutOfMemoryError(f"fork of {parent_id!r} needs {-(-n // pt)} pages, "
                                   f"{len(self._free) + held} free or held")
        if child_id in self._held:
            self._release_held(child_id, report=False)  # mapped again at once below
        elif self.num_seqs >= self.max_regions:
            raise OutOfMemoryError(f"all {self.max_regions} virtual regions are in use")
        super().allocate(child_id, n)
        child = self._seqs[child_id]
        child.final_len = parent.final_len  # may be stale (already passed), as the parent's
        return [KVCopy(src * pt, dst * pt, min(pt, n - i * pt))
                for i, (src, dst) in enumerate(zip(parent.table, child.table, strict=True))]

    def _release_held(self, child_id: SeqId, report: bool) -> None:
        pages, _ = self._held.pop(child_id)
        for p in reversed(pages):
            self._ref[p] = 0
            self._free.append(p)
            if report and self.on_release is not None:
                self.on_release(p * self.page_tokens, self.page_tokens)

    def free(self, seq_id: SeqId) -> None:
        """Unmap the request's pages (or those held for a sample never forked)."""
        if seq_id in self._held:
            self._release_held(seq_id, report=True)
        else:
            super().free(seq_id)

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        """Whether the pages fit and the virtual region holds the longer sequence."""
        if not super().can_extend(seq_id, num_tokens):
            return False
        return self._get(seq_id).num_tokens + num_tokens <= self.max_model_len

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        seq_ids = list(seq_ids)
        if any(self._get(s).num_tokens >= self.max_model_len for s in seq_ids):
            return False
        return super().can_append_all(seq_ids)

    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one more token, within the request's virtual region."""
        if self._get(seq_id).num_tokens >= self.max_model_len:
            raise OutOfMemoryError(f"sequence {seq_id!r} fills its virtual region of "
                                   f"max_model_len ({self.max_model_len}) tokens")
        return super().append_slot(seq_id)

    # --------------------------------------------------------------- swapping
    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        if self.num_seqs + len(group.seq_ids) > self.max_regions:
            return False
        return super().can_swap_in(group, watermark)

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        if self.num_seqs + len(group.seq_ids) > self.max_regions:
            raise OutOfMemoryError(f"swap-in needs {len(group.seq_ids)} virtual regions, "
                                   f"{self.max_regions - self.num_seqs} free")
        return super().swap_in(group)

    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        seq_ids = tuple(seq_ids)
        held = [s for s in seq_ids if s in self._held]
        if held:
            raise ValueError(f"sequences {held!r} are held for a fork, not running")
        return super().swap_out(seq_ids)

    # ------------------------------------------------------------- accounting
    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """As paged blocks, plus held pages: reserved up to the sample's final length
        (its fork fills them), internal fragmentation beyond."""
        base = super().usage(final_lens)
        token, reserved = base.token_slots, base.reserved_slots
        for pages, final_len in self._held.values():
            _, r, _ = split_slots(0, final_tokens(0, final_len), len(pages) * self.page_tokens)
            reserved += r
        used = (self.num_blocks - len(self._free)) * self.page_tokens
        return SlotUsage(token, reserved, used - token - reserved, base.physical_blocks,
                         base.logical_blocks + sum(len(p) for p, _ in self._held.values()))

    def snapshot(self) -> dict:
        """The paged snapshot (pages as blocks), plus the held pages and region limits."""
        snap = super().snapshot()
        snap.update(kind="vattention", page_tokens=self.page_tokens,
                    max_model_len=self.max_model_len, max_regions=self.max_regions)
        for child, (pages, final_len) in self._held.items():
            snap["seqs"][child] = {"block_table": list(pages), "num_tokens": 0,
                                   "final_len": final_len}
        return snap

    def _referenced_blocks(self) -> Counter[int]:
        counts = super()._referenced_blocks()
        counts.update(p for pages, _ in self._held.values() for p in pages)
        return counts

    def check_invariants(self) -> None:
        super().check_invariants()
        assert all(r <= 1 for r in self._ref), "a vAttention page is mapped twice"
        assert self.num_seqs <= self.max_regions, "more requests than virtual regions"
        assert not set(self._held) & set(self._seqs), "a held sample is also running"
        for seq_id, seq in self._seqs.items():
            assert seq.num_tokens <= self.max_model_len, f"{seq_id!r} overflows its region"
