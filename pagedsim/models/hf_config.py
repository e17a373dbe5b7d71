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
* ``max_model_len``: as vLLM's ``_get_and_verify_max_len`` finds it, the smallest of
  :data:`MAX_LEN_KEYS` the config gives (``max_position_embeddings``, ``n_positions``,
  ``max_seq_len``, ...), ``model_max_length`` over them when given (Command-R), and 2,048
  when none is (vLLM's fallback); :attr:`ModelSpec.max_model_len_from` says which
  (vLLM's rope-scaling adjustments are not applied: give ``--max-model-len`` to match a run).

Weights are not in config.json: a ``model.safetensors.index.json`` next to it gives their
size (``metadata.total_size``), compared with the parameter count of the architecture
(:mod:`pagedsim.models.param_count`) in :func:`weights_note`; without an index the
architecture's count x the dtype's bytes is the size, unless the config is quantized
(``quantization_config``: its bytes per parameter are not the dtype's) or lacks a field
the count needs, when ``weights_bytes`` is 0 (unknown: give ``--weights-gb``, which
overrides either). Nothing is downloaded: the config is a file the user has.

Both files are read as strictly as traces (:func:`pagedsim.user_files.read_json_file`):
regular files of bounded size and depth, each key once; and every field read is
range-checked before use (:data:`FIELD_LIMITS`), so that what it is multiplied into later
(bytes per token, a request's KV, numpy's int64 lengths) stays in range. A bad file or
field is a :class:`ConfigError` naming the file, the key and what would be valid.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..user_files import JsonFileError, NotRegularFileError, read_json_file
from ..validate import shown_value
from .kv_spec import LayerKV, full, mla, sliding
from .model_spec import ModelSpec
from .param_count import ParamCount, count_params

#: Largest config.json read (bytes): real ones are a few KiB; this bounds memory.
MAX_CONFIG_BYTES = 4 << 20
#: Deepest nesting a config.json may have: real ones nest 3 or 4 deep (text_config,
#: rope_scaling, quantization_config); 64 leaves room far below Python's recursion limit.
MAX_CONFIG_DEPTH = 64
#: Largest model.safetensors.index.json read (bytes): DeepSeek-V3's, with one weight_map
#: entry per tensor (91,991), is under 9 MiB.
MAX_INDEX_BYTES = 64 << 20
#: Deepest nesting of an index: {"metadata": {...}, "weight_map": {...}} is 2.
MAX_INDEX_DEPTH = 8
#: Largest weights an index may give (bytes): 1 PiB, far above any model's (a few TB).
MAX_WEIGHTS_BYTES = 1 << 50
#: Most layers a config may have: real models have under 200; a larger count is refused
#: rather than turned into a list of that many layer specs.
MAX_LAYERS = 10_000
#: Longest context a config may give (tokens): 2**30, 100 times today's longest (10M);
#: with at most 2**30 bytes of KV per token a request's KV stays under 2**60 bytes, and
#: lengths stay inside numpy's int64 (10**30 raised OverflowError inside simulate()).
MAX_CONTEXT_TOKENS = 1 << 30
#: Most KV bytes per token a config may give (all layers, K and V): 1 GiB, some 1,000
#: times today's largest models'.
MAX_KV_BYTES_PER_TOKEN = 1 << 30
#: The largest value each integer field may take (the smallest is 1, or 0 where noted).
FIELD_LIMITS = {
    "num_hidden_layers": MAX_LAYERS, "num_attention_heads": 1 << 16,
    "num_key_value_heads": 1 << 16, "head_dim": 1 << 16, "hidden_size": 1 << 24,
    "kv_lora_rank": 1 << 16, "qk_rope_head_dim": 1 << 16, "sliding_window": MAX_CONTEXT_TOKENS,
    "sliding_window_pattern": MAX_LAYERS, "max_window_layers": MAX_LAYERS,
}
#: The keys vLLM's ``_get_and_verify_max_len`` reads the context from (the smallest
#: given wins), in its order; ``model_max_length``, when given, overrides them.
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                "model_max_length", "max_target_positions", "max_sequence_length",
                "max_seq_length", "seq_len")
#: vLLM's ``max_model_len`` when the config gives none of :data:`MAX_LEN_KEYS` (it logs a
#: warning and assumes this).
DEFAULT_MAX_MODEL_LEN = 2048

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


def _int_field(cfg: dict, key: str, where: str, default: int | None = None,
               least: int = 1) -> int:
    """``cfg[key]`` (or ``default``): a JSON integer from ``least`` to its
    :data:`FIELD_LIMITS` entry, checked before any arithmetic uses it."""
    value = cfg.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: no {key!r} (needed for the KV cache)")
    most = FIELD_LIMITS.get(key, MAX_CONTEXT_TOKENS)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ConfigError(f"{where}: {key} must be a whole number from {least} to {most:,}, "
                          f"got {shown_value(value)}")
    return value


def _bool_field(cfg: dict, key: str, where: str, default: bool) -> bool:
    """``cfg[key]``: a JSON ``true`` or ``false`` (the string ``"false"`` is truthy in
    Python: it made every layer of a Qwen config sliding), or ``default`` when absent
    or null."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {key} must be JSON true or false, got {shown_value(value)}")
    return value


def max_model_len_of(text: dict, where: str) -> tuple[int, str]:
    """The context and where it came from, as vLLM finds it (see the module docstring):
    ``(tokens, key)``, or ``(2048, "vLLM's default ...")`` when no key is given."""
    found: dict[str, int] = {}
    for key in MAX_LEN_KEYS:
        if text.get(key) is not None:
            value = text[key]
            if isinstance(value, bool) or not isinstance(value, int) \
                    or not 1 <= value <= MAX_CONTEXT_TOKENS:
                raise ConfigError(f"{where}: {key} must be a whole number of tokens from 1 "
                                  f"to {MAX_CONTEXT_TOKENS:,}, got {shown_value(value)}")
            found[key] = value
    if "model_max_length" in found:
        return found["model_max_length"], "model_max_length"
    if found:
        key = min(found, key=found.__getitem__)  # the smallest; the first of equals
        return found[key], key
    return DEFAULT_MAX_MODEL_LEN, (f"vLLM's default {DEFAULT_MAX_MODEL_LEN:,}: the config "
                                   f"gives none of {', '.join(MAX_LEN_KEYS)}")


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
            got = shown_value(types) if not isinstance(types, list) else len(types)
            raise ConfigError(f"{where}: layer_types must list {num_layers} layers, got {got}")
        # Shown, not hashed: an entry may be a list or an object (unhashable).
        bad = sorted({shown_value(t) for t in types
                      if not isinstance(t, str) or t not in _LAYER_TYPES})
        if bad:
            raise ConfigError(f"{where}: layer_types {', '.join(bad[:5])} not supported; valid: "
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
        if not _bool_field(text, "use_sliding_window", where, False):
            return [False] * num_layers
        start = _int_field(text, "max_window_layers", where, num_layers, least=0)
        return [i >= start for i in range(num_layers)]
    if _bool_field(text, "use_sliding_window", where, True) is False:
        return [False] * num_layers
    return [True] * num_layers


#: :attr:`ModelSpec.weights_from` of a config whose weights came from its safetensors index.
FROM_INDEX = "model.safetensors.index.json"
#: ... and of one whose weights are its architecture's parameter count x the dtype's bytes.
FROM_ARCHITECTURE = "the architecture"


def _param_count(text: dict, where: str) -> tuple[ParamCount | None, str]:
    """:func:`pagedsim.models.param_count.count_params` of ``text``, each field read as
    strictly as the KV fields (a ConfigError naming a bad one)."""
    def field(key: str, default: int | None, least: int) -> int | None:
        if text.get(key) is None:
            return default
        return _int_field(text, key, where, least=least)

    return count_params(text, field)


def model_from_config(cfg: dict, name: str, *, weights_bytes: int = 0,
                      source: str = "", weights_from: str = "") -> ModelSpec:
    """The :class:`ModelSpec` of a parsed config.json (``cfg``), named ``name``, with its
    parameter count from the architecture when the config has every field it needs.
    ``weights_bytes`` 0 (unknown) becomes that count x the dtype's bytes unless the
    config is quantized; ``weights_from`` says where a given size came from."""
    where = name or "config.json"
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: a config.json holds one JSON object, got "
                          f"{type(cfg).__name__}")
    text = _text_config(cfg)
    num_layers = _int_field(text, "num_hidden_layers", where)  # at most MAX_LAYERS
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
    if not isinstance(dtype, str) or dtype not in _DTYPE_BYTES:  # a list is unhashable
        raise ConfigError(f"{where}: torch_dtype {shown_value(dtype)} not supported; valid: "
                          f"{', '.join(_DTYPE_BYTES)}")
    max_len, max_len_from = max_model_len_of(text, where)

    layers: tuple[LayerKV, ...]
    if text.get("kv_lora_rank") is not None:
        rank = _int_field(text, "kv_lora_rank", where)
        if text.get("qk_rope_head_dim") is None:
            raise ConfigError(f"{where}: an MLA config (kv_lora_rank given) needs "
                              "qk_rope_head_dim, a whole number >= 0")
        rope = _int_field(text, "qk_rope_head_dim", where, least=0)
        layers = (mla(rank, rope),) * num_layers
    else:
        flags = _sliding_flags(text, num_layers, where)
        if any(flags):
            window = _int_field(text, "sliding_window", where)
            layers = tuple(sliding(num_kv_heads, head_dim, window) if f
                           else full(num_kv_heads, head_dim) for f in flags)
        else:
            layers = ()  # uniform full attention: the seed's formula
    params, why = _param_count(text, where)
    if weights_bytes == 0:
        quantized = any(isinstance(c.get("quantization_config"), dict) for c in (cfg, text))
        if params is None:
            weights_from = f"unknown: the config has {why} to count the parameters"
        elif quantized:
            weights_from = ("unknown: the config is quantized (quantization_config), so "
                            "its bytes per parameter are not its dtype's")
        else:
            weights_bytes = params.total * _DTYPE_BYTES[dtype]
            weights_from = FROM_ARCHITECTURE
            if weights_bytes > MAX_WEIGHTS_BYTES:
                raise ConfigError(f"{where}: the architecture counts {params.total:,} "
                                  f"parameters, more than the {MAX_WEIGHTS_BYTES:,} bytes "
                                  "(1 PiB) of weights this reader takes")
    spec = ModelSpec(name, num_layers, num_heads, num_kv_heads, head_dim,
                     _DTYPE_BYTES[dtype], weights_bytes, max_len, layers=layers,
                     source=source, max_model_len_from=max_len_from, params=params,
                     weights_from=weights_from)
    if spec.bytes_per_token > MAX_KV_BYTES_PER_TOKEN:
        raise ConfigError(f"{where}: {spec.bytes_per_token:,} bytes of KV per token "
                          f"(num_hidden_layers x heads x head_dim), more than the "
                          f"{MAX_KV_BYTES_PER_TOKEN:,} this reader takes; real models have "
                          "a few MiB at most")
    return spec


def _read(path: Path, what: str, max_bytes: int, max_depth: int) -> object:
    """The JSON in ``path`` (the config or its weights index, ``what``), or a
    ConfigError naming the file and what is wrong with it."""
    try:
        return read_json_file(path, max_bytes, max_depth)
    except NotRegularFileError as exc:  # a FIFO would hang the read, /dev/zero never end
        raise ConfigError(f"{str(path)!r} is {exc.kind}, not a {what} file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}"
                          ) from None
    except JsonFileError as exc:
        raise ConfigError(f"{what} {str(path)!r}: {exc}") from None


def weights_next_to(path: Path) -> int:
    """``metadata.total_size`` (bytes) of the ``model.safetensors.index.json`` beside
    ``path``, 0 when there is none; a ConfigError for one that is there but not a
    readable index (a FIFO, a device, a binary file, a total_size out of range), which
    was once read as absent or hung the command."""
    index = path.with_name("model.safetensors.index.json")
    if not os.path.lexists(index):
        return 0
    what = "weights index"
    data = _read(index, what, MAX_INDEX_BYTES, MAX_INDEX_DEPTH)
    meta = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(meta, dict) or "total_size" not in meta:
        raise ConfigError(f"{what} {str(index)!r}: no metadata.total_size (the weights' "
                          "size in bytes, which every safetensors index gives)")
    total = meta["total_size"]
    if isinstance(total, bool) or not isinstance(total, int) \
            or not 1 <= total <= MAX_WEIGHTS_BYTES:
        raise ConfigError(f"{what} {str(index)!r}: metadata.total_size must be a whole "
                          f"number of bytes from 1 to {MAX_WEIGHTS_BYTES:,} (1 PiB), got "
                          f"{shown_value(total)}")
    return total


def load_config(path: str | Path) -> ModelSpec:
    """The :class:`ModelSpec` of a config.json file (or of a folder holding one); the
    name is the path as given. Raises ConfigError (a ValueError) naming the path and
    the field for a missing, unreadable or unsupported file, and for a weights index
    beside it that cannot be read."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not os.path.lexists(p):
        raise ConfigError(f"cannot read model config {str(path)!r}: No such file or "
                          "directory")
    cfg = _read(p, "model config", MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH)
    index_bytes = weights_next_to(p)
    return model_from_config(cfg, str(path), weights_bytes=index_bytes,
                             source=f"config file {p}",
                             weights_from=FROM_INDEX if index_bytes else "")


def weights_note(spec: ModelSpec) -> str | None:
    """One line saying where a config's weights came from and, beside a safetensors
    index, how the index compares with the architecture's count; None for a preset."""
    origin = spec.weights_from
    if not origin or origin.startswith("unknown"):
        return None
    gib = spec.weights_bytes / 2**30
    if origin == FROM_ARCHITECTURE and spec.params is not None:
        return (f"weights {gib:.2f} GiB = the architecture's {spec.params.total:,} "
                f"parameters x {spec.dtype_bytes} bytes (no {FROM_INDEX} beside the config; "
                "--weights-gb overrides)")
    if spec.params is None:
        return f"weights {gib:.2f} GiB from {FROM_INDEX} (--weights-gb overrides)"
    arch = spec.params.total * spec.dtype_bytes
    return (f"weights {gib:.2f} GiB from {FROM_INDEX}; the architecture counts "
            f"{spec.params.total:,} parameters = {arch / 2**30:.2f} GiB in "
            f"{spec.dtype_bytes} bytes each: the index holds {spec.weights_bytes / arch:.3f}x "
            "that (below 1: quantized; above: tensors the count leaves out; --weights-gb "
            "overrides)")


def max_model_len_note(spec: ModelSpec) -> str | None:
    """One line saying which config key gave ``spec.max_model_len``, or vLLM's fallback;
    None for a preset or a config's usual ``max_position_embeddings``."""
    origin = spec.max_model_len_from
    if not origin or origin == "max_position_embeddings":
        return None
    if origin == "model_max_length":
        why = "which vLLM takes over the other context keys when given"
    elif origin in MAX_LEN_KEYS:
        why = "vLLM takes the smallest of the context keys a config gives"
    else:
        return (f"max_model_len {spec.max_model_len:,} tokens: {origin}; vLLM assumes the "
                "same, with a warning")
    return f"max_model_len {spec.max_model_len:,} tokens: from the config's {origin} ({why})"


def looks_like_config_path(text: str) -> bool:
    """Whether a ``--model`` value names a file rather than a preset (it ends in .json or
    holds a path separator)."""
    return text.endswith(".json") or "/" in text or "\\" in text
