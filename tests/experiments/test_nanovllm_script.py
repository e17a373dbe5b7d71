"""scripts/nanovllm_blocks.py without a nano-vllm checkout: its refusal of a folder that is
not one, its xxhash stand-in, and its report (the comparison itself needs the checkout;
its printed result is in the script's docstring)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "nanovllm_blocks.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nanovllm_blocks", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_folder_without_nanovllm_is_refused(script: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="holds no nanovllm/engine/block_manager.py"):
        script.load_block_manager(tmp_path)


def test_the_xxhash_stand_in_chains_like_xxh64(script: ModuleType) -> None:
    xxh64 = script._xxhash_stand_in().xxh64
    a, b, c = xxh64(), xxh64(), xxh64()
    a.update(b"\x01\x02")
    b.update(b"\x01\x02")
    c.update(b"\x01\x03")
    assert a.intdigest() == b.intdigest() != c.intdigest()
    assert 0 <= a.intdigest() < 2**64


@pytest.mark.parametrize("args", [["--requests", "0"], ["--requests", "100001"],
                                  ["--concurrency", "5000"], ["--block-size", "0"]])
def test_out_of_range_sizes_are_refused_before_a_run(script: ModuleType, tmp_path: Path,
                                                     args: list[str]) -> None:
    with pytest.raises(SystemExit) as refused:  # argparse: one line and exit 2
        script.main([str(tmp_path), *args])
    assert refused.value.code == 2


def test_report_counts_the_steps_where_ours_uses_more(script: ModuleType) -> None:
    used = {"nano-vllm": [4, 6, 5], "prefix-cache": [4, 7, 3], "paged": [5, 8, 6]}
    text = script.report(used, 10, 2, 16)
    assert "3 steps" in text and "more blocks than nano-vllm: 1 of 3" in text
    assert "peak 1.167x, mean 0.933x" in text


def test_the_speed_script_refuses_a_folder_without_nanovllm(tmp_path: Path) -> None:
    path = SCRIPT.parent / "nanovllm_speed.py"
    spec = importlib.util.spec_from_file_location("nanovllm_speed", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit, match="holds no nanovllm/engine/block_manager.py"):
        module.main([str(tmp_path), "--ops", "1000"])
    with pytest.raises(SystemExit):  # argparse: one line and exit 2
        module.main([str(tmp_path), "--ops", "5"])
    bad = [["--free-rates", "0.6"], ["--free-rates", "0.01,x"], ["--free-rates", "0"],
           ["--free-rates", ",".join(["0.01"] * 21)], ["--ops", "10000000"],
           ["--repeats", "0"], ["--repeats", "1000"]]
    for args in bad:  # refused before nano-vllm is looked for, or any stream is drawn
        with pytest.raises(SystemExit) as refused:
            module.main([str(tmp_path), *args])
        assert refused.value.code == 2, args
