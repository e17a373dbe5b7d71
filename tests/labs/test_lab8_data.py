"""Lab 8's copy of the vLLM start-up lines (labs/lab8_todays_models/vllm_lines.json) is
the repository's record (tests/data/vllm_logs.json, tests/data/hf_configs/): the same
facts for every line it holds, every reproduced line without pipeline parallelism in
it, and its configs equal to the config files. The lab is released on its own, so it
carries its copy; this keeps the copy true."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
LAB = ROOT / "labs" / "lab8_todays_models" / "vllm_lines.json"
pytestmark = pytest.mark.skipif(not LAB.is_file(), reason="lab 8 missing")


def _record() -> dict[str, dict]:
    return {x["id"]: x for x in json.loads((DATA / "vllm_logs.json").read_text())["lines"]}


def _lab() -> dict:
    return json.loads(LAB.read_text(encoding="utf-8"))


def test_every_lab_line_is_the_records() -> None:
    record = _record()
    for line in _lab()["lines"]:
        mine = record[line["id"]]
        assert mine["config"] == f"{line['config']}.json", line["id"]
        assert mine["available_gib"] == [line["available_gib"]], line["id"]
        for key, value in line.items():
            if key not in ("config", "available_gib"):
                assert mine[key] == value, (line["id"], key)


def test_the_lab_holds_every_reproduced_line_without_pp() -> None:
    wanted = {i for i, x in _record().items()
              if x["expect"] == "hit" and x["pipeline_parallel_size"] == 1}
    assert wanted == {x["id"] for x in _lab()["lines"]}


def test_the_lab_configs_are_the_config_files() -> None:
    lab = _lab()
    assert {x["config"] for x in lab["lines"]} <= set(lab["configs"])
    for name, cfg in lab["configs"].items():
        assert cfg == json.loads((DATA / "hf_configs" / f"{name}.json").read_text()), name
