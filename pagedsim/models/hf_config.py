"""A model's Hugging Face ``config.json`` read into a :class:`~pagedsim.models.specs.ModelSpec`.

Only the fields the KV cache depends on are read, as vLLM reads them:

* ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads`` (default: the
  attention heads), ``head_dim`` (default ``hidden_size // num_attention_heads``);
* multimodal configs (Gemma 3) keep these in ``text_config``, which is read instead;
* MLA (DeepSeek-V2/V3, Kimi-K2): ``kv_lora_rank`` set -> every layer keeps one latent of
  ``kv_lora_rank + qk_rope_head_dim`` values per token;
* which layers slide: ``layer_types`` when given (gpt-oss, newer Qwen/Gemma configs);
  otherwise Gemma 2 slides on even layers, Gemma 3 on all but every
  ``sliding_window_pattern``-th (default 6), Qwen2/Qwen3 only with
  ``use_sliding_window`` (from layer ``max_window_layers`` on), and any other config
  with a ``sliding_window`` (Mistral-7B-v0.1) on every layer;
* ``torch_dtype`` (or ``dtype``): the serving dtype; 16-bit for bfloat16, float16 and
  float32 (vLLM serves float32 checkpoints in 16 bits by default), 2 bytes if absent;
* ``max_position_embeddings`` -> ``max_model_len`` (vLLM's rope-scaling adjustments are
  not applied: give ``--max-model-len`` to match a run).

Weights are not in config.json: a ``model.safetensors.index.json`` next to it gives their
size (``metadata.total_size``), otherwise ``weights_bytes`` is 0 (unknown). Nothing is
downloaded: the config is a file the user has.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from ..user_files import file_kind
from .kv_spec import LayerKV, full, mla, sliding
from .model_spec import ModelSpec

#: Largest config.json read (bytes): real ones are a few KiB; this bounds memory.
MAX_CONFIG_BYTES = 4 << 20
#: Most layers a config may have: real models have under 200; a larger count is refused
#: rather than turned into a list of that many layer specs.
MAX_LAYERS = 10_000

#: ``layer_types`` entries and the layer kind each becomes.
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}

#: Serving dtypes (``torch_dtype``) and the bytes vLLM's ``dtype=auto`` serves them in.
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2}

#: Defaults of fields some configs leave out (the transformers config classes' defaults).
_FAMILY_DEFAULTS: dict[str, dict] = {
    "gemma3_text": {"sliding_window": 4096, "sliding_window_pattern": 6,
                    "max_position_embeddings": 131072, "head_dim": 256},
    "gemma2": {"sliding_window": 4096, "head_dim": 256},
}

_QWEN = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")


class ConfigError(ValueError):
    """A config.json that cannot be read as a model (the message names the field)."""


def _int_field(cfg: dict, key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: no {key!r} (needed for the KV cache)")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: {key} must be a whole number >= 1, got {value!r}")
    return value


def _text_config(cfg: dict) -> dict:
    """The language model's part of a config: ``text_config`` merged over the family's
    defaults, with the outer dtype when the inner has none."""
    inner = cfg.get("text_config")
    text = dict(inner) if isinstance(inner, dict) else dict(cfg)
    if isinstance(inner, dict):
        for key in ("torch_dtype", "dtype"):
            if key not in text and key in cfg:
                text[key] = cfg[key]
    return {**_FAMILY_DEFAULTS.get(str(text.get("model_type", "")), {}), **text}


def _sliding_flags(text: dict, num_layers: int, where: str) -> list[bool]:
    """Which layers use sliding-window attention (see the module docstring)."""
    model_type = str(text.get("model_type", ""))
    types = text.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers:
            raise ConfigError(f"{where}: layer_types must list {num_layers} layers, got "
                              f"{types if not isinstance(types, list) else len(types)!r}")
        bad = sorted({t for t in types if t not in _LAYER_TYPES}, key=str)
        if bad:
            raise ConfigError(f"{where}: layer_types {bad!r} not supported; valid: "
                              f"{', '.join(_LAYER_TYPES)} (state and linear-attention layers "
                              "are not read from configs yet)")
        return [t == "sliding_attention" for t in types]
    window = text.get("sliding_window")
    if window is None:
        return [False] * num_layers
    if model_type == "gemma2":
        return [i % 2 == 0 for i in range(num_layers)]
    if model_type == "gemma3_text":
        pattern = _int_field(text, "sliding_window_pattern", where)
        return [(i + 1) % pattern != 0 for i in range(num_layers)]
    if model_type in _QWEN:
        if not text.get("use_sliding_window", False):
            return [False] * num_layers
        start = text.get("max_window_layers", num_layers)
        return [i >= start for i in range(num_layers)]
    if text.get("use_sliding_window") is False:
        return [False] * num_layers
    return [True] * num_layers


def model_from_config(cfg: dict, name: str, *, weights_bytes: int = 0,
                      source: str = "") -> ModelSpec:
    """The :class:`ModelSpec` of a parsed config.json (``cfg``), named ``name``."""
    where = name or "config.json"
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: a config.json holds one JSON object, got "
                          f"{type(cfg).__name__}")
    text = _text_config(cfg)
    num_layers = _int_field(text, "num_hidden_layers", where)
    if num_layers > MAX_LAYERS:
        raise ConfigError(f"{where}: num_hidden_layers {num_layers:,} is more than this reader "
                          f"takes ({MAX_LAYERS:,}); real models have a few hundred at most")
    num_heads = _int_field(text, "num_attention_heads", where)
    num_kv_heads = _int_field(text, "num_key_value_heads", where, default=num_heads)
    head_dim = text.get("head_dim")
    if head_dim is None:
        hidden = _int_field(text, "hidden_size", where)
        if hidden % num_heads:
            raise ConfigError(f"{where}: hidden_size {hidden} is not a multiple of "
                              f"num_attention_heads {num_heads}, and there is no head_dim")
        head_dim = hidden // num_heads
    head_dim = _int_field({"head_dim": head_dim}, "head_dim", where)
    if num_heads % num_kv_heads:
        raise ConfigError(f"{where}: num_attention_heads {num_heads} is not a multiple of "
                          f"num_key_value_heads {num_kv_heads}")
    dtype = text.get("torch_dtype", text.get("dtype")) or "bfloat16"
    if dtype not in _DTYPE_BYTES:
        raise ConfigError(f"{where}: torch_dtype {dtype!r} not supported; valid: "
                          f"{', '.join(_DTYPE_BYTES)}")
    max_len = next((text[k] for k in ("max_position_embeddings", "n_positions",
                                       "max_seq_len", "seq_length") if text.get(k)), None)
    max_len = _int_field({"max_position_embeddings": max_len}, "max_position_embeddings",
                         where)

    layers: tuple[LayerKV, ...]
    if text.get("kv_lora_rank") is not None:
        rank = _int_field(text, "kv_lora_rank", where)
        rope = text.get("qk_rope_head_dim")
        if isinstance(rope, bool) or not isinstance(rope, int) or rope < 0:
            raise ConfigError(f"{where}: an MLA config needs qk_rope_head_dim >= 0, "
                              f"got {rope!r}")
        layers = (mla(rank, rope),) * num_layers
    else:
        flags = _sliding_flags(text, num_layers, where)
        if any(flags):
            window = _int_field(text, "sliding_window", where)
            layers = tuple(sliding(num_kv_heads, head_dim, window) if f
                           else full(num_kv_heads, head_dim) for f in flags)
        else:
            layers = ()  # uniform full attention: the seed's formula
    return ModelSpec(name, num_layers, num_heads, num_kv_heads, head_dim,
                     _DTYPE_BYTES[dtype], weights_bytes, max_len, layers=layers,
                     source=source)


def _weights_next_to(path: Path) -> int:
    """``metadata.total_size`` of a ``model.safetensors.index.json`` beside ``path``, or 0."""
    index = path.with_name("model.safetensors.index.json")
    try:
        if index.stat().st_size > MAX_CONFIG_BYTES * 16:
            return 0
        total = json.loads(index.read_text(encoding="utf-8"))["metadata"]["total_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else 0


def load_config(path: str | Path) -> ModelSpec:
    """The :class:`ModelSpec` of a config.json file (or of a folder holding one); the
    name is the path as given. Raises ConfigError (a ValueError) naming the path and
    the field for a missing, unreadable or unsupported file."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        st = p.stat()
    except OSError as e:
        raise ConfigError(f"cannot read model config {str(path)!r}: "
                          f"{e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block read_text, /dev/zero never end
        raise ConfigError(f"{str(path)!r} is {file_kind(st.st_mode)}, not a config.json file")
    size = st.st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{str(path)!r} is {size:,} bytes, too large for a config.json "
                          f"(at most {MAX_CONFIG_BYTES:,})")
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read model config {str(path)!r}: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{str(path)!r} is not valid JSON: {e.msg} at line {e.lineno}"
                          ) from None
    return model_from_config(cfg, str(path), weights_bytes=_weights_next_to(p),
                             source=f"config file {p}")


def looks_like_config_path(text: str) -> bool:
    """Whether a ``--model`` value names a file rather than a preset (it ends in .json or
    holds a path separator)."""
    return text.endswith(".json") or "/" in text or "\\" in text
