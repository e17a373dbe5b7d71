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
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import OutOfMemoryError
from ..models.specs import ModelSpec
from ..validate import check_int
from .accounting import final_tokens, split_slots
from .base import KVCopy, SeqId, SlotUsage
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


class Regions:
    """vAttention's virtual regions, composed into a block manager whose blocks are pages:
    at most ``max_regions`` sequences of at most ``max_model_len`` tokens, forks that copy
    (no block table could share a page), and the pages of a sample to be forked held from
    its admission so that the fork cannot fail."""

    def __init__(self, max_model_len: int, max_regions: int) -> None:
        self.max_model_len = check_int("max_model_len", max_model_len, minimum=1)
        self.max_regions = check_int("max_regions", max_regions, minimum=1)
        # Pages held for samples to be forked: child -> (pages, final_len).
        self.held: dict[SeqId, tuple[list[int], int | None]] = {}

    @property
    def num_held(self) -> int:
        return len(self.held)

    def holds(self, seq_id: object) -> bool:
        try:
            return seq_id in self.held
        except TypeError:
            return False

    def held_blocks(self) -> list[int]:
        return [p for pages, _ in self.held.values() for p in pages]

    # ------------------------------------------------------------- admission
    def check_fits(self, num_tokens: int) -> None:
        if num_tokens > self.max_model_len:
            raise ValueError(f"num_tokens ({num_tokens}) exceeds the virtual region of "
                             f"max_model_len ({self.max_model_len}) tokens")

    def refusal(self, mgr: BlockManager) -> str | None:
        """Why a lone allocation was refused, when no region was free for it."""
        if mgr.num_seqs >= self.max_regions:
            return f"all {self.max_regions} virtual regions are in use"
        return None

    def admits(self, mgr: BlockManager, seq_ids: Sequence[SeqId],
               fork_ids: Sequence[SeqId], num_tokens: int) -> bool:
        """Whether regions are free for the sequences and the samples to be forked."""
        self.check_fits(num_tokens)
        return mgr.num_seqs + len(seq_ids) + len(fork_ids) <= self.max_regions

    def hold(self, mgr: BlockManager, fork_ids: Sequence[SeqId], num_pages: int,
             final_len: int | None) -> None:
        """Map ``num_pages`` pages for each sample to be forked (room checked)."""
        for child in fork_ids:
            self.held[child] = (mgr.refs.take(num_pages), final_len)

    def check_room(self, seq_id: SeqId, num_tokens: int) -> None:
        """Refuse a token past the end of the sequence's region."""
        if num_tokens >= self.max_model_len:
            raise OutOfMemoryError(f"sequence {seq_id!r} fills its virtual region of "
                                   f"max_model_len ({self.max_model_len}) tokens")

    # ------------------------------------------------------------ forks
    def fork(self, mgr: BlockManager, parent_id: SeqId, parent: Seq,
             child_id: SeqId) -> list[KVCopy]:
        """The child gets pages of its own (those held for it, if any) and a copy of the
        parent's tokens, page by page. Checked first: a failed fork changes nothing."""
        n, pt = parent.num_tokens, mgr.block_size
        pages = -(-n // pt)
        held = self.held.get(child_id, ([], None))[0]
        free = mgr.pool.get_num_free_blocks()
        if pages > free + len(held):
            raise OutOfMemoryError(f"fork of {parent_id!r} needs {pages} pages, "
                                   f"{free + len(held)} free or held")
        if child_id in self.held:
            del self.held[child_id]  # its pages are mapped again at once, below
            table = held[:pages] + mgr.refs.take(max(pages - len(held), 0))
            if len(held) > pages:
                mgr.refs.release(held[pages:])
        elif mgr.num_seqs >= self.max_regions:
            raise OutOfMemoryError(f"all {self.max_regions} virtual regions are in use")
        else:
            table = mgr.refs.take(pages)
        # final_len may be stale (already passed), as the parent's
        mgr.add_seq(child_id, Seq(table, n, parent.final_len))
        return [KVCopy(src * pt, dst * pt, min(pt, n - i * pt))
                for i, (src, dst) in enumerate(zip(parent.table, table, strict=True))]

    def release_held(self, mgr: BlockManager, seq_id: SeqId) -> bool:
        """Unmap the pages held for a sample never forked; False if none are held."""
        if not self.holds(seq_id):
            return False
        pages, _ = self.held.pop(seq_id)
        mgr.refs.release(pages)
        return True

    # ---------------------------------------------------------- swapping
    def check_running(self, seq_ids: Sequence[SeqId]) -> None:
        held = [s for s in seq_ids if self.holds(s)]
        if held:
            raise ValueError(f"sequences {held!r} are held for a fork, not running")

    def has_room_for(self, mgr: BlockManager, seq_ids: Sequence[SeqId]) -> bool:
        return mgr.num_seqs + len(seq_ids) <= self.max_regions

    def check_room_for(self, mgr: BlockManager, seq_ids: Sequence[SeqId]) -> None:
        if not self.has_room_for(mgr, seq_ids):
            raise OutOfMemoryError(f"swap-in needs {len(seq_ids)} virtual regions, "
                                   f"{self.max_regions - mgr.num_seqs} free")

    # ------------------------------------------------------- accounting
    def usage(self, mgr: BlockManager, base: SlotUsage) -> SlotUsage:
        """Held pages are reserved up to the sample's final length (its fork fills them),
        internal fragmentation beyond."""
        pt = mgr.block_size
        reserved = base.reserved_slots
        for pages, final_len in self.held.values():
            _, r, _ = split_slots(0, final_tokens(0, final_len), len(pages) * pt)
            reserved += r
        physical = base.physical_blocks + sum(len(p) for p, _ in self.held.values())
        return SlotUsage(base.token_slots, reserved, physical * pt - base.token_slots - reserved,
                         physical,
                         base.logical_blocks + sum(len(p) for p, _ in self.held.values()))

    def snapshot(self, snap: dict) -> None:
        """Add the region limits and the held pages (as sequences of 0 tokens)."""
        snap.update(page_tokens=snap["block_size"], max_model_len=self.max_model_len,
                    max_regions=self.max_regions)
        for child, (pages, final_len) in self.held.items():
            snap["seqs"][child] = {"block_table": list(pages), "num_tokens": 0,
                                   "final_len": final_len}

    def check(self, mgr: BlockManager) -> None:
        assert all(r <= 1 for r in mgr.refs.counts), "a vAttention page is mapped twice"
        assert mgr.num_seqs <= self.max_regions, "more requests than virtual regions"
        assert not set(self.held) & set(mgr.seqs), "a held sample is also running"
        for seq_id, seq in mgr.seqs.items():
            assert seq.num_tokens <= self.max_model_len, f"{seq_id!r} overflows its region"


def VAttentionAllocator(num_pages: int, page_tokens: int,  # noqa: N802
                        max_model_len: int = 2048, max_regions: int = 256) -> BlockManager:
    """``num_pages`` physical pages of ``page_tokens`` slots (the manager's blocks), at
    most ``max_regions`` requests (virtual regions of ``max_model_len`` tokens) at once:
    a block manager over a free list of pages, configured with :class:`Regions`."""
    return BlockManager(FreeList(num_pages, page_tokens), kind="vattention",
                        regions=Regions(max_model_len, max_regions))


def vattention_for_model(capacity_slots: int, model: ModelSpec, page_bytes: int = 2 << 20,
                         max_model_len: int = 2048, max_regions: int = 256) -> BlockManager:
    """A vAttention pool of ``capacity_slots`` token slots cut into pages of
    ``page_bytes`` per layer and cache tensor (K, V, or an MLA latent) of ``model``."""
    page_tokens = page_tokens_for(model, page_bytes)
    num_pages = check_int("capacity_slots", capacity_slots, minimum=1) // page_tokens
    if num_pages < 1:
        raise ValueError(f"a pool of {capacity_slots} slots holds no page of "
                         f"{page_tokens} tokens ({page_bytes} bytes of {model.name})")
    return VAttentionAllocator(num_pages, page_tokens, max_model_len, max_regions)
