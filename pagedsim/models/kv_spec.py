"""Per-layer KV-cache specs: what one decoder layer keeps per token (or per request).

The seed's formula (2 x layers x heads x head_dim x bytes) assumes every layer is full
attention with the same heads. Models served today mix layer kinds:

* ``full``: full attention; K and V of ``num_kv_heads`` x ``head_dim`` values per token
  (grouped-query attention counts the KV heads, not the attention heads).
* ``sliding``: the same per token, but a request needs only the last ``window_tokens``
  tokens (gpt-oss: 128, Gemma 3: 1024). Per token it costs what a full layer costs;
  the saving is in how many tokens a request keeps.
* ``mla``: multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): one latent vector of
  ``kv_lora_rank + qk_rope_head_dim`` values per token, K and V both rebuilt from it, so
  no factor 2 and one "head".
* ``state``: a fixed state per request (Mamba, linear attention): ``state_bytes`` per
  request whatever its length, nothing per token.
* ``none``: no cache at all.

Sizes are in bytes; ``dtype_bytes`` is the KV cache's element size (2 for bf16/fp16,
1 for fp8). Tensor and pipeline parallelism follow vLLM: :func:`shard_for_tp` and
:func:`pp_layer_split`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..validate import check_int

#: The layer kinds, in the order the listings print them.
LAYER_KINDS = ("full", "sliding", "mla", "state", "none")

#: ``--kv-cache-dtype`` values and their bytes per element; ``auto`` is the model's dtype.
#: fp8_e4m3 and fp8_e5m2 are both one byte (they differ in range, not size).
KV_CACHE_DTYPE_BYTES: dict[str, int | None] = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per KV element for a ``kv_cache_dtype`` name (``auto``: the model's own
    ``model_dtype_bytes``); an unknown name raises ValueError listing the valid ones."""
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in KV_CACHE_DTYPE_BYTES:
        raise ValueError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; valid: "
                         f"{', '.join(KV_CACHE_DTYPE_BYTES)}")
    size = KV_CACHE_DTYPE_BYTES[kv_cache_dtype]
    return check_int("model dtype_bytes", model_dtype_bytes, minimum=1) if size is None else size


@dataclass(frozen=True, slots=True)
class LayerKV:
    """One layer's KV cache. ``num_kv_heads`` x ``head_dim`` values per token for K (and as
    many for V) in ``full`` and ``sliding`` layers; for ``mla`` ``head_dim`` is the latent
    width (kv_lora_rank + qk_rope_head_dim) and ``num_kv_heads`` is 1; ``window_tokens``
    is the sliding window in tokens; ``state_bytes`` a ``state`` layer's bytes per request."""

    kind: str
    num_kv_heads: int = 0
    head_dim: int = 0
    window_tokens: int = 0
    state_bytes: int = 0

    def __post_init__(self) -> None:
        if self.kind not in LAYER_KINDS:
            raise ValueError(f"unknown layer kind {self.kind!r}; valid: {', '.join(LAYER_KINDS)}")
        attention = self.kind in ("full", "sliding", "mla")
        for field in ("num_kv_heads", "head_dim"):
            check_int(f"{self.kind} layer: {field}", getattr(self, field),
                      minimum=1 if attention else 0)
        if self.kind == "mla" and self.num_kv_heads != 1:
            raise ValueError(f"an mla layer keeps one latent per token: num_kv_heads must be "
                             f"1, got {self.num_kv_heads!r}")
        check_int(f"{self.kind} layer: window_tokens", self.window_tokens,
                  minimum=1 if self.kind == "sliding" else 0)
        check_int(f"{self.kind} layer: state_bytes", self.state_bytes, minimum=0)
        if not attention and (self.num_kv_heads or self.head_dim):
            raise ValueError(f"a {self.kind} layer has no per-token KV: num_kv_heads and "
                             f"head_dim must be 0, got {self.num_kv_heads}, {self.head_dim}")
        if self.kind != "sliding" and self.window_tokens:
            raise ValueError(f"only sliding layers have a window, got window_tokens="
                             f"{self.window_tokens!r} on a {self.kind} layer")
        if self.kind != "state" and self.state_bytes:
            raise ValueError(f"only state layers have state_bytes, got {self.state_bytes!r} "
                             f"on a {self.kind} layer")

    @property
    def values_per_token(self) -> int:
        """Cached values per token: 2 (K and V) x kv heads x head_dim; the latent's width
        for mla (no factor 2); 0 for state and none layers."""
        if self.kind in ("full", "sliding"):
            return 2 * self.num_kv_heads * self.head_dim
        if self.kind == "mla":
            return self.head_dim
        return 0

    def bytes_per_token(self, dtype_bytes: int) -> int:
        """KV bytes one token costs in this layer at ``dtype_bytes`` per value."""
        return self.values_per_token * dtype_bytes

    def page_bytes(self, block_size: int, dtype_bytes: int) -> int:
        """Bytes of one block of ``block_size`` tokens in this layer (vLLM's
        ``page_size_bytes``); 0 for layers without per-token KV."""
        return block_size * self.bytes_per_token(dtype_bytes)


