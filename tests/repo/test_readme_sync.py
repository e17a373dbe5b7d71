"""The README's reproduction table is the one `pagedsim figures` wrote (no stale numbers)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _norm(text: str) -> str:
    return text.replace("≥", ">=").replace("≤", "<=").strip()


def test_readme_reproduction_table_equals_figures_readme():
    figures = (ROOT / "figures" / "README.md").read_text(encoding="utf-8")
    block = figures.split("## Reproduction targets", 1)[1].split("```")[1]
    rows = {}
    for line in block.strip().splitlines()[2:]:  # skip header and rule
        target, ours, paper, holds = re.split(r"\s{2,}", line.strip())
        rows[_norm(target)] = (ours, paper, holds)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("**Reproduction.**", 1)[1].split("\n\n")[1]
    seen = {}
    for line in table.splitlines()[2:]:
        target, ours, paper = (c.strip() for c in line.strip().strip("|").split("|"))
        seen[_norm(target)] = (ours, paper)
    assert seen.keys() == rows.keys()
    for target, (ours, paper) in seen.items():
        assert (ours, paper) == rows[target][:2], target
        assert rows[target][2] == "yes", f"figures/README.md says {target!r} does not hold"


def test_readme_quotes_the_budget_lines_its_command_prints(capsys):
    """The README's vLLM sizing example: the command it shows prints the two lines it
    quotes."""
    from pagedsim.cli import main

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    command = ("pagedsim budget --model qwen3-14b --kv-cache-memory-gb 6.51 "
               "--max-model-len 32768")
    assert command in readme
    assert main(command.split()[1:]) == 0
    lines = capsys.readouterr().out.splitlines()
    tokens = next(x for x in lines if x.startswith("GPU KV cache size:"))
    concurrency = next(x for x in lines if x.startswith("Maximum concurrency for"))
    assert f"`{tokens}`" in readme and f"`{concurrency}`" in readme
