"""``pagedsim budget`` against real vLLM start-up lines (tests/data/vllm_logs.json).

vLLM logs ``Available KV cache memory`` with two decimals of GiB, so a logged figure X
stands for any memory in [X - 0.005, X + 0.005] GiB; a line is reproduced when the logged
``GPU KV cache size`` lies between what ``budget --kv-cache-memory-gb`` gives at the two
ends, and the logged ``Maximum concurrency`` is num_blocks / blocks per request, to two
decimals, for a block count in that range giving that token count. Lines recorded as
misses are checked to still miss, so the record stays true.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pagedsim.cli import main
from pagedsim.units import GiB

DATA = Path(__file__).resolve().parents[1] / "data"
LINES = json.loads((DATA / "vllm_logs.json").read_text())["lines"]


def _budget(capsys: pytest.CaptureFixture[str], line: dict, gib: list[float]) -> dict:
    argv = ["budget", "--model", str(DATA / "hf_configs" / line["config"]),
            "--kv-cache-memory-gb", ",".join(f"{g:.3f}" for g in gib),
            "--tensor-parallel-size", str(line["tensor_parallel_size"]),
            "--pipeline-parallel-size", str(line["pipeline_parallel_size"]),
            "--kv-cache-dtype", line["kv_cache_dtype"], "--block-size", str(line["block_size"]),
            "--max-model-len", str(line["max_model_len"]), "--json"]
    if line["max_num_batched_tokens"] is not None:
        argv += ["--max-num-batched-tokens", str(line["max_num_batched_tokens"])]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _refusal_reproduced(line: dict, lo: dict, hi: dict) -> tuple[bool, str]:
    """A start-up refusal: the needed GiB (two decimals, as vLLM prints it) and, where the
    version prints it, the estimated maximum model length within the logged GiB's range."""
    needed = f"{lo['max_model_len_bytes'] / GiB:.2f}"
    if lo["fits_max_model_len"] or needed != f"{line['needed_gib']:.2f}":
        return False, f"needed {needed} GiB (fits: {lo['fits_max_model_len']}), logged " \
                      f"{line['needed_gib']:.2f}"
    est = line["estimated_max_model_len"]
    if est is None:
        return True, f"needed {needed} GiB as logged"
    span = f"{lo['estimated_max_model_len']:,} to {hi['estimated_max_model_len']:,}"
    ok = lo["estimated_max_model_len"] <= est <= hi["estimated_max_model_len"]
    return ok, f"needed {needed} GiB; estimated max model len {est:,} vs {span}"


def _reproduced(capsys: pytest.CaptureFixture[str], line: dict) -> tuple[bool, str]:
    lo = _budget(capsys, line, [g - 0.005 for g in line["available_gib"]])
    hi = _budget(capsys, line, [g + 0.005 for g in line["available_gib"]])
    if line["needed_gib"] is not None:
        return _refusal_reproduced(line, lo, hi)
    logged = line["gpu_kv_cache_size_tokens"]
    span = f"{lo['gpu_kv_cache_size_tokens']:,} to {hi['gpu_kv_cache_size_tokens']:,}"
    if not lo["gpu_kv_cache_size_tokens"] <= logged <= hi["gpu_kv_cache_size_tokens"]:
        return False, f"logged {logged:,} tokens, budget gives {span}"
    if line["max_concurrency"] is not None:
        groups, block = len(lo["groups"]), lo["block_size"]
        ok = any(blocks // groups * block == logged
                 and round(blocks / lo["blocks_per_request"], 2) == line["max_concurrency"]
                 for blocks in range(lo["num_blocks"], hi["num_blocks"] + 1))
        if not ok:
            return False, f"tokens fit ({span}) but not concurrency {line['max_concurrency']}"
    return True, f"logged {logged:,} tokens within {span}"


@pytest.mark.parametrize("line", LINES, ids=[x["id"] for x in LINES])
def test_budget_reproduces_the_logged_lines(capsys: pytest.CaptureFixture[str],
                                            line: dict) -> None:
    hit, why = _reproduced(capsys, line)
    print(f"\n{line['id']} ({line['model']}, {line['kind']}): {'hit' if hit else 'miss'}: {why}")
    assert hit == (line["expect"] == "hit"), why


def test_the_record_names_its_sources_and_kinds() -> None:
    for line in LINES:
        assert line["source"].startswith("https://github.com/"), line["id"]
        assert (DATA / "hf_configs" / line["config"]).is_file(), line["id"]
        assert line["expect"] in ("hit", "miss") and line["note"]
    kinds = Counter(x["kind"] for x in LINES)
    print(f"\nlines by kind: {dict(kinds)}")
    assert len(LINES) == len({x["id"] for x in LINES})
