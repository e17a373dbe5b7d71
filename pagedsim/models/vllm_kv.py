"""vLLM v1's KV-cache sizing at start-up: the block count and the two lines it logs.

Given the KV memory of one GPU (``kv_cache_memory_bytes``: what vLLM logs as
``Available KV cache memory``, or its ``--kv-cache-memory-bytes``), this computes what
vLLM then logs::

    GPU KV cache size: N tokens
    Maximum concurrency for M tokens per request: C x

The rules are those of ``vllm/v1/core/kv_cache_utils.py`` and ``kv_cache_interface.py``
as read at vLLM's main branch (2026); tests/models/test_vllm_logs.py checks them against start-up
lines of v0.9 to v0.10 (kv_cache_utils.py's log lines 716 to 1013), which they reproduce.
Where versions differ it is said below.

* Each layer's page is ``block_size x values per token x dtype bytes``: K and V of the
  KV heads this GPU holds (``kv_heads // TP``, at least 1), or one MLA latent.
* All layers alike (most models): one KV-cache group; on each GPU
  ``num_blocks = memory // page // layers on this GPU``.
* Hybrid models (gpt-oss, Gemma 3): the layers of each kind are cut into groups of
  equal size (the fewest layers of any kind; the most, when that is under 1.5 x the
  fewest: main in 2026; releases of 2025 used 1.25, which differs only for kinds within
  25 to 50% of each other in number), the groups share one pool of pages, and
  ``num_blocks = memory // page // group size``. ``--disable-hybrid-kv-cache-manager``
  (``hybrid=False``) makes every sliding layer a full one instead.
* Pipeline parallelism: each stage holds its layers
(:func:`pagedsim.models.kv_spec.pp_layer_split`),
  and every stage takes the smallest stage's block count.
* ``GPU KV cache size`` = ``num_blocks // groups x block_size`` (versions after
  v0.12 print ``int(concurrency x max_model_len)`` instead, which is the same number when
  max_model_len is a multiple of the block size and the model has one group).
* ``Maximum concurrency`` = ``num_blocks / blocks one request needs``: a full (or MLA)
  group ``cdiv(max_model_len, block_size)`` blocks, a sliding group
  ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1``.

Sizes are bytes per GPU; token counts are token slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..validate import check_int
from .kv_spec import LayerKV, full, kv_dtype_bytes, pp_layer_split, shard_for_tp
from .specs import ModelSpec, get_model

#: vLLM's default ``max_num_batched_tokens`` for ``vllm serve`` on large GPUs; it only
#: changes the concurrency of models with sliding-window layers.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
#: vLLM main's rule (2026): the group size is the most layers of a kind when that is under
#: 1.5 x the fewest (1.25 in 2025's releases).
GROUP_SIZE_RATIO = 1.5


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class KVCacheGroup:
    """One KV-cache group: its layer kind, window (sliding only), the model's layers in it
    (``layer_indices``, padding left out) and the blocks one request of max_model_len
    needs in it."""

    kind: str
    window_tokens: int
    layer_indices: tuple[int, ...]
    blocks_per_request: int


@dataclass(frozen=True, slots=True)
class VllmKVCache:
    """The result of :func:`vllm_kv_cache`: bytes per GPU, counts in blocks and tokens."""

    model: str
    kv_cache_memory_bytes: int  # one GPU's KV memory (the smallest stage's, with PP)
    stage_memory_bytes: tuple[int, ...]  # one GPU's KV memory on each pipeline stage
    kv_cache_dtype: str
    dtype_bytes: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int
    hybrid: bool  # vLLM's hybrid KV-cache manager on
    stage_layers: tuple[int, ...]  # layers per pipeline stage
    page_size_bytes: int  # one layer's block on one GPU
    bytes_per_token: int  # one token, all layers of the fullest stage, one GPU
    group_size: int  # layers per KV-cache group (the pools sharing one page index)
    groups: tuple[KVCacheGroup, ...]
    stage_num_blocks: tuple[int, ...]
    num_blocks: int
    gpu_kv_cache_size_tokens: int
    blocks_per_request: int
    max_concurrency: float
    max_model_len_bytes: int  # one request of max_model_len, one GPU, the largest stage's
    stage_request_bytes: tuple[int, ...]  # the same on each pipeline stage
    estimated_max_model_len: int  # the longest request that fits (vLLM's estimate), tokens

    @property
    def fits_max_model_len(self) -> bool:
        """Whether one request of max_model_len fits on every stage (vLLM refuses to start
        otherwise, with ``estimated_max_model_len`` in its message)."""
        return all(n <= m for n, m in zip(self.stage_request_bytes, self.stage_memory_bytes,
                                          strict=True))

    def log_lines(self) -> list[str]:
        """The two lines vLLM logs, formatted as it formats them."""
        return [f"GPU KV cache size: {self.gpu_kv_cache_size_tokens:,} tokens",
                f"Maximum concurrency for {self.max_model_len:,} tokens per request: "
                f"{self.max_concurrency:.2f}x"]

    def to_dict(self) -> dict:
        return {**asdict(self), "fits_max_model_len": self.fits_max_model_len}


def _spec_key(layer: LayerKV) -> tuple:
    return (layer.kind, layer.num_kv_heads, layer.head_dim, layer.window_tokens)


def _group_layers(layers: list[LayerKV], hybrid: bool) -> tuple[int, list[list[int]]]:
    """vLLM's KV-cache groups (model layer indices) and the group size."""
    if not hybrid:  # every sliding layer becomes a full one
        layers = [full(x.num_kv_heads, x.head_dim) if x.kind == "sliding" else x
                  for x in layers]
    by_kind: dict[tuple, list[int]] = {}
    for i, layer in enumerate(layers):
        by_kind.setdefault(_spec_key(layer), []).append(i)
    if len(by_kind) == 1:
        indices = next(iter(by_kind.values()))
        return len(indices), [indices]
    # Layers of different shapes or windows are different spec types, as in vLLM (where
    # a page-size mismatch is then refused by the caller).
    counts = [len(v) for v in by_kind.values()]
    group_size = min(counts)
    if max(counts) < min(counts) * GROUP_SIZE_RATIO:
        group_size = max(counts)
    groups = []
    for indices in by_kind.values():
        n = _cdiv(len(indices), group_size)
        groups.extend(indices[i::n] for i in range(n))
    return group_size, groups


