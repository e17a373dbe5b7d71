"""What a measured-versus-simulated comparison replays: :class:`MeasureConfig` and what
follows from it.

One configuration serves both comparisons, :mod:`pagedsim.kernels.measure` (the GPU pool)
and :mod:`pagedsim.kernels.host_measure` (a host tier behind it): the workload they replay
(seeded; a sharing workload in pieces of one block), the decoder as a pagedsim
``ModelSpec``, the scheduler's config, and the allocator the simulator alone runs,
configured exactly like the real cache's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

import pagedsim
from pagedsim.memory.schemes import kv_cache_class
from pagedsim.validate import check_choice
from pagedsim.workloads.sharing_workloads import (
    SHARING_WORKLOAD_NAMES,
    FewShotConfig,
    MultiTurnConfig,
    SystemPromptConfig,
    generate_few_shot,
    generate_multi_turn,
    generate_system_prompt,
)

from .hybrid_cache import layer_specs
from .model import ModelConfig

WORKLOADS = ("uniform", "fixed", "sharegpt", "alpaca", *SHARING_WORKLOAD_NAMES)


@dataclass(slots=True)
class MeasureConfig:
    """One comparison. Sizes are small enough for a CPU by default (a few seconds)."""

    schemes: tuple[str, ...] = ("paged", "contiguous-oracle")
    workload: str = "uniform"  # one of WORKLOADS (pagedsim's, and the sharing ones)
    num_requests: int = 16
    rate_per_s: float = 200.0  # simulated arrivals per second (the cost model's clock)
    n: int = 1
    beam_width: int = 1
    max_model_len: int = 64
    prompt_len_range: tuple[int, int] = (4, 24)
    output_len_range: tuple[int, int] = (2, 24)
    num_blocks: int = 48
    block_size: int = 4
    preemption: str = "recompute"
    policy: str = "v0"  # the scheduler's: v0 | chunked
    max_num_batched_tokens: int = 2048  # the scheduler's token budget per step
    # Sharing workloads: prompt sizes from prompt_len_range (the part after the shared
    # prefix; a multi-turn chat's new message), outputs from output_len_range.
    shared_tokens: int = 16  # system-prompt: the system prompt; few-shot: the shots
    prefix_groups: int = 2  # system-prompt: groups; few-shot: tasks; multi-turn: chats
    cpu_swap_slots: int = 4096
    seed: int = 0
    model: ModelConfig = field(default_factory=lambda: ModelConfig(
        vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=32, intermediate_size=128))
    region_buffers: bool = True  # contiguous: a torch.empty buffer per live region
    backend: str | None = None  # "triton" or "torch"; None = kernels.BACKEND

    def __post_init__(self) -> None:
        for s in self.schemes:
            kv_cache_class(s)  # raises with the valid names, or if no cache mirrors it
        if not self.schemes:
            raise ValueError("schemes must name at least one scheme")
        if len(set(self.schemes)) != len(self.schemes):  # each would only repeat its rows
            raise ValueError(f"schemes names a scheme twice: {','.join(self.schemes)}")
        check_choice("workload", self.workload, WORKLOADS)
        for name in ("num_requests", "num_blocks", "block_size", "max_model_len", "n",
                     "beam_width", "shared_tokens", "prefix_groups", "max_num_batched_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self._check_memory()
        if self.max_model_len % self.block_size:
            raise ValueError(f"max_model_len ({self.max_model_len}) must be a multiple of "
                             f"block_size ({self.block_size}) so contiguous regions are "
                             "whole blocks")

    def kv_cache_bytes(self) -> int:
        """Bytes of the paged KV cache: every slot of every layer, K and V."""
        m = self.model
        return (self.num_blocks * self.block_size * m.num_layers * 2 * m.num_kv_heads
                * m.head_dim * m.dtype.itemsize)

    def _check_memory(self) -> None:
        """The weights and the KV cache, both built before the first step, must fit in
        half the memory of the device they go to (a GPU's: 90%): refused here, naming the
        size that takes the most, rather than ending in the allocator's error or the
        system's out-of-memory kill."""
        parts = {"num_blocks": self.kv_cache_bytes(), **self.model.weights_bytes_by_part()}
        total, limit = sum(parts.values()), memory_limit_bytes(self.model.device)
        if total > limit:
            name = max(parts, key=parts.__getitem__)
            value = self.num_blocks if name == "num_blocks" else getattr(self.model, name)
            raise ValueError(
                f"{name} {value:,}: the KV cache ({_gib(parts['num_blocks'])}) and the "
                f"model's weights ({_gib(total - parts['num_blocks'])}) would take "
                f"{_gib(total)}, more than the {_gib(limit)} this run may use on "
                f"{self.model.device}; lower {name} (it takes the most)")

    @property
    def capacity_slots(self) -> int:
        return self.num_blocks * self.block_size

    def scheduler_config(self) -> pagedsim.SchedulerConfig:
        """The scheduler's config both runs of a comparison share."""
        return pagedsim.SchedulerConfig(preemption=self.preemption,
                                        cpu_swap_slots=self.cpu_swap_slots, seed=self.seed,
                                        policy=self.policy,
                                        max_num_batched_tokens=self.max_num_batched_tokens,
                                        max_model_len=self.max_model_len)


def memory_limit_bytes(device: str) -> int:
    """Bytes a measure run may build up front on ``device``: 90% of a CUDA GPU's memory,
    half of this machine's on the CPU (the rest is the runs' own and everything else's)."""
    if device.startswith("cuda"):
        return int(0.9 * torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def _gib(num_bytes: int) -> str:
    return f"{num_bytes / 2**30:,.1f} GiB"


def model_spec(cfg: ModelConfig, max_model_len: int) -> pagedsim.ModelSpec:
    """The decoder as a pagedsim ModelSpec (cost model, budget, hybrid manager's groups)."""
    dtype_bytes = cfg.dtype.itemsize
    params = (cfg.vocab_size * cfg.hidden_size * 2
              + cfg.num_layers * (cfg.hidden_size * cfg.head_dim
                                  * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
                                  + 3 * cfg.hidden_size * cfg.intermediate_size))
    return pagedsim.ModelSpec("decoder", cfg.num_layers, cfg.num_heads, cfg.num_kv_heads,
                              cfg.head_dim, dtype_bytes, params * dtype_bytes, max_model_len,
                              layers=layer_specs(cfg.num_kv_heads, cfg.head_dim,
                                                 cfg.layer_windows))


def requests_for(cfg: MeasureConfig) -> list[pagedsim.Request]:
    """The workload a comparison replays (seeded, so every run sees the same requests).

    Sharing workloads use pieces of ``block_size`` tokens, so requests share every full
    block of their common prefix."""
    if cfg.workload in SHARING_WORKLOAD_NAMES:
        return _sharing_requests(cfg)
    wl = pagedsim.WorkloadConfig(
        kind=cfg.workload, num_requests=cfg.num_requests, rate_per_s=cfg.rate_per_s,
        seed=cfg.seed, max_model_len=cfg.max_model_len, n=cfg.n, beam_width=cfg.beam_width,
        prompt_len_range=cfg.prompt_len_range, output_len_range=cfg.output_len_range)
    return pagedsim.generate_workload(wl)


def _sharing_requests(cfg: MeasureConfig) -> list[pagedsim.Request]:
    common = dict(output_len_range=cfg.output_len_range, rate_per_s=cfg.rate_per_s,
                  seed=cfg.seed, piece_tokens=cfg.block_size, max_model_len=cfg.max_model_len,
                  n=cfg.n, beam_width=cfg.beam_width)
    per_group = -(-cfg.num_requests // cfg.prefix_groups)
    if cfg.workload == "system-prompt":
        requests = generate_system_prompt(SystemPromptConfig(
            groups=cfg.prefix_groups, per_group=per_group, system_tokens=cfg.shared_tokens,
            user_len_range=cfg.prompt_len_range, **common))
    elif cfg.workload == "multi-turn":
        requests = generate_multi_turn(MultiTurnConfig(
            conversations=cfg.prefix_groups, turns=per_group,
            message_len_range=cfg.prompt_len_range, **common))
    else:
        requests = generate_few_shot(FewShotConfig(
            num_requests=cfg.num_requests, shot_tokens=cfg.shared_tokens, shots=1,
            question_len_range=cfg.prompt_len_range, tasks=cfg.prefix_groups, **common))
    return requests[:cfg.num_requests]  # sorted by arrival, ids 0.. in order


def simulator_allocator(cfg: MeasureConfig, scheme: str, **options):
    """The allocator the simulator alone uses: configured exactly like the cache's
    (``options``, e.g. a host tier's, go to :func:`pagedsim.make_allocator`)."""
    return pagedsim.make_allocator(scheme, cfg.capacity_slots, cfg.block_size,
                                   cfg.max_model_len, model=model_spec(cfg.model,
                                                                        cfg.max_model_len),
                                   align_slots=cfg.block_size, **options)
