"""The only bridge between the graders (test_lab8.py) and your code (sizing_lab.py).

The graders call these functions with plain values (a config.json as a dict, numbers,
strings) and never import sizing_lab themselves, so you may organise sizing_lab.py as
you like as long as these still work. Sizes are in bytes, lengths in tokens.
"""

from __future__ import annotations

import sizing_lab as lab

#: The keys of vllm_kv_cache's dict the graders read.
VLLM_KEYS = ("page_bytes", "group_size", "num_groups", "num_blocks",
             "gpu_kv_cache_size_tokens", "blocks_per_request", "max_concurrency",
             "request_bytes")


def read_layers(config: dict) -> list[tuple[str, int, int, int]]:
    return [tuple(layer) for layer in lab.read_layers(config)]


def kv_cache_dtype_bytes(kv_cache_dtype: str) -> int:
    return lab.kv_cache_dtype_bytes(kv_cache_dtype)


def shard_layer(layer: tuple[str, int, int, int], tensor_parallel_size: int
                ) -> tuple[str, int, int, int]:
    return tuple(lab.shard_layer(tuple(layer), tensor_parallel_size))


def bytes_per_token(config: dict, kv_cache_dtype: str = "auto",
                    tensor_parallel_size: int = 1) -> int:
    return lab.bytes_per_token(config, kv_cache_dtype, tensor_parallel_size)


def request_kv_bytes(config: dict, num_tokens: int, kv_cache_dtype: str = "auto",
                     tensor_parallel_size: int = 1) -> int:
    return lab.request_kv_bytes(config, num_tokens, kv_cache_dtype, tensor_parallel_size)


def vllm_kv_cache(config: dict, available_kv_bytes: int, max_model_len: int, *,
                  tensor_parallel_size: int = 1, kv_cache_dtype: str = "auto",
                  block_size: int = 16, max_num_batched_tokens: int = 8192) -> dict:
    """Your vllm_kv_cache's dict, the keys of :data:`VLLM_KEYS` only."""
    result = lab.vllm_kv_cache(config, available_kv_bytes, max_model_len,
                               tensor_parallel_size=tensor_parallel_size,
                               kv_cache_dtype=kv_cache_dtype, block_size=block_size,
                               max_num_batched_tokens=max_num_batched_tokens)
    return {key: result[key] for key in VLLM_KEYS}


def estimated_max_model_len(config: dict, available_kv_bytes: int, max_model_len: int, *,
                            tensor_parallel_size: int = 1, kv_cache_dtype: str = "auto",
                            block_size: int = 16, max_num_batched_tokens: int = 8192) -> int:
    return lab.estimated_max_model_len(config, available_kv_bytes, max_model_len,
                                       tensor_parallel_size=tensor_parallel_size,
                                       kv_cache_dtype=kv_cache_dtype, block_size=block_size,
                                       max_num_batched_tokens=max_num_batched_tokens)
