"""Presets of today's models, read from ``model_presets.json`` (inside the package).

Each entry holds the config.json fields the KV cache and the parameter count
(:mod:`pagedsim.models.param_count`: vocabulary, MLP and expert sizes, which the cost
model's flops and MoE weight streaming use) depend on, copied from the model's Hugging
Face config (its URL is the entry's ``source``), and the weights: ``weights_gib``
when a measured size is given (with ``weights_note`` saying where from), otherwise the
published parameter count x ``weight_bytes_per_param``. The fields are read by
:func:`pagedsim.models.hf_config.model_from_config`, the same reader ``--model config.json``
uses, so a preset and the config it copies give the same spec.
"""

from __future__ import annotations

import json
from importlib import resources

from ..units import GiB
from .hf_config import model_from_config
from .model_spec import ModelSpec

#: The data file, inside the ``pagedsim`` package.
DATA_FILE = "model_presets.json"


def preset_entries() -> list[dict]:
    """The data file's entries, as written."""
    text = resources.files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8")
    return json.loads(text)["models"]


def _weights_bytes(entry: dict) -> int:
    if "weights_gib" in entry:
        return round(entry["weights_gib"] * GiB)
    return int(entry["num_params"] * entry["weight_bytes_per_param"])


def load_model_presets() -> dict[str, ModelSpec]:
    """Every preset of the data file, by name."""
    out: dict[str, ModelSpec] = {}
    for entry in preset_entries():
        spec = model_from_config(entry["config"], entry["name"],
                                 weights_bytes=_weights_bytes(entry), source=entry["source"])
        if spec.name in out:
            raise ValueError(f"{DATA_FILE}: preset {spec.name!r} is listed twice")
        out[spec.name] = spec
    return out
