"""The README's benchmark_serving block is what its command prints today: the command is
read from the README itself and rerun."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

from pagedsim.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _command_and_block() -> tuple[list[str], str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block_at = readme.index("```\n======== Serving Benchmark Result:")
    found = list(re.finditer(r"`pagedsim (compare [^`]*--latency[^`]*)`", readme[:block_at]))
    assert found, "no `pagedsim compare ... --latency` command before the block"
    argv = shlex.split(found[-1].group(1).replace("\n", " "))
    block = readme[block_at + 4:readme.index("```", block_at + 4)]
    return argv, block


def test_the_readme_serving_block_is_what_its_command_prints(tmp_path, monkeypatch):
    argv, block = _command_and_block()
    assert "--no-write" in argv
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) in (0, None)
    printed = out.getvalue()
    assert block.strip() in printed, printed[printed.find("======== Serving"):]
