"""Roofline cost model: hand-computed values, monotonicity, validation, the docstring example."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pagedsim.engine.cost
from pagedsim.engine.cost import CostModel
from pagedsim.models.specs import GpuSpec, ModelSpec, get_gpu, get_model

# A toy model whose numbers are easy by hand: 500 params (1000 bytes fp16), hidden 4 x 8 = 32,
# 2 layers, KV bytes per token = 2 (K,V) x 2 layers x 2 kv heads x 8 x 2 bytes = 128.
TOY_MODEL = ModelSpec("toy", num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                      dtype_bytes=2, weights_bytes=1000, max_model_len=64)
TOY_GPU = GpuSpec("toy-gpu", memory_bytes=1 << 20, hbm_bytes_per_s=1000.0,
                  peak_flops_per_s=10_000.0)


def toy(**kwargs: object) -> CostModel:
    return CostModel(TOY_MODEL, TOY_GPU, step_overhead_s=0.5, **kwargs)


def test_toy_numbers() -> None:
    assert (TOY_MODEL.num_params, TOY_MODEL.hidden_size, TOY_MODEL.bytes_per_token) == \
        (500, 32, 128)


def test_memory_bound_step_by_hand() -> None:
    # 3 prefill + 2 decode = 5 tokens, 10 cached tokens read.
    # flops = 2*500*5 + 4*2*32*10 = 5000 + 2560 = 7560     -> 0.756 s at 1e4 flop/s
    # bytes = 1000 + (10 + 5) * 128 = 2920                  -> 2.92 s at 1000 B/s
    cost = toy()
    assert cost.step_flops(3, 2, 10) == 7560
    assert cost.step_bytes(3, 2, 10) == 2920
    assert cost.step_time_s(3, 2, 10) == pytest.approx(2.92 + 0.5)


def test_compute_bound_step_by_hand() -> None:
    # 40 prefill tokens, no cache read, 780 causal pairs (a 39-token prompt: 39*40/2):
    # flops = 2*500*40 + 4*2*32*780 = 40000 + 199680 = 239680 -> 23.968 s
    # bytes = 1000 + 40*128 = 6120                             -> 6.12 s
    cost = toy()
    assert cost.step_flops(40, 0, 0, prefill_attn_pairs=780) == 239_680
    assert cost.step_time_s(40, 0, 0, prefill_attn_pairs=780) == pytest.approx(23.968 + 0.5)


def test_num_gpus_divides_the_roofline_not_the_overhead() -> None:
    one, four = toy(), toy(num_gpus=4)
    assert four.step_time_s(3, 2, 10) - 0.5 == pytest.approx((one.step_time_s(3, 2, 10) - 0.5)
                                                             / 4)


def test_empty_step_costs_nothing() -> None:
    assert toy().step_time_s(0, 0, 0) == 0.0
    assert toy().step_bytes(0, 0, 0) == 0


def test_swap_time_by_hand() -> None:
    cost = toy(pcie_bytes_per_s=100.0, swap_copy_overhead_s=0.01)
    assert cost.swap_time_s(0) == 0.0
    assert cost.swap_time_s(250) == pytest.approx(2.5 + 0.01)
    assert cost.swap_time_s(250, num_copies=10) == pytest.approx(2.5 + 0.1)
    assert toy(pcie_bytes_per_s=100.0, num_gpus=2).swap_time_s(200, 1) == \
        pytest.approx(1.0 + 10e-6)


step_args = st.tuples(st.integers(0, 10_000), st.integers(0, 512), st.integers(0, 2_000_000))


@given(base=step_args, which=st.integers(0, 2), extra=st.integers(1, 100_000),
       model=st.sampled_from(["opt-13b", "llama-2-70b", "llama-3-8b"]),
       gpu=st.sampled_from(["a100-40gb", "h100-80gb"]))
def test_step_time_is_monotonic_in_every_input(base: tuple[int, int, int], which: int,
                                               extra: int, model: str, gpu: str) -> None:
    cost = CostModel(get_model(model), get_gpu(gpu))
    prefill, decode, kv = base
    if prefill + decode == 0:
        kv = 0  # reading cache needs a token to attend with
    bigger = [prefill, decode, kv]
    bigger[which] += extra
    if which == 2 and prefill + decode == 0:
        bigger[1] = 1
    assert cost.step_time_s(*bigger) >= cost.step_time_s(prefill, decode, kv)
    assert cost.step_time_s(prefill, decode, kv, prefill_attn_pairs=extra if prefill else 0) \
        >= cost.step_time_s(prefill, decode, kv)


@given(st.integers(0, 10**12), st.integers(1, 10**6), st.integers(0, 10**6))
def test_swap_time_is_monotonic(num_bytes: int, copies: int, more: int) -> None:
    cost = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))
    assert cost.swap_time_s(num_bytes + more, copies) >= cost.swap_time_s(num_bytes, copies)
    if num_bytes:
        assert cost.swap_time_s(num_bytes, copies + 1) > cost.swap_time_s(num_bytes, copies)


def test_decode_is_memory_bound_and_batching_amortizes_weights() -> None:
    cost = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))
    one = cost.step_time_s(0, 1, 500)
    many = cost.step_time_s(0, 32, 32 * 500)
    assert many < 2 * one  # 32x the tokens for well under 2x the time
    assert cost.step_flops(0, 32, 16_000) / 312e12 < cost.step_bytes(0, 32, 16_000) / 1.555e12


@pytest.mark.parametrize("kwargs", [
    {"num_gpus": 0},
    {"step_overhead_s": -1e-3},
    {"step_overhead_s": float("nan")},
    {"pcie_bytes_per_s": 0.0},
    {"swap_copy_overhead_s": float("inf")},
])
def test_config_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        CostModel(TOY_MODEL, TOY_GPU, **kwargs)


def test_type_validation() -> None:
    with pytest.raises(TypeError):
        CostModel("opt-13b", TOY_GPU)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CostModel(TOY_MODEL, TOY_GPU, num_gpus=1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("args", [(-1, 0, 0), (0, -1, 0), (0, 1, -1), (0, 0, 5)])
def test_step_argument_validation(args: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        toy().step_time_s(*args)


def test_swap_argument_validation() -> None:
    with pytest.raises(ValueError):
        toy().swap_time_s(-1)
    with pytest.raises(ValueError):
        toy().swap_time_s(10, num_copies=0)
    with pytest.raises(ValueError):
        toy().step_time_s(0, 1, 0, prefill_attn_pairs=3)


def test_docstring_example_is_what_the_code_computes() -> None:
    result = doctest.testmod(pagedsim.engine.cost, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 4 and result.failed == 0