def vllm_kv_cache(model: ModelSpec | str, kv_cache_memory_bytes: int | Sequence[int], *,
                  tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                  kv_cache_dtype: str = "auto", block_size: int = 16,
                  max_model_len: int | None = None,
                  max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
                  hybrid: bool = True) -> VllmKVCache:
    """vLLM v1's KV-cache configuration for ``model`` with ``kv_cache_memory_bytes`` of KV
    memory on each GPU (see the module docstring for the rules). ``max_model_len``
    defaults to the model's. ``kv_cache_memory_bytes`` may list one figure per pipeline
    stage (each stage's workers log their own ``Available KV cache memory``). Raises
    ValueError naming the bad argument."""
    spec = get_model(model) if isinstance(model, str) else model
    tp = check_int("tensor_parallel_size", tensor_parallel_size, minimum=1)
    pp = check_int("pipeline_parallel_size", pipeline_parallel_size, minimum=1)
    # The split first: it refuses more stages than layers before a figure per stage is made.
    split = pp_layer_split(len(spec.kv_layers), pp)
    if isinstance(kv_cache_memory_bytes, (list, tuple)):
        if len(kv_cache_memory_bytes) not in (1, pp):
            raise ValueError(f"kv_cache_memory_bytes lists {len(kv_cache_memory_bytes)} "
                             f"figures for {pp} pipeline stages; give one, or one per stage")
        stage_memory = tuple(check_int("kv_cache_memory_bytes", m, minimum=0)
                             for m in kv_cache_memory_bytes) * (
                                 pp if len(kv_cache_memory_bytes) == 1 else 1)
    else:
        stage_memory = (check_int("kv_cache_memory_bytes", kv_cache_memory_bytes,
                                  minimum=0),) * pp
    memory = min(stage_memory)
    block = check_int("block_size", block_size, minimum=1)
    max_len = check_int("max_model_len", spec.max_model_len if max_model_len is None
                        else max_model_len, minimum=1)
    batched = check_int("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
    dtype_bytes = kv_dtype_bytes(kv_cache_dtype, spec.dtype_bytes)
    if spec.num_heads % tp:
        raise ValueError(f"tensor_parallel_size {tp} does not divide {spec.name}'s "
                         f"{spec.num_heads} attention heads (vLLM requires it)")
    layers = [shard_for_tp(layer, tp) for layer in spec.kv_layers]
    if any(layer.kind == "state" for layer in layers):
        raise ValueError(f"{spec.name} has fixed-state (Mamba / linear-attention) layers; "
                         "vLLM's page padding for them is not modelled")
    stage_of = [s for s, count in enumerate(split) for _ in range(count)]
    kv_index = [i for i, layer in enumerate(layers) if layer.kind != "none"]
    if not kv_index:
        raise ValueError(f"{spec.name} has no KV-cache layers")
    kv_layers = [layers[i] for i in kv_index]
    pages = {layer.page_bytes(block, dtype_bytes) for layer in kv_layers}
    group_size, local_groups = _group_layers(kv_layers, hybrid)
    groups_idx = [[kv_index[j] for j in g] for g in local_groups]
    uniform_type = len(groups_idx) == 1
    if len(pages) != 1 and not uniform_type:
        raise ValueError(f"{spec.name}: hybrid layers with different page sizes "
                         f"({sorted(pages)} bytes) are not modelled")

    stage_blocks = []
    for stage in range(pp):
        on_stage = [[i for i in g if stage_of[i] == stage] for g in groups_idx]
        if uniform_type:  # one group: the stage's layers' pages side by side
            stage_page = sum(layers[i].page_bytes(block, dtype_bytes) for i in on_stage[0])
        else:
            stage_page = next(iter(pages)) * max(len(g) for g in on_stage)
        stage_blocks.append(stage_memory[stage] // stage_page if stage_page else 0)
    num_blocks = min(stage_blocks)

    def group_blocks(g: list[int], length: int) -> int:
        # blocks one request of `length` tokens needs in group g (vLLM's max_memory_usage)
        layer = layers[g[0]]
        if layer.kind == "sliding" and hybrid:
            return _cdiv(min(layer.window_tokens - 1 + batched, length), block) + 1
        return _cdiv(length, block)

    def needed_bytes(stage: int, length: int) -> int:
        # what vLLM's start-up check wants on this stage for one request of `length` tokens
        if uniform_type:
            return group_blocks(groups_idx[0], length) * sum(
                layers[i].page_bytes(block, dtype_bytes) for i in groups_idx[0]
                if stage_of[i] == stage)
        size = max(sum(1 for i in g if stage_of[i] == stage) for g in groups_idx)
        return size * next(iter(pages)) * sum(group_blocks(g, length) for g in groups_idx)

    def longest_fitting(stage: int) -> int:
        # vLLM's estimate_max_model_len: binary search for the longest request that fits
        lo, hi, best = 1, max_len, 0
        while lo <= hi:
            mid = (lo + hi) // 2
            if needed_bytes(stage, mid) <= stage_memory[stage]:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return best

    groups = tuple(KVCacheGroup(
        layers[g[0]].kind if hybrid or layers[g[0]].kind != "sliding" else "full",
        layers[g[0]].window_tokens if hybrid else 0, tuple(g), group_blocks(g, max_len))
        for g in groups_idx)
    per_request = sum(g.blocks_per_request for g in groups)
    fullest = max(range(pp), key=lambda s: sum(
        layers[i].bytes_per_token(dtype_bytes) for i in kv_index if stage_of[i] == s))
    stage_tokens_bytes = sum(layers[i].bytes_per_token(dtype_bytes)
                             for i in kv_index if stage_of[i] == fullest)
    stage_request = tuple(needed_bytes(s, max_len) for s in range(pp))
    fits = all(n <= m for n, m in zip(stage_request, stage_memory, strict=True))
    return VllmKVCache(
        model=spec.name, kv_cache_memory_bytes=memory, stage_memory_bytes=stage_memory,
        kv_cache_dtype=kv_cache_dtype,
        dtype_bytes=dtype_bytes, tensor_parallel_size=tp, pipeline_parallel_size=pp,
        block_size=block, max_model_len=max_len, max_num_batched_tokens=batched,
        hybrid=hybrid, stage_layers=tuple(split),
        page_size_bytes=max(pages), bytes_per_token=stage_tokens_bytes,
        group_size=group_size, groups=groups, stage_num_blocks=tuple(stage_blocks),
        num_blocks=num_blocks,
        gpu_kv_cache_size_tokens=num_blocks // len(groups) * block,
        blocks_per_request=per_request, max_concurrency=num_blocks / per_request,
        max_model_len_bytes=max(stage_request), stage_request_bytes=stage_request,
        estimated_max_model_len=max_len if fits else min(longest_fitting(s)
                                                         for s in range(pp)),
    )

