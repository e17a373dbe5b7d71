"""Cost profiles: the data file's profiles are valid and sourced, the paper profile is the
plain roofline, and bad profiles are refused with a line naming the field."""

from __future__ import annotations

import json

import pytest

from pagedsim.engine.cost import CostModel
from pagedsim.models.cost_profiles import (
    DEFAULT_PROFILE,
    CostProfile,
    CostProfileError,
    builtin_profiles,
    get_cost_profile,
)
from pagedsim.models.specs import GPUS, get_gpu, get_model


def test_builtin_profiles_cover_every_gpu_and_cite_each_constant() -> None:
    profiles = builtin_profiles()
    assert DEFAULT_PROFILE == "paper" and {"paper", "vllm"} <= set(profiles)
    for profile in profiles.values():
        for gpu in GPUS:
            hbm, flops = profile.efficiencies(gpu)
            assert 0 < hbm <= 1 and 0 < flops <= 1
        for key in ("hbm_efficiency", "flops_efficiency", "step_overhead_s"):
            assert profile.sources.get(key), (profile.name, key)


def test_paper_profile_is_the_plain_roofline_bit_for_bit() -> None:
    """The default run's step times must not move: the paper profile's CostModel gives
    the same floats as a CostModel with no profile at all."""
    model, gpu = get_model("opt-13b"), get_gpu("a100-40gb")
    plain = CostModel(model, gpu)
    paper = CostModel(model, gpu, **get_cost_profile("paper").cost_kwargs(gpu.name))
    for step in ((0, 32, 16_000), (512, 0, 0), (300, 7, 4_000), (0, 1, 10)):
        assert paper.step_time_s(*step) == plain.step_time_s(*step)
    assert paper.decode_steps_s(20, 3_000, 50) == plain.decode_steps_s(20, 3_000, 50)


def test_vllm_profile_slows_steps_and_charges_tensor_parallelism() -> None:
    model, gpu = get_model("llama-3.1-70b"), get_gpu("h100-80gb")
    vllm = get_cost_profile("vllm")
    one = CostModel(model, gpu, num_gpus=4, **vllm.cost_kwargs(gpu.name))
    plain = CostModel(model, gpu, num_gpus=4)
    assert one.step_time_s(0, 8, 8_000) > plain.step_time_s(0, 8, 8_000)
    free = {**vllm.cost_kwargs(gpu.name), "allreduce_s": 0.0, "tp_link_bytes_per_s": None}
    no_ar = CostModel(model, gpu, num_gpus=4, **free)
    extra = one.step_time_s(0, 8, 8_000) - no_ar.step_time_s(0, 8, 8_000)
    assert extra == pytest.approx(2 * model.num_layers * one.allreduce_time_s(8))
    single = CostModel(model, gpu, num_gpus=1, **vllm.cost_kwargs(gpu.name))
    single_no_ar = CostModel(model, gpu, num_gpus=1, **free)
    assert single.step_time_s(0, 8, 8_000) == single_no_ar.step_time_s(0, 8, 8_000)


def test_an_allreduce_costs_its_latency_plus_its_bytes_over_the_link() -> None:
    """Ring all-reduce: each of N GPUs sends 2 (N - 1) / N of the tokens x hidden x dtype
    activations; a prefill chunk of thousands of tokens pays for its bytes, a decode step
    of a few tokens mostly for the latency."""
    model, gpu = get_model("llama-3.1-8b"), get_gpu("a100-80gb")
    cost = CostModel(model, gpu, num_gpus=4, allreduce_s=1e-5, tp_link_bytes_per_s=100e9)
    activations = 2048 * model.hidden_size * model.dtype_bytes
    assert cost.allreduce_time_s(2048) == pytest.approx(1e-5 + activations * 1.5 / 100e9)
    assert cost.allreduce_time_s(1) < 1.02e-5  # one token: 12 KiB, 0.12 us over the link
    plain = CostModel(model, gpu, num_gpus=4)
    assert cost.step_time_s(2048, 0, 0) - plain.step_time_s(2048, 0, 0) \
        == pytest.approx(2 * model.num_layers * cost.allreduce_time_s(2048))
    two = CostModel(model, gpu, num_gpus=2, tp_link_bytes_per_s=100e9)
    assert two.allreduce_time_s(2048) == pytest.approx(activations / 100e9)  # 2 (2-1)/2 = 1
    one = CostModel(model, gpu, num_gpus=1, allreduce_s=1e-5, tp_link_bytes_per_s=100e9)
    assert one.allreduce_time_s(2048) == 0.0
    with pytest.raises(ValueError, match="tp_link_bytes_per_s"):
        CostModel(model, gpu, tp_link_bytes_per_s=0.0)