def full(num_kv_heads: int, head_dim: int) -> LayerKV:
    """A full-attention layer."""
    return LayerKV("full", num_kv_heads, head_dim)


def sliding(num_kv_heads: int, head_dim: int, window_tokens: int) -> LayerKV:
    """A sliding-window layer of ``window_tokens`` tokens."""
    return LayerKV("sliding", num_kv_heads, head_dim, window_tokens=window_tokens)


def mla(kv_lora_rank: int, qk_rope_head_dim: int) -> LayerKV:
    """A multi-head latent attention layer: one latent of rank + rope values per token."""
    return LayerKV("mla", 1, check_int("kv_lora_rank", kv_lora_rank, minimum=1)
                   + check_int("qk_rope_head_dim", qk_rope_head_dim, minimum=0))


def shard_for_tp(layer: LayerKV, tensor_parallel_size: int) -> LayerKV:
    """The layer as one of ``tensor_parallel_size`` GPUs holds it, as vLLM shards it.

    KV heads are divided over the GPUs (``kv_heads // tp``); when TP exceeds them each
    GPU holds one head and the heads are replicated (``tp // kv_heads`` copies each),
    so vLLM wants one to divide the other. An MLA latent is not split: every GPU keeps
    the whole latent. State and no-KV layers are returned unchanged (their per-GPU
    share of a state is not modelled)."""
    tp = check_int("tensor_parallel_size", tensor_parallel_size, minimum=1)
    if layer.kind not in ("full", "sliding") or tp == 1:
        return layer
    heads = layer.num_kv_heads
    if heads % tp and tp % heads:
        raise ValueError(
            f"tensor_parallel_size {tp} and {heads} KV heads: one must divide the other "
            f"(vLLM splits the heads or replicates them); valid sizes include "
            f"{', '.join(str(d) for d in range(1, heads + 1) if heads % d == 0)} "
            f"and multiples of {heads}")
    return replace(layer, num_kv_heads=max(1, heads // tp))


def pp_layer_split(num_layers: int, pipeline_parallel_size: int) -> list[int]:
    """Layers per pipeline stage, as vLLM's ``get_pp_indices`` splits them (vLLM 0.6 to
    0.11 and later, without ``VLLM_PP_LAYER_PARTITION``): ``num_layers // pp`` each, and
    the remainder one by one to the stages before the last, latest first (the last
    stage also holds the final norm and LM head). 61 layers on 4 stages: 15, 15, 16, 15."""
    layers = check_int("num_layers", num_layers, minimum=1)
    pp = check_int("pipeline_parallel_size", pipeline_parallel_size, minimum=1)
    if pp > layers:
        raise ValueError(f"pipeline_parallel_size {pp} exceeds the {layers} layers; "
                         f"valid: 1 to {layers}")
    split = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        split[-i] += 1
    return split


def pp_stage_layers(layers: tuple[LayerKV, ...], pipeline_parallel_size: int
                    ) -> list[tuple[LayerKV, ...]]:
    """``layers`` cut into the consecutive runs each pipeline stage holds."""
    out, start = [], 0
    for count in pp_layer_split(len(layers), pipeline_parallel_size):
        out.append(tuple(layers[start:start + count]))
        start += count
    return out
