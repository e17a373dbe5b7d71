"""The cost model's sliding-window reads (pagedsim.engine.cost): a scheme whose kernel
knows the windows (the hybrid manager) reads a sliding layer's K/V only within its
window; all-full and full-attention models read every layer's whole context."""

from __future__ import annotations

import pytest

from pagedsim.engine.cost import CostModel
from pagedsim.engine.scheduler import SchedulerConfig
from pagedsim.engine.simulator import simulate
from pagedsim.memory.schemes import make_allocator
from pagedsim.metrics.sim_result import STEP_COLUMNS
from pagedsim.models.specs import get_gpu, get_model
from pagedsim.workloads.workload import Request

GPT_OSS = get_model("gpt-oss-120b")
H100 = get_gpu("h100-80gb")
#: gpt-oss-120b by hand: 36 layers, 18 of them sliding with a 128-token window, 8 KV
#: heads of 64 values, bf16: one sliding layer holds 2 x 8 x 64 x 2 = 2,048 bytes a token.
SLIDING_LAYERS, WINDOW, LAYER_BYTES = 18, 128, 2 * 8 * 64 * 2


def test_gpt_oss_is_what_the_hand_numbers_say() -> None:
    layers = GPT_OSS.kv_layers
    assert len(layers) == 36
    assert sum(layer.kind == "sliding" and layer.window_tokens == WINDOW
               for layer in layers) == SLIDING_LAYERS
    assert GPT_OSS.bytes_per_token == 36 * LAYER_BYTES


@pytest.mark.parametrize("block_size", [None, 16])
def test_a_window_bounds_the_sliding_layers_reads(block_size: int | None) -> None:
    """One sequence decoding at context 10,000: the sliding layers read 128 tokens, not
    10,000; the full layers and the written slot are the same."""
    full = CostModel(GPT_OSS, H100, block_size=block_size)
    windowed = full.with_windows((WINDOW,))
    gathered = (lambda n: n) if block_size is None else \
        (lambda n: round(n * (1 + 3.68 / 16)))  # block-table gathers, 3.68 tokens a block
    saved = (gathered(10_000) - gathered(WINDOW)) * SLIDING_LAYERS * LAYER_BYTES
    assert full.step_bytes(0, 1, 10_000) - windowed.step_bytes(0, 1, 10_000, [WINDOW]) == saved
    if block_size is None:
        assert saved == 9_872 * 36_864 == 363_921_408
    pairs_saved = (10_000 - WINDOW) * SLIDING_LAYERS
    assert (full.step_flops(0, 1, 10_000) - windowed.step_flops(0, 1, 10_000, 0, [WINDOW])
            == 4 * GPT_OSS.hidden_size * pairs_saved)
    assert windowed.step_time_s(0, 1, 10_000, 0, [WINDOW]) < full.step_time_s(0, 1, 10_000)
    # Within the window nothing changes.
    assert windowed.step_bytes(0, 1, 100, [100]) == full.step_bytes(0, 1, 100)
    assert windowed.step_time_s(0, 1, 100, 0, [100]) == full.step_time_s(0, 1, 100)


def test_window_validation() -> None:
    full = CostModel(GPT_OSS, H100)
    with pytest.raises(ValueError, match="sliding window of gpt-oss-120b"):
        full.with_windows((100,))
    with pytest.raises(ValueError, match="sliding window of opt-13b"):
        CostModel(get_model("opt-13b"), get_gpu("a100-40gb")).with_windows((WINDOW,))
    windowed = full.with_windows((WINDOW,))
    with pytest.raises(ValueError, match="one count per window"):
        windowed.step_time_s(0, 1, 500)
    with pytest.raises(ValueError, match="exceeds kv_tokens_read"):
        windowed.step_time_s(0, 1, 100, 0, [128])
    with pytest.raises(ValueError, match="one count per window"):
        full.step_bytes(0, 1, 500, [128])  # no windows: no counts


def _decode_times(scheme: str) -> tuple[list[tuple[int, float]], CostModel]:
    """(context, step time) of each decode step of one 1,000-token prompt, 20 outputs."""
    alloc = make_allocator(scheme, 16 * 400, 16, model=GPT_OSS)
    res = simulate([Request(0, 0.0, 1000, 20)], alloc, CostModel(GPT_OSS, H100),
                   SchedulerConfig(), progress=False)
    dt, decodes = STEP_COLUMNS.index("step_time_s"), STEP_COLUMNS.index("decode_seqs")
    rows = [r for r in res.step_rows if r[decodes]]
    paged = CostModel(GPT_OSS, H100, block_size=16)  # the kernel reads blocks of 16
    return [(1000 + i + 1, r[dt]) for i, r in enumerate(rows)], paged


def test_hybrid_steps_read_windows_and_all_full_steps_whole_contexts() -> None:
    hybrid, cost = _decode_times("hybrid")
    all_full, _ = _decode_times("all-full")
    assert len(hybrid) == len(all_full) == 19  # the prefill sampled the first token
    for (context, h), (_, f) in zip(hybrid, all_full, strict=True):
        assert f == cost.step_time_s(0, 1, context)
        assert h == cost.with_windows((WINDOW,)).step_time_s(0, 1, context, 0, [WINDOW])
        assert h < f
