"""pagedsim.kernels: real paged-attention kernels and KV caches driven by pagedsim allocators.

``pagedsim.kernels.backend`` is imported first on purpose: it decides between Triton on CUDA,
Triton's CPU interpreter and pure torch, and must set ``TRITON_INTERPRET`` before any
module that defines a Triton kernel is imported. ``pagedsim.kernels.BACKEND`` says which one
is in use (``python -m pagedsim.kernels`` prints why).
"""

from .backend import BACKEND, BACKENDS, DEVICE, INFO, BackendInfo  # noqa: I001  (must be first)
from pagedsim.memory.schemes import register_kv_cache
from .attention import (
    choose_num_splits,
    paged_attention,
    paged_attention_reference,
    paged_attention_torch,
)
from .cache_ops import (
    copy_blocks,
    copy_blocks_reference,
    write_kv,
    write_kv_reference,
)
from .hybrid_cache import HybridKVCache
from .kv_cache import ContiguousKVCache, KVCache, KVCacheConfig, PagedKVCache, SwappedKV
from .model import Decoder, Generation, ModelConfig
from .vattention_cache import VAttentionKVCache

# The scheme registry learns which cache mirrors which allocator family (pagedsim itself
# never imports torch, so the registration happens here).
register_kv_cache("paged", PagedKVCache)
register_kv_cache("contiguous", ContiguousKVCache)
register_kv_cache("vattention", VAttentionKVCache)
register_kv_cache("hybrid", HybridKVCache)


def backend_name() -> str:
    """The default backend: ``"triton"`` (CUDA or interpreter) or ``"torch"``."""
    return BACKEND


__all__ = [
    "BACKEND",
    "BACKENDS",
    "DEVICE",
    "INFO",
    "BackendInfo",
    "ContiguousKVCache",
    "Decoder",
    "Generation",
    "HybridKVCache",
    "KVCache",
    "KVCacheConfig",
    "ModelConfig",
    "PagedKVCache",
    "SwappedKV",
    "VAttentionKVCache",
    "backend_name",
    "choose_num_splits",
    "copy_blocks",
    "copy_blocks_reference",
    "paged_attention",
    "paged_attention_reference",
    "paged_attention_torch",
    "write_kv",
    "write_kv_reference",
]
