"""The block manager against a lean baseline on one mixed stream of allocate / append /
free (``python -m pagedsim.bench`` prints it; ``scripts/nanovllm_blocks.py`` runs
nano-vllm's BlockManager on the same stream).

The stream: 200,000 operations on 8,192 blocks of 16 slots, prompts of 1,024 to 2,048
tokens. While a prompt fits (free blocks beyond a margin for the running sequences'
appends), about one operation in 40 admits a new sequence; the others append one token
to a live sequence, and one in 300 frees one. It is drawn once from a seeded generator
and replayed through each allocator, so every one does exactly the same work.

The baseline, :class:`LeanAllocator`, is the least a block allocator can be in Python: a
free list and a dict of block tables (no reference counts, no forks, no checks). A ratio
of 1.0 or more says the manager's generality (pools, reference counts, copy-on-write,
validation, accounting counters) costs nothing on these paths.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .memory.paged import PagedAllocator

#: (op, seq_id, num_tokens): op 0 allocates a ``num_tokens`` prompt, 1 appends, 2 frees.
Op = tuple[int, int, int]


def mixed_stream(num_ops: int = 200_000, num_blocks: int = 8192, block_size: int = 16,
                 seed: int = 0, free_rate: float = 0.0033) -> list[Op]:
    """The operations (see the module docstring); a stream any allocator of
    ``num_blocks`` blocks of ``block_size`` slots can replay without running out.
    ``free_rate``: the chance that an operation frees a live sequence. Once the pool is
    full, admissions follow frees, so it sets the turnover: how many tokens a sequence
    decodes between its allocate and its free (``scripts/nanovllm_speed.py`` prints it)."""
    if not 0.0 < free_rate < 0.5:
        raise ValueError(f"free_rate must be in (0, 0.5), got {free_rate!r}")
    rng = random.Random(seed)
    live: list[int] = []
    lens: dict[int, int] = {}
    used = 0  # blocks the live sequences hold
    ops: list[Op] = []
    next_id = 0
    margin = 64  # blocks left for the live sequences' appends
    while len(ops) < num_ops:
        r = rng.random()
        prompt = rng.randint(1024, 2048)
        need = -(-prompt // block_size)
        if (not live or r < 0.025) and used + need + margin <= num_blocks:
            ops.append((0, next_id, prompt))
            live.append(next_id)
            lens[next_id] = prompt
            used += need
            next_id += 1
        elif live and (r > 1.0 - free_rate or used + margin > num_blocks):
            s = live.pop(rng.randrange(len(live)))
            ops.append((2, s, 0))
            used -= -(-lens.pop(s) // block_size)
        elif live:
            s = live[rng.randrange(len(live))]
            if lens[s] % block_size == 0:
                used += 1
            lens[s] += 1
            ops.append((1, s, 0))
    return ops


class LeanAllocator:
    """The baseline: a free list and a dict of block tables, nothing else."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.block_size = block_size
        self.free_blocks = list(range(num_blocks - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}

    def allocate(self, seq_id: int, num_tokens: int) -> None:
        n = -(-num_tokens // self.block_size)
        table = self.free_blocks[-n:]
        table.reverse()  # the order n pops would give (the manager's, so tables agree)
        del self.free_blocks[-n:]
        self.tables[seq_id] = table
        self.lens[seq_id] = num_tokens

    def append_slot(self, seq_id: int) -> int:
        n = self.lens[seq_id]
        table = self.tables[seq_id]
        if n % self.block_size == 0:
            table.append(self.free_blocks.pop())
        self.lens[seq_id] = n + 1
        return table[-1] * self.block_size + n % self.block_size

    def free(self, seq_id: int) -> None:
        self.free_blocks.extend(reversed(self.tables.pop(seq_id)))
        del self.lens[seq_id]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Garbage collection off inside (as ``timeit`` times), on again after if it was:
    a collection that happens to fall in one replay and not another is not the
    allocator's cost."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def replay(alloc, ops: list[Op]) -> float:
    """Seconds ``alloc`` takes to replay ``ops`` (``allocate``, ``append_slot``, ``free``),
    garbage collection paused."""
    allocate, append, free = alloc.allocate, alloc.append_slot, alloc.free
    with gc_paused():
        t0 = time.perf_counter()
        for op, s, n in ops:
            if op == 1:
                append(s)
            elif op == 0:
                allocate(s, n)
            else:
                free(s)
        return time.perf_counter() - t0


def bench_mixed(num_ops: int = 200_000, repeats: int = 3) -> dict[str, float]:
    """Operations per second of the paged manager and the lean baseline on one stream
    (best of ``repeats``, the two interleaved so that load on the machine hits both)."""
    ops = mixed_stream(num_ops)
    best = {"paged": float("inf"), "lean": float("inf")}
    for _ in range(repeats):
        best["lean"] = min(best["lean"], replay(LeanAllocator(8192, 16), ops))
        best["paged"] = min(best["paged"], replay(PagedAllocator(8192, 16), ops))
    return {name: len(ops) / seconds for name, seconds in best.items()}


def mixed_report(num_ops: int) -> str:
    """The benchmark's lines for the mixed stream, with the ratio measured in this run."""
    rates = bench_mixed(num_ops)
    ratio = rates["paged"] / rates["lean"]
    return (f"mixed allocate/append/free, paged {rates['paged']:>12,.0f} ops/s\n"
            f"  same stream, lean list+dict     {rates['lean']:>12,.0f} ops/s"
            f"   (paged / lean = {ratio:.2f}x; target >= 1.0x)")
