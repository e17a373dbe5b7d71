"""The only bridge between the graders (test_lab1.py) and your code (budget_lab.py).

The graders call these functions with plain numbers and never import budget_lab
themselves, so you may organise budget_lab.py as you like as long as these still work.
Sizes are in bytes, lengths in tokens.
"""

from __future__ import annotations

import budget_lab


def make_model(num_layers: int, num_heads: int, num_kv_heads: int, head_dim: int,
               dtype_bytes: int, name: str = "model") -> budget_lab.LabModel:
    return budget_lab.LabModel(name=name, num_layers=num_layers, num_heads=num_heads,
                               num_kv_heads=num_kv_heads, head_dim=head_dim,
                               dtype_bytes=dtype_bytes)


def bytes_per_token(num_layers: int, num_heads: int, num_kv_heads: int, head_dim: int,
                    dtype_bytes: int) -> int:
    model = make_model(num_layers, num_heads, num_kv_heads, head_dim, dtype_bytes)
    return budget_lab.bytes_per_token(model)


def sequence_kv_bytes(shape: tuple[int, int, int, int, int], num_tokens: int) -> int:
    """``shape`` = (num_layers, num_heads, num_kv_heads, head_dim, dtype_bytes)."""
    return budget_lab.sequence_kv_bytes(make_model(*shape), num_tokens)


def kv_cache_bytes(gpu_memory_bytes: int, gpu_memory_utilization: float, weights_bytes: int,
                   activation_bytes: int, num_gpus: int = 1) -> int:
    return budget_lab.kv_cache_bytes(gpu_memory_bytes, gpu_memory_utilization, weights_bytes,
                                     activation_bytes, num_gpus)


def num_blocks(kv_bytes: int, token_bytes: int, block_size: int) -> int:
    return budget_lab.num_blocks(kv_bytes, token_bytes, block_size)


def kv_budget(shape: tuple[int, int, int, int, int], gpu_memory_bytes: int,
              gpu_memory_utilization: float, weights_bytes: int, activation_bytes: int,
              block_size: int, num_gpus: int) -> dict[str, int]:
    """The budget as a dict: kv_cache_bytes, bytes_per_token, bytes_per_block, num_blocks,
    max_tokens."""
    budget = budget_lab.kv_budget(make_model(*shape), gpu_memory_bytes, gpu_memory_utilization,
                                  weights_bytes, activation_bytes, block_size, num_gpus)
    return {key: getattr(budget, key) for key in
            ("kv_cache_bytes", "bytes_per_token", "bytes_per_block", "num_blocks", "max_tokens")}


def blocks_for_tokens(num_tokens: int, block_size: int) -> int:
    return budget_lab.blocks_for_tokens(num_tokens, block_size)


def wasted_slots(num_tokens: int, block_size: int) -> int:
    return budget_lab.wasted_slots(num_tokens, block_size)


def max_num_sequences(blocks: int, block_size: int, seq_len: int) -> int:
    return budget_lab.max_num_sequences(blocks, block_size, seq_len)
