"""A model as the KV cache sees it: its layers' KV specs, dtype, weights and context.

Memory is counted in bytes (1 GiB = 2**30 bytes, see :mod:`pagedsim.units`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..validate import check_int
from .kv_spec import LayerKV, full


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
        """Parameter count implied by ``weights_bytes`` and the dtype."""
        return self.weights_bytes // self.dtype_bytes
