"""Planted bugs of lab 1's reference (never released): each is a mistake students make,
and each must cost points in at least one of the tasks named in ``caught_by``."""

from pagedsim.labs.mutants import Mutant

MUTANTS = [
    # GQA ignored: one K and V per query head, as in plain multi-head attention.
    Mutant(name="gqa-ignored", file="budget_lab.py",
           old="model.num_kv_heads * model.head_dim", new="model.num_heads * model.head_dim",
           caught_by=("lab1_1",)),
    # Only K (or only V) counted.
    Mutant(name="forgets-k-and-v", file="budget_lab.py",
           old="return 2 * model.num_layers", new="return model.num_layers",
           caught_by=("lab1_1",)),
    # gpu_memory_utilization applied to what the weights leave instead of to all memory.
    Mutant(name="utilization-of-free-memory", file="budget_lab.py",
           old="int(total * gpu_memory_utilization) - weights_bytes",
           new="int((total - weights_bytes) * gpu_memory_utilization)",
           caught_by=("lab1_2",)),
    # Blocks counted as tokens: the pool "holds" block_size times too many blocks.
    Mutant(name="blocks-ignore-block-size", file="budget_lab.py",
           old="kv_bytes // (block_size * token_bytes)", new="kv_bytes // token_bytes",
           caught_by=("lab1_3",)),
    # The last, partly filled block forgotten (rounds down instead of up).
    Mutant(name="last-block-dropped", file="budget_lab.py",
           old="-(-num_tokens // block_size)", new="num_tokens // block_size",
           caught_by=("lab1_4",)),
]
