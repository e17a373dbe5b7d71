"""vAttention (Prabhu et al., ASPLOS'25): virtual contiguity, physical pages on demand.

Each request owns a *virtual* region of ``max_model_len`` tokens in every layer's K and
V tensor. Reserving address space costs no physical memory, but the number of regions
is fixed when the engine starts (``max_regions``, vAttention's max batch size), which
caps concurrency. Physical memory is mapped into a region on demand, one page at a
time; a growth step maps the same page index in every layer's tensors (K and V, or an
MLA layer's one latent tensor), so in token slots a page is ``page_tokens = page_bytes /
row`` slots, a row being one token's bytes in one tensor: ``num_kv_heads x head_dim x
dtype_bytes`` for K or V (Llama-3-8B in fp16: 1,024 tokens per 2 MiB page, 32 per 64 KiB),
the latent's ``(kv_lora_rank + qk_rope_head_dim) x dtype_bytes`` for MLA (DeepSeek-V3 in
bf16: 1,820 tokens per 2 MiB page).

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

:class:`VAttentionAllocator` is its own class over the same block manager: it *composes*
a :class:`~.block_manager.BlockManager` whose blocks are pages (``blocks``), adds what
vAttention changes (the cap on regions, their length, forks that copy, held pages) in its
own methods, and hands everything else to ``blocks``. The block manager itself knows
nothing of regions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..errors import OutOfMemoryError
from ..models.specs import ModelSpec
from ..validate import check_int
from .accounting import final_tokens, split_slots
from .base import (
    AppendResult,
    KVCopy,
    SeqId,
    SlotUsage,
    SwappedGroup,
    check_new_ids,
    checked_admission,
    distinct_ids,
)
from .block_manager import BlockManager
from .block_seq import Seq
from .free_list import FreeList

#: Page sizes by scheme-name suffix: 2 MiB (the GPU's large page, vAttention's default)
#: and 64 KiB (its small-page option).
PAGE_BYTES_OPTIONS: dict[str, int] = {"": 2 * 1024 * 1024, "-64k": 64 * 1024}


def row_bytes_for(model: ModelSpec) -> int:
    """One token's bytes in one of a layer's cache tensors (bytes), from the model's
    per-layer KV spec: a full or sliding layer's K (or V) row is half its bytes per token,
    an MLA layer keeps one latent tensor, its whole bytes per token. Layers of different
    rows: the widest (the page that fills first sets how far a growth step maps)."""
    rows = [layer.bytes_per_token(model.dtype_bytes) // (1 if layer.kind == "mla" else 2)
            for layer in model.kv_layers if layer.bytes_per_token(model.dtype_bytes)]
    if not rows:
        raise ValueError(f"{model.name} keeps no KV per token: vAttention has nothing to map")
    return max(rows)


def page_tokens_for(model: ModelSpec, page_bytes: int) -> int:
    """Tokens one page holds: ``page_bytes`` over one token's row in one layer's tensor
    (:func:`row_bytes_for`)."""
    row_bytes = row_bytes_for(model)
    page_bytes = check_int("page_bytes", page_bytes, minimum=1)
    if page_bytes < row_bytes:
        raise ValueError(f"a page of {page_bytes} bytes holds no token of {model.name} "
                         f"({row_bytes} bytes per token per layer and tensor)")
    return page_bytes // row_bytes


class VAttentionAllocator:
    """``num_pages`` physical pages of ``page_tokens`` slots (the block manager's blocks),
    at most ``max_regions`` requests (virtual regions of ``max_model_len`` tokens) at
    once. Forks copy, into pages held for them from admission; everything else is the
    composed block manager's (``blocks``), which every attribute not defined here reads."""

    def __init__(self, num_pages: int, page_tokens: int, max_model_len: int = 2048,
                 max_regions: int = 256) -> None:
        self.blocks = BlockManager(FreeList(num_pages, page_tokens), kind="vattention")
        self.max_model_len = check_int("max_model_len", max_model_len, minimum=1)
        self.max_regions = check_int("max_regions", max_regions, minimum=1)
        self.page_tokens = self.blocks.block_size
        self.kind = "vattention"
        #: The attention kernel reads one virtually contiguous region, no block table.
        self.kernel_block_slots: int | None = None
        # Pages held for samples to be forked: child -> (pages, final_len).
        self.held: dict[SeqId, tuple[list[int], int | None]] = {}

    def __getattr__(self, name: str):
        # Only called for what this class does not define: the block manager's.
        if name == "blocks" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.blocks, name)

    @property
    def on_release(self):
        return self.blocks.on_release

    @on_release.setter
    def on_release(self, hook) -> None:
        self.blocks.on_release = hook

    # ------------------------------------------------------------- admission
    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, block_hashes: object = None) -> bool:
        """A region and pages for each of ``seq_ids``, and pages held for each of
        ``fork_ids`` (their forks copy into them, so they cannot fail); False, and nothing
        changed, when the regions or the pages run out."""
        blocks = self.blocks
        num_tokens, _ = checked_admission(seq_ids, fork_ids, num_tokens, final_len, block_hashes,
                                          self.__contains__, blocks.is_swapped_out, None)
        if num_tokens > self.max_model_len:
            raise ValueError(f"num_tokens ({num_tokens}) exceeds the virtual region of "
                             f"max_model_len ({self.max_model_len}) tokens")
        if self.num_seqs + len(seq_ids) + len(fork_ids) > self.max_regions:
            return False
        n = -(-num_tokens // blocks.block_size)
        need = n * (len(seq_ids) + len(fork_ids))
        if blocks.pool.get_num_free_blocks() - need < blocks.watermark_blocks(watermark):
            return False
        admitted = blocks.allocate_group(seq_ids, num_tokens, final_len, watermark=watermark)
        assert admitted, "the pages were counted above"
        for child in fork_ids:
            self.held[child] = (blocks.refs.take(n), final_len)
        return True

    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None,
                 block_hashes: object = None) -> None:
        """A region for one new sequence; ``OutOfMemoryError`` saying why (no region, or
        no pages), and nothing changed, when it does not fit."""
        if not self.allocate_group([seq_id], num_tokens, final_len, block_hashes=block_hashes):
            if self.num_seqs >= self.max_regions:
                raise OutOfMemoryError(f"all {self.max_regions} virtual regions are in use")
            raise OutOfMemoryError(f"sequence {seq_id!r} needs "
                                   f"{self.blocks.blocks_needed(num_tokens)} blocks for "
                                   f"{num_tokens} tokens, {self.blocks.pool.describe_free()}")

    # --------------------------------------------------------------- growing
    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one new token, but never past the end of the sequence's region."""
        n = self.blocks.seq_len(seq_id)
        if n >= self.max_model_len:
            raise OutOfMemoryError(f"sequence {seq_id!r} fills its virtual region of "
                                   f"max_model_len ({self.max_model_len}) tokens")
        return self.blocks.append_slot(seq_id)

    def extend(self, seq_id: SeqId, num_tokens: int) -> list[KVCopy]:
        """Room for ``num_tokens`` more tokens (a prefill chunk), all or nothing."""
        if not self.can_extend(seq_id, num_tokens):
            raise OutOfMemoryError(f"no room for {num_tokens} more tokens of sequence "
                                   f"{seq_id!r} ({self.blocks.pool.get_num_free_blocks()} "
                                   "free blocks)")
        return self.blocks.extend(seq_id, num_tokens)

    # ----------------------------------------------------------------- forks
    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """The child gets pages of its own (those held for it, if any) and a copy of the
        parent's tokens, page by page: no block table could share a page. Checked first:
        a failed fork changes nothing."""
        blocks = self.blocks
        blocks.seq_len(parent_id)  # refused: not a running sequence
        parent = blocks.seqs[parent_id]
        check_new_ids([child_id], blocks.__contains__, blocks.is_swapped_out)
        n, pt = parent.num_tokens, blocks.block_size
        pages = -(-n // pt)
        held = self.held.get(child_id, ([], None))[0]
        free = blocks.pool.get_num_free_blocks()
        if pages > free + len(held):
            raise OutOfMemoryError(f"fork of {parent_id!r} needs {pages} pages, "
                                   f"{free + len(held)} free or held")
        if child_id in self.held:
            del self.held[child_id]  # its pages are mapped again at once, below
            table = held[:pages] + blocks.refs.take(max(pages - len(held), 0))
            if len(held) > pages:
                blocks.refs.release(held[pages:])
        elif self.num_seqs >= self.max_regions:
            raise OutOfMemoryError(f"all {self.max_regions} virtual regions are in use")
        else:
            table = blocks.refs.take(pages)
        # final_len may be stale (already passed), as the parent's
        blocks.add_seq(child_id, Seq(table, n, parent.final_len))
        return [KVCopy(src * pt, dst * pt, min(pt, n - i * pt))
                for i, (src, dst) in enumerate(zip(parent.table, table, strict=True))]

    # --------------------------------------------------------------- release
    def free(self, seq_id: SeqId) -> None:
        """Unmap a sequence's pages, or the pages held for a sample never forked."""
        if self._holds(seq_id):
            pages, _ = self.held.pop(seq_id)
            self.blocks.refs.release(pages)
            return
        self.blocks.free(seq_id)

    # -------------------------------------------------------------- swapping
    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        seq_ids = distinct_ids(seq_ids)
        held = [s for s in seq_ids if self._holds(s)]
        if held:
            raise ValueError(f"sequences {held!r} are held for a fork, not running")
        return self.blocks.swap_out(seq_ids)

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        return (self.blocks.can_swap_in(group, watermark)
                and self.num_seqs + len(group.seq_ids) <= self.max_regions)

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        if self.num_seqs + len(group.seq_ids) > self.max_regions:
            raise OutOfMemoryError(f"swap-in needs {len(group.seq_ids)} virtual regions, "
                                   f"{self.max_regions - self.num_seqs} free")
        return self.blocks.swap_in(group)

    # ------------------------------------------------------------------ room
    def can_append(self, seq_id: SeqId) -> bool:
        return (self.blocks.seq_len(seq_id) < self.max_model_len
                and self.blocks.can_append(seq_id))

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        seq_ids = list(seq_ids)
        distinct_ids(seq_ids)  # refused: a repeat (a second append is another count)
        lengths = [self.blocks.seq_len(s) for s in seq_ids]  # refused: an unknown id
        if any(n >= self.max_model_len for n in lengths):
            return False
        return self.blocks.can_append_all(seq_ids)

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        n = self.blocks.seq_len(seq_id)
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        return n + num_tokens <= self.max_model_len and self.blocks.can_extend(seq_id,
                                                                               num_tokens)

    # --------------------------------------------------------------- lookups
    @property
    def num_seqs(self) -> int:
        """Sequences and rooms held for forks: each takes a virtual region."""
        return len(self.blocks.seqs) + len(self.held)

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self.blocks or self._holds(seq_id)

    def _holds(self, seq_id: object) -> bool:
        try:
            return seq_id in self.held
        except TypeError:
            return False

    def _held_pages(self) -> list[int]:
        return [p for pages, _ in self.held.values() for p in pages]

    # ----------------------------------------------------- the accounting's view
    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """The block manager's split, plus the held pages: reserved up to the sample's
        final length (its fork fills them), internal fragmentation beyond."""
        held = self._held_pages()
        base = self.blocks.usage(final_lens, outside_tables=held)
        pt = self.blocks.block_size
        reserved = base.reserved_slots
        for pages, final_len in self.held.values():
            _, r, _ = split_slots(0, final_tokens(0, final_len), len(pages) * pt)
            reserved += r
        physical = base.physical_blocks + len(held)
        return SlotUsage(base.token_slots, reserved, physical * pt - base.token_slots - reserved,
                         physical, base.logical_blocks + len(held))

    def snapshot(self) -> dict:
        """The block manager's snapshot, the region limits, and the held pages (as
        sequences of 0 tokens)."""
        snap = self.blocks.snapshot()
        snap.update(page_tokens=snap["block_size"], max_model_len=self.max_model_len,
                    max_regions=self.max_regions)
        for child, (pages, final_len) in self.held.items():
            snap["seqs"][child] = {"block_table": list(pages), "num_tokens": 0,
                                   "final_len": final_len}
        return snap

    def check_invariants(self) -> None:
        blocks = self.blocks
        blocks.check_invariants(outside_tables=self._held_pages())
        assert all(r <= 1 for r in blocks.refs.counts), "a vAttention page is mapped twice"
        assert self.num_seqs <= self.max_regions, "more requests than virtual regions"
        assert not set(self.held) & set(blocks.seqs), "a held sample is also running"
        for seq_id, seq in blocks.seqs.items():
            assert seq.num_tokens <= self.max_model_len, f"{seq_id!r} overflows its region"


def vattention_for_model(capacity_slots: int, model: ModelSpec, page_bytes: int = 2 << 20,
                         max_model_len: int = 2048, max_regions: int = 256
                         ) -> VAttentionAllocator:
    """A vAttention pool of ``capacity_slots`` token slots cut into pages of
    ``page_bytes`` per layer and cache tensor (K, V, or an MLA latent) of ``model``."""
    page_tokens = page_tokens_for(model, page_bytes)
    num_pages = check_int("capacity_slots", capacity_slots, minimum=1) // page_tokens
    if num_pages < 1:
        raise ValueError(f"a pool of {capacity_slots} slots holds no page of "
                         f"{page_tokens} tokens ({page_bytes} bytes of {model.name})")
    return VAttentionAllocator(num_pages, page_tokens, max_model_len, max_regions)
