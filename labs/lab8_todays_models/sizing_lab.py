"""Lab 8: today's models, sized as vLLM sizes them.

You read a model's Hugging Face ``config.json`` (already parsed into a ``dict``) and
compute what vLLM computes at start-up (tasks 8.1 to 8.4 of the handout, README.md):

1. the model's layers, as the KV cache sees them: full attention, sliding window or MLA;
2. the bytes one token keeps on one GPU (KV heads, not attention heads; an MLA latent
   once, not K and V; fp8; tensor parallelism that runs out of heads);
3. the bytes one request keeps (a sliding window saves on its own layers only);
4. vLLM's ``GPU KV cache size`` and ``Maximum concurrency`` for an available KV memory,
   its KV-cache groups for hybrid models, and its start-up check of one request.

A layer is a plain tuple ``(kind, num_kv_heads, head_dim, window_tokens)``:
``("full", 8, 128, 0)``, ``("sliding", 8, 64, 128)``, ``("mla", 1, 576, 0)`` (for MLA
``head_dim`` is the latent's width, kv_lora_rank + qk_rope_head_dim, and one "head").

Units: sizes in bytes (``int``), lengths in tokens. The graders call the functions
through ``adapters.py`` only; keep the names and signatures below (add helpers as you
like). Do not import ``pagedsim.models``, ``pagedsim.cli`` or ``pagedsim.experiments``:
they compute these numbers, and a file that uses them scores 0.
"""

from __future__ import annotations

#: A layer: (kind, num_kv_heads, head_dim, window_tokens); kind is "full", "sliding" or
#: "mla".
Layer = tuple[str, int, int, int]

#: vLLM's default max_num_batched_tokens (``vllm serve`` on a large GPU), in tokens.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
#: vLLM's rule for hybrid models: the group size is the most layers of a kind when that is
#: under this many times the fewest (see task 8.4).
GROUP_SIZE_RATIO = 1.5


