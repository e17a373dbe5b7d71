"""Per-layer KV specs, Hugging Face config.json reading and the presets of today's models.

Sizes in bytes (KiB = 1024 bytes). The sample configs are in tests/data/hf_configs/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim.models import kv_spec
from pagedsim.models.hf_config import ConfigError, load_config, model_from_config
from pagedsim.models.kv_spec import LayerKV, pp_layer_split, shard_for_tp
from pagedsim.models.model_presets import preset_entries
from pagedsim.models.specs import MODELS, ModelSpec, get_model
from pagedsim.units import KiB

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"

# --------------------------------------------------------------------------------------
# Layer specs


def test_layer_bytes_per_token() -> None:
    assert kv_spec.full(8, 128).bytes_per_token(2) == 2 * 8 * 128 * 2
    assert kv_spec.sliding(8, 64, 128).bytes_per_token(2) == 2 * 8 * 64 * 2  # as a full one
    assert kv_spec.mla(512, 64).bytes_per_token(2) == 576 * 2  # one latent, no factor 2
    assert LayerKV("state", state_bytes=1 << 20).bytes_per_token(2) == 0
    assert LayerKV("none").bytes_per_token(2) == 0
    assert kv_spec.full(8, 128).page_bytes(16, 1) == 16 * 2 * 8 * 128


@pytest.mark.parametrize(("args", "match"), [
    (("full", 0, 128), "num_kv_heads"),
    (("sliding", 8, 64, 0), "window_tokens"),
    (("mla", 2, 576), "one latent"),
    (("full", 8, 128, 128), "only sliding"),
    (("swa", 8, 128), "unknown layer kind"),
    (("none", 8, 128), "no per-token KV"),
])
def test_bad_layer_specs(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LayerKV(*args)


@pytest.mark.parametrize(("dtype", "size"), [("auto", 2), ("bfloat16", 2), ("float16", 2),
                                             ("fp8", 1), ("fp8_e4m3", 1), ("fp8_e5m2", 1)])
def test_kv_dtype_bytes(dtype: str, size: int) -> None:
    assert kv_spec.kv_dtype_bytes(dtype, 2) == size


def test_unknown_kv_dtype_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="'int4'.*auto, bfloat16"):
        kv_spec.kv_dtype_bytes("int4", 2)


@pytest.mark.parametrize(("heads", "tp", "per_gpu"), [
    (8, 1, 8), (8, 2, 4), (8, 8, 1), (8, 16, 1), (4, 8, 1), (64, 8, 8), (1, 4, 1)])
def test_tp_divides_or_replicates_kv_heads(heads: int, tp: int, per_gpu: int) -> None:
    assert shard_for_tp(kv_spec.full(heads, 128), tp).num_kv_heads == per_gpu


def test_tp_keeps_the_mla_latent_whole() -> None:
    layer = kv_spec.mla(512, 64)
    assert shard_for_tp(layer, 8) == layer


def test_tp_that_neither_divides_nor_replicates_is_refused() -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size 3 and 8 KV heads"):
        shard_for_tp(kv_spec.full(8, 128), 3)


@pytest.mark.parametrize(("layers", "pp", "split"), [
    (32, 1, [32]), (32, 4, [8, 8, 8, 8]), (61, 4, [15, 15, 16, 15]),
    (61, 8, [7, 7, 8, 8, 8, 8, 8, 7]), (62, 4, [15, 16, 16, 15]), (5, 2, [3, 2]),
    (7, 4, [2, 2, 2, 1]),
])
def test_pp_split_is_vllms(layers: int, pp: int, split: list[int]) -> None:
    """The remainder goes to the stages before the last, latest first (vLLM's
    get_pp_indices)."""
    assert pp_layer_split(layers, pp) == split


@given(st.integers(1, 200), st.integers(1, 16))
def test_pp_split_covers_every_layer(layers: int, pp: int) -> None:
    if pp > layers:
        with pytest.raises(ValueError, match="exceeds"):
            pp_layer_split(layers, pp)
        return
    split = pp_layer_split(layers, pp)
    assert sum(split) == layers and len(split) == pp
    assert max(split) - min(split) <= 1
    assert split[-1] == layers // pp  # the last stage never takes the remainder


# --------------------------------------------------------------------------------------
# ModelSpec with layers


def test_existing_presets_keep_their_numbers() -> None:
    assert MODELS["llama-2-7b"].bytes_per_token == 512 * KiB
    assert MODELS["opt-13b"].bytes_per_token == 800 * KiB
    m = MODELS["llama-3.1-8b"]  # now read from the data file: the same numbers as before
    assert (m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim, m.dtype_bytes,
            m.weights_bytes, m.max_model_len) == (32, 32, 8, 128, 2, int(8.03e9 * 2), 131072)
    assert m.bytes_per_token == 128 * KiB and m.layers == ()


def test_layers_must_match_num_layers() -> None:
    with pytest.raises(ValueError, match="3 layer specs for num_layers 2"):
        ModelSpec("x", 2, 8, 8, 64, 2, 0, 128, layers=(kv_spec.full(8, 64),) * 3)
    with pytest.raises(TypeError, match="tuple of LayerKV"):
        ModelSpec("x", 1, 8, 8, 64, 2, 0, 128, layers=[kv_spec.full(8, 64)])  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# config.json


def _kinds(m: ModelSpec) -> list[str]:
    return [layer.kind for layer in m.kv_layers]


@pytest.mark.parametrize(("file", "layers", "kv_heads", "head_dim", "per_token"), [
    ("llama-3.1-8b", 32, 8, 128, 128 * KiB),
    ("mistral-7b-v0.1", 32, 8, 128, 128 * KiB),  # head_dim from hidden_size / heads
    ("qwen2.5-7b-instruct", 28, 4, 128, 56 * KiB),  # use_sliding_window false: no window
    ("qwen3-14b", 40, 8, 128, 160 * KiB),  # the figure
    ("qwen3-30b-a3b", 48, 4, 128, 96 * KiB),
    ("gemma-2-9b", 42, 8, 256, 2 * 42 * 8 * 256 * 2),  # float32 config, served in 16 bits
    ("gemma-3-27b-it", 62, 16, 128, 2 * 62 * 16 * 128 * 2),  # text_config
    ("gpt-oss-20b", 24, 8, 64, 48 * KiB),
    ("deepseek-v2-lite", 27, 16, 128, 27 * 576 * 2),
    ("deepseek-v3", 61, 128, 56, 61 * 576 * 2),  # 68.6 KiB: MLA, not 2 x 128 heads
    ("kimi-k2-instruct", 61, 64, 112, 61 * 576 * 2),
])
def test_sample_configs(file: str, layers: int, kv_heads: int, head_dim: int,
                        per_token: int) -> None:
    m = load_config(CONFIGS / f"{file}.json")
    assert (m.num_layers, m.num_kv_heads, m.head_dim) == (layers, kv_heads, head_dim)
    assert m.bytes_per_token == per_token
    assert m.dtype_bytes == 2


def test_which_layers_slide() -> None:
    assert set(_kinds(load_config(CONFIGS / "mistral-7b-v0.1.json"))) == {"sliding"}
    assert set(_kinds(load_config(CONFIGS / "qwen3-14b.json"))) == {"full"}
    gpt = load_config(CONFIGS / "gpt-oss-20b.json")
    assert _kinds(gpt) == ["sliding", "full"] * 12
    assert {layer.window_tokens for layer in gpt.kv_layers if layer.kind == "sliding"} == {128}
    gemma2 = _kinds(load_config(CONFIGS / "gemma-2-9b.json"))
    assert gemma2 == ["sliding", "full"] * 21
    gemma3 = load_config(CONFIGS / "gemma-3-27b-it.json")  # pattern 6 by default
    assert _kinds(gemma3).count("full") == 10 and _kinds(gemma3)[:6] == ["sliding"] * 5 + ["full"]
    assert {x.window_tokens for x in gemma3.kv_layers if x.kind == "sliding"} == {1024}
    assert set(_kinds(load_config(CONFIGS / "deepseek-v3.json"))) == {"mla"}


def test_qwen_sliding_window_from_max_window_layers() -> None:
    cfg = json.loads((CONFIGS / "qwen2.5-7b-instruct.json").read_text())
    cfg.update(use_sliding_window=True, max_window_layers=20, sliding_window=4096)
    assert _kinds(model_from_config(cfg, "q")) == ["full"] * 20 + ["sliding"] * 8


def test_presets_match_the_configs_they_copy() -> None:
    """Each sample config that a preset copies gives the preset's KV layers."""
    for preset, file in (("llama-3.1-8b", "llama-3.1-8b"), ("qwen3-14b", "qwen3-14b"),
                         ("qwen3-30b-a3b", "qwen3-30b-a3b"), ("gpt-oss-20b", "gpt-oss-20b"),
                         ("mistral-7b-v0.1", "mistral-7b-v0.1"),
                         ("gemma-3-27b", "gemma-3-27b-it"), ("deepseek-v3", "deepseek-v3")):
        from_file = load_config(CONFIGS / f"{file}.json")
        assert MODELS[preset].kv_layers == from_file.kv_layers, preset
        assert MODELS[preset].max_model_len == from_file.max_model_len, preset


