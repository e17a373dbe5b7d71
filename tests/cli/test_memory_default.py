"""One memory default: ``compare`` and ``sweep`` with ``--model`` / ``--gpu`` and no
``--preset`` size the pool with vLLM's defaults, as ``budget`` does; the default run
keeps the paper's setting (issue 34, item 6)."""

from __future__ import annotations

import json
import re

import pytest

from pagedsim.cli import main
from pagedsim.models.budget import PAPER_OPT_13B


def _budget_slots(capsys: pytest.CaptureFixture[str], flags: list[str]) -> int:
    assert main(["budget", *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return out["gpu_kv_cache_size_tokens"] if "gpu_kv_cache_size_tokens" in out \
        else out["max_tokens"]


def _compare_slots(capsys: pytest.CaptureFixture[str], flags: list[str]) -> int:
    assert main(["compare", *flags, "--num-requests", "5", "--jobs", "1", "--no-write",
                 "--quiet", "--schemes", "paged"]) == 0
    found = re.search(r"([\d,]+) KV slots", capsys.readouterr().out)
    assert found is not None
    return int(found.group(1).replace(",", ""))


@pytest.mark.parametrize("flags", [
    ["--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--weights-gb", "68"],
    ["--model", "llama-3.1-8b", "--gpu", "a100-80gb"],
    ["--model", "llama-3.1-8b", "--gpu", "a100-40gb", "--num-gpus", "2"],
    ["--model", "qwen3-14b", "--gpu", "h100-80gb", "--gpu-memory-utilization", "0.8",
     "--activation-gb", "3"],
])
def test_budget_and_compare_give_the_same_pool(capsys: pytest.CaptureFixture[str],
                                               flags: list[str]) -> None:
    """gpt-oss-120b with 68 GiB of weights on an H100 got 53,632 slots from budget and
    140,496 from compare (the paper's utilization 1 and 2 GiB of activations)."""
    budget = _budget_slots(capsys, flags)
    assert _compare_slots(capsys, flags) == budget
    if flags[1] == "gpt-oss-120b":
        assert budget == 53_632


def test_the_default_run_keeps_the_papers_setting(capsys: pytest.CaptureFixture[str]
                                                  ) -> None:
    """No --model, no --gpu: the paper's 15,728 slots; --preset keeps its setting under
    --model too."""
    paper = PAPER_OPT_13B.budget().max_tokens
    assert _compare_slots(capsys, []) == paper == 15_728
    on_paper = ["--preset", PAPER_OPT_13B.name, "--model", "opt-13b"]
    assert _compare_slots(capsys, on_paper) == paper
    # the same model and GPU named explicitly: vLLM's defaults, as budget says
    named = ["--model", "opt-13b", "--gpu", "a100-40gb"]
    assert _compare_slots(capsys, named) == _budget_slots(capsys, named) != paper


def test_help_says_which_default_applies(capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping inside the phrases checked
    assert main(["compare", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "With --model or --gpu and no --preset: vLLM's defaults, utilization 0.9" in text
    assert f"default, when neither --model nor --gpu is given: {PAPER_OPT_13B.name}" in text