def text_config(config: dict) -> dict:
    """The language model's part of a config: ``text_config`` when there is one (Gemma 3
    and other multimodal models), else the config itself."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def int_field(cfg: dict, key: str, default: int | None = None) -> int:
    """``cfg[key]`` (or ``default`` when the key is missing or null) as a whole number
    >= 1; ValueError naming the key otherwise."""
    value = cfg.get(key)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config.json: {key} must be a whole number >= 1, got {value!r}")
    return value


def cdiv(a: int, b: int) -> int:
    """``a / b`` rounded up (whole blocks)."""
    return -(-a // b)


# --------------------------------------------------------------------------------------
# Task 8.1: a config.json's layers.


def read_layers(config: dict) -> list[Layer]:
    """One :data:`Layer` per decoder layer of ``config`` (a parsed config.json).

    Read from :func:`text_config`: ``num_hidden_layers``; ``num_key_value_heads`` (when
    missing or null: ``num_attention_heads``, plain multi-head attention); ``head_dim``
    (when missing or null: ``hidden_size // num_attention_heads``). Then the kind of
    each layer:

    * ``kv_lora_rank`` set (not null): every layer is ``("mla", 1, kv_lora_rank +
      qk_rope_head_dim, 0)``;
    * else ``layer_types`` given: ``"sliding_attention"`` is ``("sliding", kv heads,
      head_dim, sliding_window)``, ``"full_attention"`` is ``("full", kv heads, head_dim,
      0)``;
    * else ``sliding_window`` set and ``use_sliding_window`` not false: every layer slides
      (Mistral-7B-v0.1);
    * else every layer is full attention.

    A missing or bad number raises ValueError (``int_field`` does it).
    """
    text = text_config(config)
    # BEGIN SOLUTION lab 8.1: layers, KV heads (not attention heads), head_dim, kinds
    num_layers = int_field(text, "num_hidden_layers")
    num_heads = int_field(text, "num_attention_heads")
    if text.get("kv_lora_rank") is not None:
        latent = int_field(text, "kv_lora_rank") + text.get("qk_rope_head_dim", 0)
        return [("mla", 1, latent, 0)] * num_layers
    kv_heads = int_field(text, "num_key_value_heads", default=num_heads)
    head_dim = text.get("head_dim")
    if head_dim is None:
        head_dim = int_field(text, "hidden_size") // num_heads
    head_dim = int_field({"head_dim": head_dim}, "head_dim")
    types = text.get("layer_types")
    if types is None:
        slides = (text.get("sliding_window") is not None
                  and text.get("use_sliding_window") is not False)
        types = ["sliding_attention" if slides else "full_attention"] * num_layers
    if len(types) != num_layers:
        raise ValueError(f"config.json: layer_types lists {len(types)} layers, "
                         f"num_hidden_layers is {num_layers}")
    layers: list[Layer] = []
    for kind in types:
        if kind == "sliding_attention":
            layers.append(("sliding", kv_heads, head_dim, int_field(text, "sliding_window")))
        elif kind == "full_attention":
            layers.append(("full", kv_heads, head_dim, 0))
        else:
            raise ValueError(f"config.json: layer type {kind!r} is not supported")
    return layers
    # END SOLUTION


# --------------------------------------------------------------------------------------
# Task 8.2: bytes per token on one GPU.


def kv_cache_dtype_bytes(kv_cache_dtype: str) -> int:
    """Bytes of one cached value for vLLM's ``--kv-cache-dtype``: ``"auto"`` (the model's
    16-bit dtype; vLLM serves float32 checkpoints in 16 bits too), ``"bfloat16"`` and
    ``"float16"`` are 2; ``"fp8"``, ``"fp8_e4m3"`` and ``"fp8_e5m2"`` are 1. Any other
    name raises ValueError."""
    # BEGIN SOLUTION lab 8.2: 2 bytes for 16-bit, 1 for fp8
    sizes = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
    if kv_cache_dtype not in sizes:
        raise ValueError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; valid: "
                         f"{', '.join(sizes)}")
    return sizes[kv_cache_dtype]
    # END SOLUTION


def shard_layer(layer: Layer, tensor_parallel_size: int) -> Layer:
    """The part of ``layer`` one of ``tensor_parallel_size`` GPUs caches.

    Full and sliding layers: the KV heads are divided over the GPUs (``kv_heads // tp``);
    when TP exceeds them each GPU still holds one whole head (the heads are replicated).
    One of kv_heads and TP must divide the other, else ValueError. An MLA latent is not
    split: every GPU keeps all of it."""
    kind, kv_heads, head_dim, window = layer
    # BEGIN SOLUTION lab 8.2: split the KV heads, never below one; MLA whole
    if kind == "mla" or tensor_parallel_size == 1:
        return layer
    if kv_heads % tensor_parallel_size and tensor_parallel_size % kv_heads:
        raise ValueError(f"tensor_parallel_size {tensor_parallel_size} and {kv_heads} KV "
                         "heads: one must divide the other")
    return (kind, max(1, kv_heads // tensor_parallel_size), head_dim, window)
    # END SOLUTION


def layer_bytes_per_token(layer: Layer, dtype_bytes: int) -> int:
    """Bytes one token keeps in one layer (as given, already sharded): K and V of every
    KV head for full and sliding layers, the one latent for MLA."""
    kind, kv_heads, head_dim, _ = layer
    # BEGIN SOLUTION lab 8.2: K and V per KV head; one latent for MLA (no factor 2)
    if kind == "mla":
        return head_dim * dtype_bytes
    return 2 * kv_heads * head_dim * dtype_bytes
    # END SOLUTION


def gpu_layers(config: dict, tensor_parallel_size: int = 1) -> list[Layer]:
    """The layers as one GPU of ``tensor_parallel_size`` holds them. vLLM also needs TP to
    divide ``num_attention_heads``: ValueError otherwise (and for TP < 1)."""
    # BEGIN SOLUTION lab 8.2: check TP against the attention heads, shard every layer
    heads = int_field(text_config(config), "num_attention_heads")
    if (isinstance(tensor_parallel_size, bool) or not isinstance(tensor_parallel_size, int)
            or tensor_parallel_size < 1 or heads % tensor_parallel_size):
        raise ValueError(f"tensor_parallel_size {tensor_parallel_size!r} must be >= 1 and "
                         f"divide the {heads} attention heads")
    return [shard_layer(layer, tensor_parallel_size) for layer in read_layers(config)]
    # END SOLUTION


def bytes_per_token(config: dict, kv_cache_dtype: str = "auto",
                    tensor_parallel_size: int = 1) -> int:
    """KV bytes one token keeps on one GPU, over all layers (bytes)."""
    # BEGIN SOLUTION lab 8.2: sum over this GPU's layers
    size = kv_cache_dtype_bytes(kv_cache_dtype)
    return sum(layer_bytes_per_token(layer, size)
               for layer in gpu_layers(config, tensor_parallel_size))
    # END SOLUTION


# --------------------------------------------------------------------------------------
# Task 8.3: what one request keeps.


def request_kv_bytes(config: dict, num_tokens: int, kv_cache_dtype: str = "auto",
                     tensor_parallel_size: int = 1) -> int:
    """KV bytes one request of ``num_tokens`` tokens keeps on one GPU, token by token (no
    blocks): full and MLA layers keep every token, a sliding layer only its last
    ``window_tokens`` tokens. ValueError for ``num_tokens`` < 0."""
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
        raise ValueError(f"num_tokens must be a whole number >= 0, got {num_tokens!r}")
    # BEGIN SOLUTION lab 8.3: a window caps the tokens of its own layer only
    size = kv_cache_dtype_bytes(kv_cache_dtype)
    total = 0
    for layer in gpu_layers(config, tensor_parallel_size):
        kept = min(num_tokens, layer[3]) if layer[0] == "sliding" else num_tokens
        total += kept * layer_bytes_per_token(layer, size)
    return total
    # END SOLUTION


# --------------------------------------------------------------------------------------
# Task 8.4: vLLM's start-up lines.


def kv_cache_groups(layers: list[Layer]) -> tuple[int, list[list[int]]]:
    """vLLM's KV-cache groups of ``layers``: (group size, the groups as lists of layer
    indices). Layers alike (same tuple) are one kind. One kind: one group of every layer.
    Several kinds: the group size is the fewest layers of any kind, or the most when
    that is under ``GROUP_SIZE_RATIO`` x the fewest; the layers of each kind, in order,
    are dealt round-robin into ``cdiv(count, group size)`` groups."""
    # BEGIN SOLUTION lab 8.4: kinds, the group size, groups dealt round-robin
    by_kind: dict[Layer, list[int]] = {}
    for i, layer in enumerate(layers):
        by_kind.setdefault(layer, []).append(i)
    counts = [len(v) for v in by_kind.values()]
    if len(by_kind) == 1:
        return counts[0], list(by_kind.values())
    size = min(counts)
    if max(counts) < min(counts) * GROUP_SIZE_RATIO:
        size = max(counts)
    groups = []
    for indices in by_kind.values():
        n = cdiv(len(indices), size)
        groups.extend(indices[i::n] for i in range(n))
    return size, groups
    # END SOLUTION


def vllm_kv_cache(config: dict, available_kv_bytes: int, max_model_len: int, *,
                  tensor_parallel_size: int = 1, kv_cache_dtype: str = "auto",
                  block_size: int = 16,
                  max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> dict:
    """What vLLM computes from ``available_kv_bytes`` of KV memory on each GPU (its
    ``Available KV cache memory``), as a dict of ints unless said:

    * ``page_bytes``: one layer's block on one GPU, ``block_size`` x the layer's bytes per
      token (hybrid models: every layer's page must be the same, else ValueError);
    * ``group_size``, ``num_groups``: :func:`kv_cache_groups` of the GPU's layers;
    * ``num_blocks``: ``available_kv_bytes // (page_bytes x group_size)``;
    * ``gpu_kv_cache_size_tokens``: ``num_blocks // num_groups x block_size``;
    * ``blocks_per_request``: the blocks one request of ``max_model_len`` tokens takes,
      summed over the groups: a full or MLA group ``cdiv(max_model_len, block_size)``, a
      sliding group ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
      block_size) + 1``;
    * ``max_concurrency`` (float): ``num_blocks / blocks_per_request``;
    * ``request_bytes``: what vLLM's start-up check wants for one request of
      ``max_model_len``: ``page_bytes x group_size x blocks_per_request``.
    """
    # BEGIN SOLUTION lab 8.4: pages, groups, blocks, the two logged numbers
    layers = gpu_layers(config, tensor_parallel_size)
    size = kv_cache_dtype_bytes(kv_cache_dtype)
    pages = {block_size * layer_bytes_per_token(layer, size) for layer in layers}
    if len(pages) != 1:
        raise ValueError(f"layers with different page sizes ({sorted(pages)} bytes)")
    page = pages.pop()
    group_size, groups = kv_cache_groups(layers)
    num_blocks = available_kv_bytes // (page * group_size)

    def blocks(group: list[int]) -> int:
        kind, _, _, window = layers[group[0]]
        if kind == "sliding":
            return cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
                        block_size) + 1
        return cdiv(max_model_len, block_size)

    per_request = sum(blocks(g) for g in groups)
    return {"page_bytes": page, "group_size": group_size, "num_groups": len(groups),
            "num_blocks": num_blocks,
            "gpu_kv_cache_size_tokens": num_blocks // len(groups) * block_size,
            "blocks_per_request": per_request, "max_concurrency": num_blocks / per_request,
            "request_bytes": page * group_size * per_request}
    # END SOLUTION


def estimated_max_model_len(config: dict, available_kv_bytes: int, max_model_len: int, *,
                            tensor_parallel_size: int = 1, kv_cache_dtype: str = "auto",
                            block_size: int = 16,
                            max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
                            ) -> int:
    """The longest request (tokens, at most ``max_model_len``) whose ``request_bytes``
    (task 8.4's) fit in ``available_kv_bytes``; 0 if not even one token fits. vLLM prints
    it when it refuses to start; it searches by bisection."""
    # BEGIN SOLUTION lab 8.4: bisection over the request length
    def fits(length: int) -> bool:
        return vllm_kv_cache(config, available_kv_bytes, length,
                             tensor_parallel_size=tensor_parallel_size,
                             kv_cache_dtype=kv_cache_dtype, block_size=block_size,
                             max_num_batched_tokens=max_num_batched_tokens
                             )["request_bytes"] <= available_kv_bytes

    lo, hi, best = 1, max_model_len, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
    # END SOLUTION
