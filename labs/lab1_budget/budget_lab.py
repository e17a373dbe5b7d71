"""Lab 1: the KV-cache memory budget, as an LLM serving engine computes it at start-up.

You write four small pieces of arithmetic (tasks 1.1 to 1.4 of the handout, README.md):

1. how many bytes of K and V one token keeps, with grouped-query attention (GQA);
2. how much GPU memory is left for the KV cache once the engine has claimed its fraction
   ``gpu_memory_utilization`` and subtracted the weights and the activation peak;
3. how many blocks of ``block_size`` token slots that memory holds;
4. how many sequences fit into those blocks, and how many slots a sequence's last block
   wastes.

Units: every size is in bytes (``int``); 1 GiB = 2**30 bytes. Lengths are in tokens.
The graders only call the functions through ``adapters.py``; keep the names and
signatures of the functions below (you may add helpers of your own). Do not import
``pagedsim.models.budget``, ``pagedsim.models.specs`` or ``pagedsim.models.model_spec``:
they compute these numbers, and the grader scores a submission that imports them 0.
"""

from __future__ import annotations

from dataclasses import dataclass

#: One binary gigabyte (what nvidia-smi and the vLLM paper call a GB), in bytes.
GiB = 2**30


@dataclass(frozen=True, slots=True)
class LabModel:
    """The shape of a decoder-only transformer, as far as its KV cache cares.

    ``num_heads`` query heads share ``num_kv_heads`` key/value heads (grouped-query
    attention; ``num_kv_heads == num_heads`` is plain multi-head attention).
    ``head_dim`` is the width of one head (elements); ``dtype_bytes`` the bytes of one
    element of the cache (2 for fp16/bf16).
    """

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int

    def __post_init__(self) -> None:
        for field in ("num_layers", "num_heads", "num_kv_heads", "head_dim", "dtype_bytes"):
            value = getattr(self, field)
            if type(value) is not int or value < 1:
                raise ValueError(f"{self.name}: {field} must be an integer >= 1, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.name}: num_heads ({self.num_heads}) must be a multiple "
                             f"of num_kv_heads ({self.num_kv_heads})")


@dataclass(frozen=True, slots=True)
class LabBudget:
    """The KV pool an engine builds: its bytes, the bytes of one token and of one block,
    the number of whole blocks, and the token slots those blocks hold."""

    kv_cache_bytes: int
    bytes_per_token: int
    bytes_per_block: int
    num_blocks: int
    max_tokens: int


# --------------------------------------------------------------------------------------
# Task 1.1: bytes per token, bytes per sequence.


def bytes_per_token(model: LabModel) -> int:
    """Bytes of KV cache one token keeps, over all layers (bytes)."""
    # BEGIN SOLUTION lab 1.1: K and V, every layer, every KV head (not query heads)
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * model.dtype_bytes
    # END SOLUTION


def sequence_kv_bytes(model: LabModel, num_tokens: int) -> int:
    """Bytes of KV cache a sequence of ``num_tokens`` tokens keeps (bytes)."""
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens!r}")
    # BEGIN SOLUTION lab 1.1: each token keeps its own K and V
    return num_tokens * bytes_per_token(model)
    # END SOLUTION


# --------------------------------------------------------------------------------------
# Task 1.2: what gpu_memory_utilization leaves for the KV cache.


def kv_cache_bytes(gpu_memory_bytes: int, gpu_memory_utilization: float, weights_bytes: int,
                   activation_bytes: int, num_gpus: int = 1) -> int:
    """Bytes the engine gives its KV cache, over all ``num_gpus`` GPUs together.

    ``gpu_memory_bytes`` is one GPU's memory; the model is sharded over ``num_gpus`` GPUs,
    so their memory adds up. The engine claims ``gpu_memory_utilization`` (in (0, 1]) of
    the memory of all of them, rounded down to whole bytes; from that it subtracts the
    weights (``weights_bytes``, all shards together) and the activation peak
    (``activation_bytes``, all GPUs together). Raise ``ValueError`` (naming the bad value)
    if the utilization is not in (0, 1] or if nothing would be left for the cache.
    """
    # BEGIN SOLUTION lab 1.2: claim a fraction of ALL memory, then subtract
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], "
                         f"got {gpu_memory_utilization!r}")
    total = gpu_memory_bytes * num_gpus
    kv = int(total * gpu_memory_utilization) - weights_bytes - activation_bytes
    if kv <= 0:
        raise ValueError(f"no room for a KV cache: weights ({weights_bytes} B) and activations "
                         f"({activation_bytes} B) take all of the {gpu_memory_utilization} "
                         f"x {total} B claimed")
    return kv
    # END SOLUTION


# --------------------------------------------------------------------------------------
# Task 1.3: blocks, and the whole budget.


def num_blocks(kv_bytes: int, token_bytes: int, block_size: int = 16) -> int:
    """Whole blocks of ``block_size`` token slots that ``kv_bytes`` bytes hold, when one
    token keeps ``token_bytes`` bytes. Raise ``ValueError`` if not even one block fits."""
    # BEGIN SOLUTION lab 1.3: a block keeps block_size tokens; whole blocks only
    blocks = kv_bytes // (block_size * token_bytes)
    if blocks < 1:
        raise ValueError(f"{kv_bytes} B hold no block of {block_size} tokens "
                         f"x {token_bytes} B")
    return blocks
    # END SOLUTION


def kv_budget(model: LabModel, gpu_memory_bytes: int, gpu_memory_utilization: float,
              weights_bytes: int, activation_bytes: int, block_size: int = 16,
              num_gpus: int = 1) -> LabBudget:
    """The whole budget of ``model`` on ``num_gpus`` GPUs of ``gpu_memory_bytes`` each."""
    # BEGIN SOLUTION lab 1.3: chain tasks 1.1 to 1.3 into a LabBudget
    token_bytes = bytes_per_token(model)
    kv = kv_cache_bytes(gpu_memory_bytes, gpu_memory_utilization, weights_bytes,
                        activation_bytes, num_gpus)
    blocks = num_blocks(kv, token_bytes, block_size)
    return LabBudget(kv_cache_bytes=kv, bytes_per_token=token_bytes,
                     bytes_per_block=block_size * token_bytes, num_blocks=blocks,
                     max_tokens=blocks * block_size)
    # END SOLUTION


# --------------------------------------------------------------------------------------
# Task 1.4: what fits.


def blocks_for_tokens(num_tokens: int, block_size: int = 16) -> int:
    """Blocks a sequence of ``num_tokens`` tokens occupies (a started block is taken whole)."""
    # BEGIN SOLUTION lab 1.4: round up: the last block may be partly empty
    return -(-num_tokens // block_size)
    # END SOLUTION


def wasted_slots(num_tokens: int, block_size: int = 16) -> int:
    """Slots left empty in the last block of a sequence of ``num_tokens`` tokens."""
    # BEGIN SOLUTION lab 1.4: the slots of its blocks minus its tokens
    return blocks_for_tokens(num_tokens, block_size) * block_size - num_tokens
    # END SOLUTION


def max_num_sequences(blocks: int, block_size: int, seq_len: int) -> int:
    """How many sequences of ``seq_len`` tokens fit into ``blocks`` blocks at once."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len!r}")
    # BEGIN SOLUTION lab 1.4: each sequence needs its whole blocks
    return blocks // blocks_for_tokens(seq_len, block_size)
    # END SOLUTION
