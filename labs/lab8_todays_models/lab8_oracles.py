"""What lab 8's graders (test_lab8.py) check against: the real vLLM lines, the configs,
and pagedsim's reader and sizing as an oracle (your module may not import them).

``vllm_lines.json`` beside this file holds real start-up lines, each with its source, and
the configs of the logged models; the other configs are pagedsim's model presets
(``pagedsim/models/model_presets.json``), each copied from a Hugging Face config.json.
Sizes are in bytes, lengths in tokens.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from hypothesis import assume
from hypothesis import strategies as st

from pagedsim.models.hf_config import model_from_config
from pagedsim.models.kv_spec import kv_dtype_bytes, shard_for_tp
from pagedsim.models.model_presets import preset_entries
from pagedsim.models.vllm_kv import VllmKVCache, vllm_kv_cache

KiB, MiB, GiB = 2**10, 2**20, 2**30
DATA = json.loads((Path(__file__).parent / "vllm_lines.json").read_text(encoding="utf-8"))
LINES = DATA["lines"]
TOKEN_LINES = [x for x in LINES if x["gpu_kv_cache_size_tokens"] is not None]
REFUSALS = [x for x in LINES if x["needed_gib"] is not None]
DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")


def _with_layer_types(config: dict, name: str) -> dict:
    """Gemma 2/3 configs name their sliding layers by a pattern, not by ``layer_types``:
    add the list pagedsim's reader derives from it (the handout says so)."""
    cfg = copy.deepcopy(config)
    text = cfg.get("text_config", cfg)
    if str(text.get("model_type")).startswith("gemma") and "layer_types" not in text:
        layers = model_from_config(config, name).kv_layers
        text["layer_types"] = [f"{x.kind}_attention" for x in layers]
        text["sliding_window"] = max(x.window_tokens for x in layers)
    return cfg


PRESETS = {e["name"]: _with_layer_types(e["config"], e["name"]) for e in preset_entries()}
CONFIGS = {**{k: _with_layer_types(v, k) for k, v in DATA["configs"].items()}, **PRESETS}


def oracle_layers(config: dict, tp: int = 1) -> list[tuple[str, int, int, int]]:
    """pagedsim's layers of ``config`` as one of ``tp`` GPUs holds them."""
    spec = model_from_config(config, "oracle")
    return [(x.kind, x.num_kv_heads, x.head_dim, x.window_tokens)
            for x in (shard_for_tp(x, tp) for x in spec.kv_layers)]


#: Refusals of models without sliding layers (task 8.3 redoes their needed GiB exactly).
PLAIN_REFUSALS = [x for x in REFUSALS
                  if all(k != "sliding" for k, *_ in oracle_layers(CONFIGS[x["config"]]))]


def oracle(config: dict, memory: int, max_model_len: int, **kw) -> VllmKVCache:
    """pagedsim's vLLM sizing of ``config`` with ``memory`` bytes of KV memory per GPU."""
    return vllm_kv_cache(model_from_config(config, "oracle"), memory,
                         max_model_len=max_model_len, **kw)


@st.composite
def configs(draw: st.DrawFn) -> dict:
    """A config.json of a shape pagedsim reads and the handout calls valid (every number
    one that ``int_field`` takes): plain, GQA, MLA, all sliding, or layers of both kinds
    listed in ``layer_types``; head_dim given or from hidden_size."""
    kv_heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    heads = kv_heads * draw(st.sampled_from([1, 2, 4, 8]))
    num_layers = draw(st.integers(1, 64))
    head_dim = draw(st.sampled_from([64, 80, 128, 256]))
    cfg: dict = {"model_type": "lab", "num_hidden_layers": num_layers,
                 "num_attention_heads": heads, "max_position_embeddings": 131072,
                 **({"head_dim": head_dim} if draw(st.booleans())
                    else {"hidden_size": heads * head_dim})}
    if kv_heads != heads or draw(st.booleans()):
        cfg["num_key_value_heads"] = kv_heads
    shape = draw(st.sampled_from(["full", "mla", "sliding", "layer_types"]))
    window = draw(st.sampled_from([128, 512, 1024, 4096]))
    if shape == "mla":
        cfg.update(kv_lora_rank=draw(st.sampled_from([128, 256, 512])),
                   # >= 1: the handout's int_field refuses 0, so a reader that checks
                   # qk_rope_head_dim with it must not lose points for a config the
                   # handout calls invalid.
                   qk_rope_head_dim=draw(st.sampled_from([32, 64])))
    elif shape in ("sliding", "layer_types"):
        cfg["sliding_window"] = window
        if shape == "layer_types":
            kinds = st.sampled_from(["full_attention", "sliding_attention"])
            cfg["layer_types"] = draw(st.lists(kinds, min_size=num_layers,
                                               max_size=num_layers))
    else:
        cfg.update(sliding_window=draw(st.sampled_from([None, window])),
                   use_sliding_window=False)
    return cfg


def tp_for(draw_tp: int, config: dict) -> int:
    """A TP size vLLM takes for ``config`` (assume() away the others)."""
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    assume(heads % draw_tp == 0 and (kv % draw_tp == 0 or draw_tp % kv == 0))
    return draw_tp



def oracle_request(cfg: dict, num_tokens: int, dtype: str = "auto", tp: int = 1) -> int:
    """Bytes one request keeps on one GPU, a sliding layer its last window only."""
    size = kv_dtype_bytes(dtype, model_from_config(cfg, "oracle").dtype_bytes)
    return sum(x.bytes_per_token(size) * (min(num_tokens, x.window_tokens)
                                          if x.kind == "sliding" else num_tokens)
               for x in (shard_for_tp(x, tp)
                         for x in model_from_config(cfg, "oracle").kv_layers))
