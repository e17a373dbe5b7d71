"""A model as the KV cache sees it: its layers' KV specs, dtype, weights and context.

Memory is counted in bytes (1 GiB = 2**30 bytes, see :mod:`pagedsim.units`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..validate import check_int
from .kv_spec import LayerKV, full
from .param_count import ParamCount


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a decoder-only transformer, as far as the KV cache cares.

    ``weights_bytes`` is the size of the weights in the serving dtype;
    ``max_model_len`` is the longest sequence (prompt + output, in tokens) it serves.

    ``layers`` is the per-layer KV spec (:mod:`pagedsim.models.kv_spec`) of models that are not
    all full attention with ``num_kv_heads`` x ``head_dim`` (sliding-window, MLA and hybrid
    models); empty means that uniform stack, the seed's formula. ``dtype_bytes`` is the
    serving dtype's size, which the KV cache takes unless told otherwise (fp8).
    ``source`` says where the facts come from (a Hugging Face config.json);
    ``max_model_len_from`` which of its keys gave ``max_model_len`` (or vLLM's default
    when none did; :func:`pagedsim.models.hf_config.max_model_len_of`), empty when not
    read from a config.

    ``params`` is the parameter count from the architecture
    (:mod:`pagedsim.models.param_count`; None when the config lacks a field it needs, and
    for the hand-written presets): the cost model's flops and, for MoE, the share of
    ``weights_bytes`` a step streams. ``weights_from`` says where ``weights_bytes``
    came from for a config.json (its safetensors index, compared with the architecture's
    count, or the architecture's count itself), empty for a preset.
    """

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    weights_bytes: int
    max_model_len: int
    layers: tuple[LayerKV, ...] = ()
    source: str = ""
    max_model_len_from: str = ""
    params: ParamCount | None = None
    weights_from: str = ""

    def __post_init__(self) -> None:
        for field in ("num_layers", "num_heads", "num_kv_heads", "head_dim", "dtype_bytes",
                      "max_model_len"):
            check_int(f"{self.name}: {field}", getattr(self, field), minimum=1)
        check_int(f"{self.name}: weights_bytes", self.weights_bytes, minimum=0)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"{self.name}: num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if not isinstance(self.layers, tuple) or not all(
                isinstance(layer, LayerKV) for layer in self.layers):
            raise TypeError(f"{self.name}: layers must be a tuple of LayerKV, "
                            f"got {type(self.layers).__name__}")
        if self.params is not None and not isinstance(self.params, ParamCount):
            raise TypeError(f"{self.name}: params must be a ParamCount or None, "
                            f"got {type(self.params).__name__}")
        if self.layers and len(self.layers) != self.num_layers:
            raise ValueError(f"{self.name}: {len(self.layers)} layer specs for "
                             f"num_layers {self.num_layers}")

    @property
    def kv_layers(self) -> tuple[LayerKV, ...]:
        """The per-layer KV spec: ``layers``, or ``num_layers`` full-attention layers."""
        return self.layers or (full(self.num_kv_heads, self.head_dim),) * self.num_layers

    @property
    def is_uniform_full_attention(self) -> bool:
        """Whether every layer is full attention with the model's kv heads x head_dim
        (the seed's formula holds exactly)."""
        return all(layer == full(self.num_kv_heads, self.head_dim) for layer in self.layers)

    @property
    def bytes_per_token(self) -> int:
        """KV-cache bytes for one token across all layers: 2 (K and V) x layers x kv heads
        x head_dim x dtype bytes for a uniform model; otherwise the sum of the layers'
        bytes per token (an MLA layer its latent, no factor 2). A sliding-window layer
        counts as much per token as a full one (the simulator keeps every token of it;
        vLLM's hybrid budget, :mod:`pagedsim.models.vllm_kv`, keeps only the window); state and
        no-KV layers count nothing per token."""
        if not self.layers:
            return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes
        return sum(layer.bytes_per_token(self.dtype_bytes) for layer in self.layers)

    @property
    def hidden_size(self) -> int:
        """Width of the residual stream (num_heads x head_dim)."""
        return self.num_heads * self.head_dim

    @property
    def num_params(self) -> int:
        """Parameter count: the architecture's (``params.total``) when known, otherwise
        the one ``weights_bytes`` implies in the dtype."""
        if self.params is not None:
            return self.params.total
        return self.weights_bytes // self.dtype_bytes

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (MoE: its ``experts_per_token`` experts
        a layer; :attr:`ParamCount.active`), or :attr:`num_params` without ``params``."""
        if self.params is not None:
            return self.params.active
        return self.num_params
