"""A hybrid model's KV-cache groups and the one pool they share, as vLLM v1 lays them out.

vLLM v1 cuts a model's attention layers into *KV-cache groups* of equal size (all full
layers alike in one kind, each run of sliding layers of one window in another;
:func:`pagedsim.models.vllm_kv.vllm_kv_cache` has the rule). Every group has its own
block table per request, and all groups draw their blocks from **one pool**: block ``b``
of the pool is ``group_size`` layers' worth of pages (one page per layer of the group
that holds it), so every group's block has the same size in bytes and any free block
serves any group. gpt-oss-120b: 18 sliding layers (window 128) and 18 full ones, so two
groups of 18 layers; Gemma 3 27B: 52 sliding layers (window 1,024) and 10 full ones, so
one full group and six sliding groups of (at most) 10 layers.

**What a slot means here.** A *slot* is a pool slot, ``block * block_size + offset``:
room for one token's K/V in the layers of the group that holds that block. One token has
a slot in every group (while a sliding group still keeps it), so a request of ``L``
tokens takes about ``L`` slots per full group and at most ``(ceil((W - 1) / block_size)
+ 1) x block_size`` per sliding group of window ``W``. The pool's ``capacity_slots`` is
``num_blocks x block_size`` group-slots, which is why the same bytes give a hybrid pool
more slots than the all-full-attention pool (gpt-oss: twice as many, each half the bytes).
Groups are ordered full attention (and MLA) first, so group 0 covers every token when the
model has a full layer: the Allocator protocol's single ``slot_mapping`` is group 0's.

:func:`hybrid_layout` sizes the pool from bytes as vLLM does (MLA latents and fp8 change
the bytes per token, hence the block count).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.specs import ModelSpec
from ..models.vllm_kv import vllm_kv_cache
from ..validate import check_int

#: The table entry of a block a sliding-window group no longer holds (vLLM's null block):
#: the block fell wholly behind the window and went back to the pool.
NULL_BLOCK = -1
#: Group kinds whose tables keep every block (``mla`` is full attention over a latent).
FULL_KINDS = ("full", "mla")


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """One KV-cache group: its layer kind, its window in tokens (``sliding`` only, else
    0), how many of the model's layers its blocks hold K/V for (``num_layers``) and, when
    known, which ones (``layer_indices``, model layer numbers: a real cache puts layer
    ``layer_indices[p]`` at position ``p`` of a block)."""

    kind: str
    window_tokens: int = 0
    num_layers: int = 1
    layer_indices: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in (*FULL_KINDS, "sliding"):
            raise ValueError(f"group kind must be one of full, mla, sliding; got "
                             f"{self.kind!r}")
        check_int("num_layers", self.num_layers, minimum=1)
        check_int("window_tokens", self.window_tokens,
                  minimum=1 if self.kind == "sliding" else 0)
        if self.kind != "sliding" and self.window_tokens:
            raise ValueError(f"only a sliding group has a window, got window_tokens="
                             f"{self.window_tokens} on a {self.kind} group")
        if self.layer_indices and len(self.layer_indices) != self.num_layers:
            raise ValueError(f"{len(self.layer_indices)} layer indices for a group of "
                             f"{self.num_layers} layers")

    @property
    def window(self) -> int | None:
        """The window in tokens, or None for a group that keeps every token."""
        return self.window_tokens if self.kind == "sliding" else None

    def blocks_held(self, num_tokens: int, block_size: int) -> int:
        """Blocks a sequence holds in this group right after a decode step made it
        ``num_tokens`` long: all of them in a full group; in a sliding one those from the
        block of token ``num_tokens - W`` on (that step's query read the last ``W``
        tokens; blocks wholly before them were freed)."""
        n = check_int("num_tokens", num_tokens, minimum=0)
        total = -(-n // block_size)
        if self.window is None:
            return total
        return total - max(n - self.window_tokens, 0) // block_size


class HybridSeq:
    """One sequence as the coordinator (:class:`~.hybrid.HybridAllocator`) keeps it, the
    same for every group: its tokens, its final length, the position of its last growth
    and, with a prefix cache, what names its blocks. Its block tables are the group
    managers' (:class:`~.hybrid_group_manager.GroupManager`), one per group."""

    __slots__ = ("num_tokens", "final_len", "block_hashes", "branch", "hashes",
                 "hit_tokens", "grown_at")

    def __init__(self, num_tokens: int, final_len: int | None, block_hashes: object = None,
                 branch: int = 0, hashes: list | None = None, hit_tokens: int = 0,
                 grown_at: int = -1) -> None:
        self.num_tokens, self.final_len = num_tokens, final_len
        self.block_hashes, self.branch = block_hashes, branch
        self.hashes = hashes if hashes is not None else []  # its full blocks' names
        self.hit_tokens = hit_tokens
        self.grown_at = grown_at  # position of the last growth (its window applied); -1: none

    def grow(self, num_tokens: int) -> None:
        """``num_tokens`` more tokens, from position ``self.num_tokens`` on."""
        self.grown_at = self.num_tokens
        self.num_tokens += num_tokens

    def next_hash(self) -> object:
        """The name of its next full block (its content's chained hash), kept."""
        h = self.block_hashes.next_hash(self.branch, self.hashes)
        self.hashes.append(h)
        return h


