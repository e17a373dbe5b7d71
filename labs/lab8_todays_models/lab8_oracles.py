"""What lab 8's graders (test_lab8.py) check against: the real vLLM lines, the configs,
and pagedsim's reader and sizing as an oracle (your module may not import them).

``vllm_lines.json`` beside this file holds real start-up lines, each with its source, and
the configs of the logged models; the other configs are pagedsim's model presets
(``pagedsim/models/model_presets.json``), each copied from a Hugging Face config.json.
Sizes are in bytes, lengths in tokens.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from pathlib import Path

from hypothesis import assume
from hypothesis import strategies as st

from pagedsim.labs.lending import lend
from pagedsim.models.hf_config import model_from_config
from pagedsim.models.kv_spec import LayerKV, kv_dtype_bytes, shard_for_tp
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


def _readable(config: dict) -> dict:
    """``config`` with a ``max_position_embeddings`` where it has none: pagedsim's reader
    wants one (for the model's longest request), the handout's functions do not."""
    text = config.get("text_config", config)
    if not isinstance(text, dict) or text.get("max_position_embeddings") is not None:
        return config
    config = copy.deepcopy(config)
    config.get("text_config", config)["max_position_embeddings"] = 1
    return config


def oracle_layers(config: dict, tp: int = 1) -> list[tuple[str, int, int, int]]:
    """pagedsim's layers of ``config`` as one of ``tp`` GPUs holds them."""
    spec = model_from_config(_readable(config), "oracle")
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


# --------------------------------------------------------------------------------------
# The handout's functions as pagedsim computes them, lent to your module while another
# task's tests run (see :func:`lent`).


def _as_layer(layer: tuple) -> LayerKV:
    kind, kv_heads, head_dim, window = layer
    return LayerKV(kind, kv_heads, head_dim, window)


def reference_shard_layer(layer: tuple, tensor_parallel_size: int) -> tuple:
    x = shard_for_tp(_as_layer(layer), tensor_parallel_size)
    return (x.kind, x.num_kv_heads, x.head_dim, x.window_tokens)


def reference_gpu_layers(config: dict, tensor_parallel_size: int = 1) -> list[tuple]:
    heads = model_from_config(_readable(config), "oracle").num_heads
    if (isinstance(tensor_parallel_size, bool) or not isinstance(tensor_parallel_size, int)
            or tensor_parallel_size < 1 or heads % tensor_parallel_size):
        raise ValueError(f"tensor_parallel_size {tensor_parallel_size!r} must be >= 1 and "
                         f"divide the {heads} attention heads")
    return oracle_layers(config, tensor_parallel_size)


#: sizing_lab's function name -> pagedsim's answer, for each function a task's tests may
#: reach through your code; the task that asks for it.
REFERENCE: dict[str, tuple[str, Callable]] = {
    "read_layers": ("lab8_1", lambda config: oracle_layers(config)),
    "kv_cache_dtype_bytes": ("lab8_2", lambda kv_cache_dtype: kv_dtype_bytes(kv_cache_dtype, 2)),
    "shard_layer": ("lab8_2", reference_shard_layer),
    "layer_bytes_per_token": ("lab8_2", lambda layer, dtype_bytes:
                              _as_layer(layer).bytes_per_token(dtype_bytes)),
    "gpu_layers": ("lab8_2", reference_gpu_layers),
    "bytes_per_token": ("lab8_2", lambda config, kv_cache_dtype="auto", tensor_parallel_size=1:
                        oracle(_readable(config), GiB, 16,
                               tensor_parallel_size=tensor_parallel_size,
                               kv_cache_dtype=kv_cache_dtype).bytes_per_token),
    "request_kv_bytes": ("lab8_3", lambda config, num_tokens, kv_cache_dtype="auto",
                         tensor_parallel_size=1:
                         oracle_request(_readable(config), num_tokens, kv_cache_dtype,
                                        tensor_parallel_size)),
}
TASK_ORDER = ("lab8_1", "lab8_2", "lab8_3", "lab8_4")


def lent(module: object, task: str) -> contextlib.AbstractContextManager[None]:
    """While a test of ``task`` runs, the functions of the tasks before it in ``module``
    (your ``sizing_lab``, in its own process) are pagedsim's
    (:func:`pagedsim.labs.lending.lend`): your function for ``task`` runs with the right
    layers and bytes under it, so a mistake in an earlier task costs points in that task
    only. Yours are put back afterwards; functions your module does not have are left
    alone (you may organise it as you like)."""
    earlier = TASK_ORDER[:TASK_ORDER.index(task)]
    return lend(module, {name: func for name, (owner, func) in REFERENCE.items()
                         if owner in earlier})
