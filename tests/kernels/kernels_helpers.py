"""Shared helpers for the kernel tests (tests/kernels/test_kernels_*.py): builders,
tolerances, a tiny decoder and a fixture that keeps torch to one thread.

Not a conftest: the project's tests/conftest.py registers the hypothesis profiles
(``ci``, ``dev``); these helpers only read whichever profile is loaded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, settings

from pagedsim import kernels
from pagedsim.kernels.model import ModelConfig

# Relative error bounds: ||out - ref|| / ||ref||, as the issue states them.
REL_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: backends to run every kernel test on: the default one, plus torch when it differs.
BACKENDS = ["torch"] + (["triton"] if kernels.INFO.triton_installed else [])


def kernel_settings(max_examples: int) -> settings:
    """Few examples by default (the Triton interpreter is slow): at most ``max_examples``,
    fewer if the loaded profile asks for fewer. Under the ``dev`` profile, as many as
    it asks for. No deadline: interpreter speed varies with the machine's load."""
    profile_examples = settings.default.max_examples
    if settings.get_current_profile_name() != "dev":
        profile_examples = min(max_examples, profile_examples)
    return settings(
        max_examples=profile_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp64 (NaN anywhere in ``out`` gives NaN, which fails)."""
    out64, ref64 = out.double().cpu(), ref.double().cpu()
    return float((out64 - ref64).norm() / ref64.norm())


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matmuls: a second thread only adds contention on a shared 2-core machine.
    Autouse in every module that imports it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_model(seed: int = 0) -> ModelConfig:
    """A two-layer decoder of hidden size 64 (4 query heads, 2 kv heads of 32): fast
    enough on a CPU for a test to run whole workloads through it."""
    return ModelConfig(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=32, intermediate_size=128, seed=seed)


@dataclass(slots=True)
class PagedBatch:
    """Random decode-attention inputs over a cache whose blocks are shuffled."""

    q: torch.Tensor  # [S, H, D]
    k_cache: torch.Tensor  # [B, BS, KVH, D]
    v_cache: torch.Tensor  # [B, BS, KVH, D]
    block_tables: torch.Tensor  # int32 [S, MB], -1 past each sequence's last block
    seq_lens: torch.Tensor  # int32 [S]


def make_paged_batch(
    seq_lens: list[int],
    num_kv_heads: int,
    group: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    seed: int,
    spare_blocks: int = 3,
    device: str = kernels.DEVICE,
) -> PagedBatch:
    """Fresh random q/K/V (never zeros); each sequence's blocks scattered through the cache.

    Slots past each sequence's length in its last block hold NaN.

    ``spare_blocks`` extra blocks hold random data no table points at, so a kernel
    that reads the wrong block gets a wrong answer rather than a lucky zero.
    """
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    needed = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(needed) + spare_blocks
    max_blocks = max(needed) + rng.randint(0, 2)  # tables may be wider than needed
    perm = list(range(num_blocks))
    rng.shuffle(perm)
    tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)
    it = iter(perm)
    for s, nb in enumerate(needed):
        for b in range(nb):
            tables[s, b] = next(it)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype=dtype, device=device)

    num_heads = num_kv_heads * group
    k_cache = rand(num_blocks, block_size, num_kv_heads, head_dim)
    v_cache = rand(num_blocks, block_size, num_kv_heads, head_dim)
    # The unused tail of each last block is NaN: a kernel that reads past seq_len fails.
    for s, n in enumerate(seq_lens):
        if n % block_size:
            last = int(tables[s, (n - 1) // block_size])
            k_cache[last, n % block_size:] = float("nan")
            v_cache[last, n % block_size:] = float("nan")
    return PagedBatch(
        q=rand(len(seq_lens), num_heads, head_dim),
        k_cache=k_cache,
        v_cache=v_cache,
        block_tables=tables.to(device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
    )


def device_for(backend_name: str) -> str:
    """Where a backend's tensors must live (the triton interpreter wants CPU tensors)."""
    if backend_name == "triton":
        return kernels.DEVICE
    return "cuda" if torch.cuda.is_available() else "cpu"