def order_groups(groups: list[GroupSpec]) -> tuple[GroupSpec, ...]:
    """``groups`` with the full-attention (and MLA) ones first, each kind in its order:
    group 0 then covers every token whenever the model has a full layer."""
    return tuple(sorted(groups, key=lambda g: g.kind == "sliding"))


@dataclass(frozen=True, slots=True)
class HybridLayout:
    """One GPU's KV pool for a model, as vLLM v1 lays it out: ``num_blocks`` blocks of
    ``block_size`` tokens shared by ``groups``; ``block_bytes`` is one block (a page per
    layer of a group), ``kv_cache_bytes`` the memory it was cut from."""

    model: str
    groups: tuple[GroupSpec, ...]
    num_blocks: int
    block_size: int
    block_bytes: int
    kv_cache_bytes: int
    hybrid: bool

    @property
    def capacity_slots(self) -> int:
        """Pool slots: ``num_blocks x block_size`` (one token in one group's layers each)."""
        return self.num_blocks * self.block_size


def hybrid_layout(model: ModelSpec, kv_cache_bytes: int, block_size: int = 16, *,
                  hybrid: bool = True, kv_cache_dtype: str = "auto",
                  tensor_parallel_size: int = 1,
                  max_model_len: int | None = None) -> HybridLayout:
    """The pool ``kv_cache_bytes`` of one GPU give ``model`` (vLLM's grouping and block
    count, :func:`~pagedsim.models.vllm_kv.vllm_kv_cache`). ``hybrid=False`` is vLLM's
    ``--disable-hybrid-kv-cache-manager``: every sliding layer kept as a full one, one
    group. ``kv_cache_dtype`` (fp8: one byte a value) and MLA latents set the bytes per
    token. Raises ValueError when not even one block fits."""
    cfg = vllm_kv_cache(model, kv_cache_bytes, block_size=block_size, hybrid=hybrid,
                        kv_cache_dtype=kv_cache_dtype,
                        tensor_parallel_size=tensor_parallel_size,
                        max_model_len=max_model_len or model.max_model_len)
    groups = order_groups([GroupSpec(g.kind, g.window_tokens, len(g.layer_indices),
                                     tuple(g.layer_indices)) for g in cfg.groups])
    if cfg.num_blocks < 1:
        raise ValueError(f"a KV pool of {kv_cache_bytes} bytes holds no block of "
                         f"{block_size} tokens for {model.name} ({len(groups)} KV-cache "
                         f"groups of {cfg.group_size} layers)")
    layers = cfg.group_size if len(groups) > 1 else groups[0].num_layers
    return HybridLayout(model.name, groups, cfg.num_blocks, block_size,
                        cfg.page_size_bytes * layers, kv_cache_bytes, hybrid)


def describe_groups(groups: tuple[GroupSpec, ...]) -> str:
    """``"1 full (18 layers) + 1 sliding W=128 (18 layers)"``: the groups in words."""
    parts: dict[str, int] = {}
    for g in groups:
        word = f"{g.kind} W={g.window_tokens}" if g.window else g.kind
        word += f" ({g.num_layers} layers)"
        parts[word] = parts.get(word, 0) + 1
    return " + ".join(f"{n} {w}" for w, n in parts.items())
