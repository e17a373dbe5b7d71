"""``pagedsim budget`` with vLLM's sizing flags: the printed lines, --json, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pagedsim.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
QWEN14 = ["budget", "--model", "qwen3-14b", "--kv-cache-memory-gb", "6.51",
          "--max-model-len", "32768"]


def test_prints_vllms_two_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(QWEN14) == 0
    out = capsys.readouterr().out
    assert "GPU KV cache size: 42,656 tokens" in out
    assert "Maximum concurrency for 32,768 tokens per request: 1.30x" in out
    assert "2,666 blocks" in out and "160 KiB per token" in out


def test_json_has_the_logged_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*QWEN14, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gpu_kv_cache_size_tokens"] == 42656 and d["num_blocks"] == 2666
    assert round(d["max_concurrency"], 2) == 1.30


def test_config_path_and_hybrid_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "--model", str(CONFIGS / "gpt-oss-20b.json"),
                 "--kv-cache-memory-gb", "10"]) == 0
    out = capsys.readouterr().out
    assert "KV-cache groups: 2" in out and "issue 24" in out
    assert "GPU KV cache size: 218,448 tokens" in out  # 27,306 blocks // 2 groups x 16


def test_hybrid_model_without_flags_gets_vllms_sizing(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    assert main(["budget", "--model", "gemma-3-27b", "--gpu", "h200-141gb"]) == 0
    assert "KV-cache groups: 7" in capsys.readouterr().out


def test_seed_output_unchanged_without_vllm_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                 "--weights-gb", "40"]) == 0
    out = capsys.readouterr().out
    assert "4096 blocks of 16 = 65536 token slots" in out and "vLLM logs" not in out


@pytest.mark.parametrize(("extra", "words"), [
    (["--gpu-memory-utilization", "0.9"], ["--gpu-memory-utilization", "--kv-cache-memory-gb"]),
    (["--tensor-parallel-size", "3"], ["--tensor-parallel-size", "3"]),
    (["--kv-cache-dtype", "int4"], ["--kv-cache-dtype", "'int4'"]),
    (["--kv-cache-memory-gb", "1,2"], ["--kv-cache-memory-gb", "2 figures for 1 pipeline stages"]),
    (["--kv-cache-memory-gb", "5,5,5", "--pipeline-parallel-size", "2"],
     ["--kv-cache-memory-gb", "3 figures for 2 pipeline stages"]),
    (["--kv-cache-memory-gb", "0"], ["--kv-cache-memory-gb", "more than 0 GiB"]),
    (["--tensor-parallel-size", "0"], ["--tensor-parallel-size", ">= 1"]),
    (["--pipeline-parallel-size", "0"], ["--pipeline-parallel-size", ">= 1"]),
    (["--max-num-batched-tokens", "0"], ["--max-num-batched-tokens", ">= 1"]),
])
def test_bad_flags_one_line_exit_2(capsys: pytest.CaptureFixture[str], extra: list[str],
                                   words: list[str]) -> None:
    assert main([*QWEN14, *extra]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert all(w in err for w in words), err


def test_equal_stage_figures_are_not_a_duplicate(capsys: pytest.CaptureFixture[str]) -> None:
    """Each pipeline stage logs its own 'Available KV cache memory'; stages of equal
    layers log the same figure, so 10,10 is two stages, not a value given twice."""
    argv = ["budget", "--model", "llama-3.1-8b", "--pipeline-parallel-size", "2", "--json"]
    assert main([*argv, "--kv-cache-memory-gb", "10,10"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert main([*argv, "--kv-cache-memory-gb", "10"]) == 0
    assert both == json.loads(capsys.readouterr().out)
    assert both["stage_memory_bytes"] == [10 << 30, 10 << 30]


def test_unknown_weights_of_a_config_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """A config too trimmed to count its parameters (no vocab_size), without an index."""
    assert main(["budget", "--model", str(CONFIGS / "qwen3-0.6b.json"),
                 "--gpu", "h100-80gb", "--tensor-parallel-size", "2"]) == 2
    err = capsys.readouterr().err
    assert "--weights-gb" in err and "no vocab_size" in err


@pytest.mark.parametrize("model", ["gpt-oss-20b", str(CONFIGS / "qwen3-14b.json")])
def test_compare_takes_new_presets_and_configs(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path, model: str) -> None:
    """compare runs on a preset of today's models and on a config.json (whose weights,
    unknown to the config, are given)."""
    argv = ["compare", "--model", model, "--gpu", "h100-80gb", "--num-requests", "5",
            "--jobs", "1", "--out", str(tmp_path), "--json"]
    if model.endswith(".json"):
        argv += ["--weights-gb", "28"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    # gpt-oss slides on half its layers: all full attention beside vLLM's hybrid manager
    want = {"all-full", "hybrid"} if model == "gpt-oss-20b" else {"paged"}
    assert {r["scheme"] for r in rows} >= want


def test_compare_with_a_config_and_no_weights_is_refused(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    argv = ["compare", "--model", str(CONFIGS / "qwen3-0.6b.json"), "--gpu", "h100-80gb",
            "--num-requests", "5", "--jobs", "1", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "--weights-gb" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before any work


def test_zero_gpus_on_the_gpu_path_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """With --gpu (no --kv-cache-memory-gb) a TP of 0 is refused by name, not divided by."""
    assert main(["budget", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                 "--tensor-parallel-size", "0"]) == 2
    err = capsys.readouterr().err
    assert "--tensor-parallel-size" in err and "Traceback" not in err
