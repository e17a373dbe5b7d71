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
    for rates in ("0.6", "0.01,x", "0"):  # refused before nano-vllm is looked for
        with pytest.raises(SystemExit) as refused:
            module.main([str(tmp_path), "--free-rates", rates])
        assert refused.value.code == 2
