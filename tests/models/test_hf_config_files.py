"""config.json and model.safetensors.index.json read as strictly as traces: regular files
only, bounded size and depth, each key once, JSON booleans, every number range-checked
before use, and ``max_model_len`` found under vLLM's keys with vLLM's fallback.

Each case was a hang, a MemoryError, a RecursionError, an OverflowError or a silent
wrong answer before (issue 37)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from pagedsim.cli import main
from pagedsim.models.hf_config import (
    DEFAULT_MAX_MODEL_LEN,
    ConfigError,
    load_config,
    max_model_len_note,
    model_from_config,
)

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
INDEX = "model.safetensors.index.json"


def _folder(tmp_path: Path, config: str = "qwen3-14b.json", **edit: object) -> Path:
    """A model folder holding a sample config.json, with ``edit`` applied to it."""
    cfg = json.loads((CONFIGS / config).read_text())
    for key, value in edit.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def _load_within(path: Path, seconds: float = 20.0) -> ConfigError:
    """load_config(path) must refuse within ``seconds`` (a FIFO hung it for ever)."""
    result: list[BaseException | None] = [None]

    def run() -> None:
        try:
            load_config(path)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            result[0] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"load_config({path}) still running after {seconds} s"
    assert isinstance(result[0], ConfigError), repr(result[0])
    return result[0]


# ----------------------------------------------------------------- the weights index
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_index_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(_folder(tmp_path) / INDEX)
    assert "is a FIFO (named pipe), not a weights index file" in str(_load_within(tmp_path))


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_an_index_linked_to_dev_zero_is_refused_not_read(tmp_path: Path) -> None:
    (_folder(tmp_path) / INDEX).symlink_to("/dev/zero")
    assert "is a character device" in str(_load_within(tmp_path))


def test_an_index_of_nuls_is_a_binary_file_not_absent(tmp_path: Path) -> None:
    with open(_folder(tmp_path) / INDEX, "wb") as f:
        f.truncate(60 << 20)  # 60 MiB of NULs (sparse: quick to make)
    message = str(_load_within(tmp_path))
    assert "a binary file, not JSON text: 62,914,560 bytes, 100% of them NUL" in message


@pytest.mark.parametrize(("text", "says"), [
    ("[" * 200_000 + "]" * 200_000, "JSON nested 200,000 deep"),
    ('{"metadata": {"total_size": ' + "9" * 4000 + '}}', "got a 4,000-digit number"),
    ('{"metadata": {"total_size": 0}}', "total_size must be a whole number of bytes from 1"),
    ('{"metadata": {"total_size": "29536614400"}}', "total_size must be a whole number"),
    ('{"metadata": {}, "weight_map": {}}', "no metadata.total_size"),
    ('{"metadata": {"total_size": 5}, "metadata": {"total_size": 9}}',
     "key 'metadata' given twice"),
    ("{not json", "not valid JSON"),
])
def test_a_bad_index_is_one_clear_error(tmp_path: Path, text: str, says: str) -> None:
    (_folder(tmp_path) / INDEX).write_text(text)
    message = str(_load_within(tmp_path))
    assert says in message and INDEX in message and len(message) < 300


def test_an_index_too_large_is_refused_by_its_size(tmp_path: Path) -> None:
    with open(_folder(tmp_path) / INDEX, "wb") as f:
        f.truncate(65 << 20)
    assert "more than the 67,108,864 this reader takes" in str(_load_within(tmp_path))


def test_no_index_means_unknown_weights(tmp_path: Path) -> None:
    """Unknown unless the architecture can be counted: here the config lacks vocab_size."""
    assert load_config(_folder(tmp_path, vocab_size=None)).weights_bytes == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_budget_refuses_a_fifo_index_even_with_weights_given(tmp_path: Path, capsys) -> None:
    os.mkfifo(_folder(tmp_path) / INDEX)
    assert main(["budget", "--model", str(tmp_path / "config.json"), "--gpu", "h100-80gb",
                 "--weights-gb", "28"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument --model" in err[0] and "FIFO" in err[0]


# ------------------------------------------------------------------------ config.json
def test_a_config_nested_100000_deep_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{\"a\": " * 100_000 + "1" + "}" * 100_000)
    assert "JSON nested 100,000 deep" in str(_load_within(tmp_path))


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    """Was: the last value kept (4x the KV per token with num_key_value_heads 8 then 32)."""
    text = (CONFIGS / "qwen3-14b.json").read_text().replace(
        "{", '{"num_key_value_heads": 32, ', 1)
    (tmp_path / "config.json").write_text(text)
    assert "key 'num_key_value_heads' given twice" in str(_load_within(tmp_path))


@pytest.mark.parametrize(("key", "value", "says"), [
    ("hidden_size", 10**400, "hidden_size must be a whole number from 1 to 16,777,216, got "
                             "a 401-digit number"),
    ("max_position_embeddings", 10**400, "got a 401-digit number"),
    ("max_position_embeddings", 10**30, "max_position_embeddings must be a whole number of "
                                        "tokens from 1 to 1,073,741,824"),
    ("max_position_embeddings", 32768.0, "max_position_embeddings must be a whole number"),
    ("num_key_value_heads", 1 << 20, "num_key_value_heads must be a whole number from 1 to"),
    ("sliding_window", 10**20, "sliding_window must be a whole number"),
    ("torch_dtype", ["bfloat16"], "torch_dtype ['bfloat16'] not supported"),
])
def test_numbers_are_range_checked_by_the_reader(tmp_path: Path, key: str, value: object,
                                                 says: str) -> None:
    edit: dict[str, object] = {key: value}
    if key == "hidden_size":
        edit["head_dim"] = None  # so that hidden_size is read
    config = "mistral-7b-v0.1.json" if key == "sliding_window" else "qwen3-14b.json"
    (tmp_path / "config.json").write_text(
        json.dumps({**json.loads((CONFIGS / config).read_text()), **edit}).replace(
            ', "head_dim": null', ""))
    assert says in str(_load_within(tmp_path))


def test_a_float_that_overflows_is_refused(tmp_path: Path) -> None:
    text = (CONFIGS / "qwen3-14b.json").read_text().replace("{", '{"rope_theta": 1e400, ', 1)
    (tmp_path / "config.json").write_text(text)
    assert "too large for a float" in str(_load_within(tmp_path))


@pytest.mark.parametrize("value", ["false", "true", 0, 1, "no"])
def test_booleans_must_be_json_booleans(value: object) -> None:
    """Was: "false" (a string, truthy) made every layer of a Mistral config sliding."""
    cfg = json.loads((CONFIGS / "mistral-7b-v0.1.json").read_text())
    cfg["use_sliding_window"] = value
    with pytest.raises(ConfigError, match=f"use_sliding_window must be JSON true or false, "
                                          f"got {value!r}"):
        model_from_config(cfg, "m")
    cfg["use_sliding_window"] = False
    assert model_from_config(cfg, "m").layers == ()  # a real false: no sliding layer


# ------------------------------------------------------------------- max_model_len
@pytest.mark.parametrize(("edit", "tokens", "origin"), [
    ({}, 40960, "max_position_embeddings"),
    ({"max_position_embeddings": None, "n_positions": 1024}, 1024, "n_positions"),
    ({"max_position_embeddings": None, "seq_length": 8192}, 8192, "seq_length"),
    ({"max_position_embeddings": None, "max_sequence_length": 4096}, 4096,
     "max_sequence_length"),
    ({"n_positions": 1024}, 1024, "n_positions"),  # the smallest of the keys given
    ({"model_max_length": 131072}, 131072, "model_max_length"),  # overrides (Command-R)
    ({"max_position_embeddings": None, "n_positions": None}, DEFAULT_MAX_MODEL_LEN,
     "vLLM's default 2,048"),
])
def test_max_model_len_is_found_as_vllm_finds_it(edit: dict, tokens: int,
                                                 origin: str) -> None:
    cfg = json.loads((CONFIGS / "qwen3-14b.json").read_text())
    for key, value in edit.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    spec = model_from_config(cfg, "m")
    assert spec.max_model_len == tokens and spec.max_model_len_from.startswith(origin)
    note = max_model_len_note(spec)
    assert (note is None) == (origin == "max_position_embeddings")
    if note is not None:
        assert f"max_model_len {tokens:,} tokens" in note and origin in note


def test_the_fallback_is_said_by_budget_and_compare(tmp_path: Path, capsys) -> None:
    config = str(_folder(tmp_path, max_position_embeddings=None) / "config.json")
    assert main(["budget", "--model", config, "--kv-cache-memory-gb", "10"]) == 0
    assert ("max_model_len 2,048 tokens: vLLM's default 2,048: the config gives none of "
            "max_position_embeddings, n_positions" in capsys.readouterr().out)
    assert main(["compare", "--model", config, "--gpu", "h100-80gb", "--weights-gb", "28",
                 "--num-requests", "3", "--schemes", "paged", "--no-write", "--quiet",
                 "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"note: {config}: max_model_len 2,048 tokens: vLLM's default")


@pytest.mark.parametrize("entry", [["full_attention"], {"kind": "full"}, 7])
def test_a_layer_type_that_is_not_a_name_is_named(entry: object) -> None:
    """Was: TypeError (unhashable type: 'list') from a list or object among layer_types
    (found by mutating the sample configs)."""
    cfg = json.loads((CONFIGS / "gpt-oss-20b.json").read_text())
    cfg["layer_types"][3] = entry
    with pytest.raises(ConfigError, match=r"layer_types .* not supported; valid: "
                                          "full_attention, sliding_attention"):
        model_from_config(cfg, "m")
