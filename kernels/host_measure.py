"""Measured versus simulated over both tiers: a prefix cache with a host tier behind it.

:mod:`pagedsim.kernels.measure` compares the simulator's account of the GPU pool with a
scan of a real cache. With a host tier the same workload runs twice again, through the
simulator alone and through the real executor (:mod:`pagedsim.kernels.executor`, whose
cache's allocator has the tier and whose :class:`~pagedsim.kernels.host_cache.HostKV`
holds the host blocks on the CPU), and after every step:

    meas_token_slots  == sim_token + sim_cached   the GPU scan (written slots)
    meas_cached_slots == sim_cached               of them, outside every live table
    meas_host_blocks  == sim_host_blocks          host blocks written == entries held

A write-back that never ran, a load into the wrong block, or a released block not
scrubbed shows in the first two; a host copy that never ran or a host entry that lost
its block in the third. Both runs must make the same plans, the host tier's hits
included (``sim_host_hit_tokens`` from the simulator's plans). That the loaded K/V is
the right K/V is the logits test's (``tests/kernels/test_kernels_host_tier.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import pagedsim

from .executor import RealExecutor
from .host_cache import host_tier_cache
from .hybrid_cache import held_blocks
from .kv_cache import KVCacheConfig
from .measure import PLAN_COLUMNS, largest_abs
from .measure_config import MeasureConfig, model_spec, requests_for, simulator_allocator
from .model import Decoder


@dataclass(slots=True)
class HostMeasurement:
    """One scheme's comparison over both tiers (``frame``: one row per step)."""

    scheme: str
    frame: object  # pandas DataFrame
    max_token_gap_slots: int
    max_cached_gap_slots: int
    max_host_gap_blocks: int
    host_hit_tokens: int  # prompt tokens loaded from the host tier, whole run
    loaded_blocks: int  # host -> GPU copies the executor carried out
    offloaded_blocks: int  # GPU -> host


def measure_host_tier(cfg: MeasureConfig, scheme: str, host_blocks: int,
                      write_through: bool = False) -> HostMeasurement:
    """Run ``scheme`` with a host tier of ``host_blocks`` blocks through the simulator
    and through the real executor; compare both tiers at every step."""
    import pandas as pd

    requests = requests_for(cfg)
    spec = model_spec(cfg.model, cfg.max_model_len)
    gpu = pagedsim.get_gpu("h200-141gb")
    cost = pagedsim.CostModel(spec, gpu, host_link_bytes_per_s=gpu.host_link_bytes_per_s)
    sched = cfg.scheduler_config()

    # 1. The simulator alone, its host tier's occupancy and hits after every step.
    alloc = simulator_allocator(cfg, scheme, host_cache_blocks=host_blocks,
                                host_write_through=write_through)
    sim_host: list[tuple[int, int, int]] = []

    def sim_step(_, plan) -> None:
        sim_host.append((plan.step, len(alloc.host), plan.prefix_host_hit_tokens))

    predicted = pagedsim.simulate(requests, alloc, cost, sched, scheme=scheme,
                                  progress=False, on_step=sim_step).steps()

    # 2. The real executor over a cache with the same tier.
    c = cfg.model
    config = KVCacheConfig(c.num_layers, c.num_kv_heads, c.head_dim, cfg.num_blocks,
                           cfg.block_size, c.dtype, c.device)
    cache = host_tier_cache(config, scheme, host_blocks, write_through, cfg.max_model_len)
    cache.backend = cfg.backend
    executor = RealExecutor(Decoder(cfg.model), cache, seed=cfg.seed)
    assert executor.host is not None
    rows: list[tuple[int, int, int, int]] = []

    def on_step(sched, plan) -> None:
        executor.execute(sched, plan)
        per_block = cache.written_per_block()
        live = held_blocks(cache)
        written = int(per_block.sum())
        rows.append((plan.step, written, written - int(per_block[sorted(live)].sum()),
                     executor.host.written_blocks()))

    real = pagedsim.simulate(requests, cache.allocator, cost, sched, scheme=scheme,
                             progress=False, on_step=on_step).steps()
    if not predicted[list(PLAN_COLUMNS)].equals(real[list(PLAN_COLUMNS)]):
        raise AssertionError(f"{scheme}: the simulator and the real executor made different "
                             "plans for the same workload")
    measured = pd.DataFrame.from_records(rows, columns=[
        "step", "meas_token_slots", "meas_cached_slots", "meas_host_blocks"])
    sim = pd.DataFrame.from_records(sim_host, columns=["step", "sim_host_blocks",
                                                       "sim_host_hit_tokens"])
    frame = predicted[["step", "token", "cached", "prefix_hit_tokens", "evictions"]].rename(
        columns={"token": "sim_token", "cached": "sim_cached"})
    frame = frame.merge(sim, on="step", how="left").merge(measured, on="step", how="left")
    frame.insert(0, "scheme", scheme)
    frame["token_gap_slots"] = frame["meas_token_slots"] - frame["sim_token"] \
        - frame["sim_cached"]
    frame["cached_gap_slots"] = frame["meas_cached_slots"] - frame["sim_cached"]
    frame["host_gap_blocks"] = frame["meas_host_blocks"] - frame["sim_host_blocks"]
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return HostMeasurement(
        scheme=scheme, frame=frame,
        max_token_gap_slots=largest_abs(frame["token_gap_slots"]),
        max_cached_gap_slots=largest_abs(frame["cached_gap_slots"]),
        max_host_gap_blocks=largest_abs(frame["host_gap_blocks"]),
        host_hit_tokens=int(frame["sim_host_hit_tokens"].sum()),
        loaded_blocks=executor.host.num_loaded_blocks,
        offloaded_blocks=executor.host.num_offloaded_blocks)