def test_every_preset_names_its_source() -> None:
    names = {e["name"] for e in preset_entries()}
    assert {"llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b",
            "mistral-7b-v0.1", "gpt-oss-20b", "gpt-oss-120b", "gemma-3-27b",
            "deepseek-v3"} <= names
    for e in preset_entries():
        assert e["source"].startswith(f"https://huggingface.co/{e['hf_repo']}/"), e["name"]
        assert MODELS[e["name"]].source == e["source"]
        assert MODELS[e["name"]].weights_bytes > 0


def test_get_model_reads_a_config_path() -> None:
    """Without a safetensors index the weights are the architecture's count x 2 bytes:
    for Qwen3-14B 14,768,307,200 parameters, the total_size of its own index below."""
    m = get_model(str(CONFIGS / "qwen3-14b.json"))
    assert m.bytes_per_token == 160 * KiB and m.weights_bytes == 29_536_614_400
    assert m.weights_from == "the architecture"
    trimmed = get_model(str(CONFIGS / "qwen3-0.6b.json"))  # no vocab_size: not counted
    assert trimmed.weights_bytes == 0 and trimmed.params is None
    assert "no vocab_size" in trimmed.weights_from


def test_weights_from_a_safetensors_index(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "qwen3-14b.json").read_text())
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 29_536_614_400}, "weight_map": {}}))
    assert load_config(tmp_path).weights_bytes == 29_536_614_400


@pytest.mark.parametrize(("edit", "match"), [
    ({"num_hidden_layers": None}, "num_hidden_layers"),
    ({"num_attention_heads": 0},
     "num_attention_heads must be a whole number from 1 to 65,536, got 0"),
    ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads 3"),
    ({"torch_dtype": "int8"}, "torch_dtype 'int8'"),
    ({"layer_types": ["full_attention"] * 3}, "layer_types must list 40 layers"),
    ({"layer_types": ["linear_attention"] * 40}, "'linear_attention'.*not supported"),
    ({"max_position_embeddings": "32k"}, "max_position_embeddings must be a whole number"),
    ({"num_hidden_layers": 10**12}, "num_hidden_layers must be a whole number from 1 to "
                                    "10,000, got 1000000000000"),
])
def test_bad_configs_name_the_field(edit: dict, match: str) -> None:
    cfg = json.loads((CONFIGS / "qwen3-14b.json").read_text())
    cfg.update(edit)
    with pytest.raises(ConfigError, match=match):
        model_from_config(cfg, "bad")


def test_unreadable_config_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read model config"):
        load_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(bad)
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="one JSON object"):
        load_config(arr)