def test_layer_overhead_adds_per_layer_to_every_step() -> None:
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-80gb")
    cost = CostModel(model, gpu, layer_overhead_s=5e-5)
    base = CostModel(model, gpu)
    for step in ((0, 1, 100), (512, 0, 0), (0, 64, 64_000)):
        assert cost.step_time_s(*step) - base.step_time_s(*step) \
            == pytest.approx(model.num_layers * 5e-5)
    assert cost.step_time_s(0, 0, 0) == 0.0  # an empty step still costs nothing
    assert cost.decode_steps_s(8, 800, 3) == [cost.step_time_s(0, 8, 800 + 8 * k)
                                              for k in range(3)]


def test_per_sequence_overhead_grows_with_the_batch() -> None:
    model, gpu = get_model("llama-3.1-8b"), get_gpu("a100-80gb")
    cost = CostModel(model, gpu, step_overhead_per_seq_s=1e-5)
    base = CostModel(model, gpu)
    for n in (1, 64, 256):
        assert cost.step_time_s(0, n, n * 100) - base.step_time_s(0, n, n * 100) \
            == pytest.approx(n * 1e-5)
    assert cost.decode_steps_s(64, 6_400, 3) == [cost.step_time_s(0, 64, 6_400 + 64 * k)
                                                 for k in range(3)]


@pytest.mark.parametrize("field, value", [("hbm_efficiency", 0.0), ("hbm_efficiency", 1.5),
                                          ("flops_efficiency", -1),
                                          ("step_overhead_per_seq_s", -1e-6),
                                          ("allreduce_s", float("nan")),
                                          ("layer_overhead_s", -1e-6)])
def test_cost_model_refuses_bad_constants(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        CostModel(get_model("opt-13b"), get_gpu("a100-40gb"), **{field: value})


def test_profile_file_round_trip_and_refusals(tmp_path) -> None:
    profile = CostProfile("mine", {"*": 0.7}, {"a100-80gb": 0.5}, 0.001, 2e-6, 3e-5,
                          layer_overhead_s=4e-5, tp_link_bytes_per_s={"*": 2e11},
                          sources={"hbm_efficiency": "my runs"})
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(profile.to_json()))
    assert get_cost_profile(str(path)) == profile
    with pytest.raises(CostProfileError, match="no efficiency for GPU 'h100-80gb'"):
        profile.efficiencies("h100-80gb")
    with pytest.raises(CostProfileError, match="unknown cost profile 'nope'"):
        get_cost_profile("nope")
    with pytest.raises(CostProfileError, match="does not exist"):
        get_cost_profile(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**profile.to_json(), "hbm_efficiency": {"*": 2}}))
    with pytest.raises(CostProfileError, match=r"hbm_efficiency\['\*'\]"):
        get_cost_profile(str(bad))
    assert profile.cost_kwargs("a100-80gb")["tp_link_bytes_per_s"] == 2e11
    bad.write_text(json.dumps({**profile.to_json(), "tp_link_bytes_per_s": {"*": 0}}))
    with pytest.raises(CostProfileError, match=r"tp_link_bytes_per_s\['\*'\]"):
        get_cost_profile(str(bad))
    bad.write_text(json.dumps({**profile.to_json(), "speed": 3}))
    with pytest.raises(CostProfileError, match="unknown field"):
        get_cost_profile(str(bad))
    bad.write_text("{not json")
    with pytest.raises(CostProfileError, match="not readable JSON"):
        get_cost_profile(str(bad))



def test_a_profile_file_is_read_as_config_files_are(tmp_path) -> None:
    """Were: a profile file nested 100,000 deep was a RecursionError traceback; a key given
    twice kept its last value; a FIFO was called missing ('does not exist')."""
    import os

    path = tmp_path / "p.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CostProfileError, match="nested 100,000 deep, more than the 8"):
        get_cost_profile(str(path))
    text = json.dumps(get_cost_profile("vllm").to_json())
    path.write_text(text.replace('{"name": "vllm"', '{"name": "vllm", "name": "mine"', 1))
    with pytest.raises(CostProfileError, match="key 'name' given twice"):
        get_cost_profile(str(path))
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.json")
        with pytest.raises(CostProfileError, match="is a FIFO"):
            get_cost_profile(str(tmp_path / "fifo.json"))


def test_prefill_attention_pairs_reach_the_step_time_only_when_asked() -> None:
    from pagedsim.engine.plan import PrefillItem, StepPlan

    plan = StepPlan(step=1)
    plan.prefills = [PrefillItem(0, 0, 100), PrefillItem(1, 1, 50, start=200, last=False)]
    # 100 tokens alone: 100 * 101 / 2; 50 after 200 cached: 50 * 51 / 2 + 200 * 49 beyond
    # the 200 kv_tokens_read already holds.
    assert plan.prefill_attn_pairs() == 5050 + 1275 + 9800
    model, gpu = get_model("llama-3.1-8b"), get_gpu("a100-80gb")
    vllm = CostModel(model, gpu, **get_cost_profile("vllm").cost_kwargs(gpu.name))
    paper = CostModel(model, gpu, **get_cost_profile("paper").cost_kwargs(gpu.name))
    assert vllm.prefill_attention and not paper.prefill_attention
    with pytest.raises(TypeError, match="prefill_attention"):
        CostModel(model, gpu, prefill_attention=1)
