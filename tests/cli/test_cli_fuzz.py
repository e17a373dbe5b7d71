"""Every subcommand against a table of bad values: exit status 2, exactly one line on
stderr naming the bad flag, no traceback, nothing on stdout, and no simulation started.

The table crosses each value-taking flag with generic bad values (non-numbers, NaN,
infinities, 0, negatives, 1e300, empty and blank text) minus the few that are valid for
that flag (``--rate inf`` means all requests at t = 0), plus files where a flag takes a
path: a directory, a binary file or a missing file as a trace, a file as ``--out``.
Everything runs in-process through :func:`pagedsim.cli.main`, so the whole table takes
about a second; a few cases also run in a fresh interpreter for the real exit status.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pagedsim.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
#: Generic bad values tried on every value-taking flag (minus VALID below).
BAD = ["abc", "nan", "inf", "-inf", "0", "-1", "1e300", "", " ", "1.5", "0x10"]
#: Each command's argv before the flag under test (the flag comes last, so it wins).
BASE = {
    "budget": ["budget", "--model", "llama-2-7b", "--gpu", "a100-80gb"],
    "compare": ["compare", "--jobs", "1", "--no-write", "--quiet"],
    "sweep": ["sweep", "block-size", "--jobs", "1", "--no-write", "--quiet"],
    "sweep-rate": ["sweep", "rate", "--jobs", "1", "--no-write", "--quiet"],
    "figures": ["figures", "--jobs", "1", "--quiet"],
}
#: Values of BAD that are valid for a flag (skipped for it).
VALID = {
    "--rate": {"inf", "1e300", "1.5"},
    "--seed": {"0"},
    "--jobs": {"-1"},
    "--max-step-rows": {"0"},
    "--weights-gb": {"0", "1.5"},
    "--activation-gb": {"0", "1.5"},
    "--swap-gb": {"0", "1.5"},
    "--gpu-memory-utilization": set(),
    "--kv-cache-memory-gb": {"1.5"},
    "--host-cache-gb": {"0", "1.5"},  # 0: no host tier
}
#: Flags that take text, not numbers: each with its own bad values instead of BAD.
TEXT_BAD = {
    "--model": ["", " ", "gpt-5", "0"],
    "--gpu": ["", " ", "tpu", "nan"],
    "--preemption": ["", "pause", "0"],
    "--part": ["", "half"],
    "--schemes": ["", ",", "nan", "paged,paged", "contiguous-huge"],
}
#: Flags whose every bad value needs a run with more context (own tests below).
PATH_FLAGS = {"--workload", "--out"}


def _value_flags(command: str) -> list[str]:
    """The long flags of ``command`` that take a value (from the parser, so a flag added
    later is fuzzed too)."""
    sub = build_parser().command_parsers[command]
    return [a.option_strings[-1] for a in sub._actions
            if a.option_strings and a.nargs != 0 and a.option_strings[-1].startswith("--")]


def _cases() -> list[tuple[str, list[str], str]]:
    """(id, argv, flag) for every command x value-taking flag x bad value."""
    cases = []
    for key, base in BASE.items():
        command = base[0]
        for flag in _value_flags(command):
            if flag in PATH_FLAGS or flag == "--values":
                continue  # own tests below (--values: per sweep)
            if flag == "--schemes" and key == "sweep":
                continue  # --schemes is the rate sweep's: fuzzed under sweep-rate
            if key == "sweep-rate" and flag != "--schemes":
                continue  # the shared options are fuzzed under "sweep"
            values = TEXT_BAD.get(flag, [v for v in BAD if v not in VALID.get(flag, set())])
            for value in values:
                cases.append((f"{key} {flag} {value!r}", [*base, flag, value], flag))
    for sweep in ("block-size", "rate", "sharing", "preemption"):
        base = ["sweep", sweep, "--jobs", "1", "--no-write", "--quiet"]
        valid = {"1e300", "1.5", "100000"} if sweep == "rate" else set()  # req/s
        for value in [*BAD, ",", "1,inf", "2,nan", "100000", "1" + "0" * 400]:
            if value not in valid:
                cases.append((f"sweep {sweep} --values {value!r}",
                              [*base, "--values", value], "--values"))
    return cases


CASES = _cases()




def _check(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> str:
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2, f"{argv}: exit {status}; stderr {captured.err!r}"
    assert captured.out == ""
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("pagedsim: error: ")
    # The flag itself, not a longer one it prefixes (--n is not --num-gpus).
    assert re.search(re.escape(flag) + r"(?![\w-])", lines[0]), lines[0]
    return lines[0]


def test_the_table_covers_every_command() -> None:
    """Each command with value-taking flags is in the table, and the table is big enough
    to mean something (it is built from the parsers, so this guards the builder)."""
    fuzzed = {argv[0] for _, argv, _ in CASES}
    assert fuzzed == {"budget", "compare", "sweep", "figures"}
    flags = {flag for _, _, flag in CASES}
    assert {"--num-gpus", "--block-size", "--n", "--values", "--weights-gb", "--rate",
            "--jobs", "--seq-len", "--schemes"} <= flags
    assert len(CASES) > 300


@pytest.mark.parametrize(("argv", "flag"), [(a, f) for _, a, f in CASES],
                         ids=[i for i, _, _ in CASES])
def test_bad_value(capsys: pytest.CaptureFixture[str], no_simulation: None,
                   argv: list[str], flag: str) -> None:
    _check(capsys, argv, flag)


# --------------------------------------------------------------------------------------
# Paths: a trace that is a directory, a binary file or missing; --out that is a file.


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    text = tmp_path / "not_a_trace.csv"
    text.write_text("hello,world\n1,2\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    afile = tmp_path / "afile"
    afile.write_text("x")
    return {"dir": tmp_path, "binary": binary, "text": text, "empty": empty,
            "missing": tmp_path / "missing.csv", "afile": afile,
            "below_file": afile / "sub"}


@pytest.mark.parametrize("base", ["compare", "sweep"])
@pytest.mark.parametrize("which", ["dir", "binary", "text", "empty", "missing"])
def test_bad_trace(capsys: pytest.CaptureFixture[str], no_simulation: None,
                   paths: dict[str, Path], base: str, which: str) -> None:
    _check(capsys, [*BASE[base], "--workload", str(paths[which])], "--workload")


@pytest.mark.parametrize("base", ["compare", "sweep", "figures"])
@pytest.mark.parametrize("which", ["afile", "below_file", ""])
def test_bad_out(capsys: pytest.CaptureFixture[str], no_simulation: None,
                 paths: dict[str, Path], base: str, which: str) -> None:
    argv = [a for a in BASE[base] if a != "--no-write"]  # --out is checked only if used
    out = str(paths[which]) if which else ""
    _check(capsys, [*argv, "--out", out], "--out")


@pytest.mark.parametrize("command", ["budget", "models", "gpus", "schemes", "compare",
                                     "sweep", "figures"])
def test_unknown_flag(capsys: pytest.CaptureFixture[str], no_simulation: None,
                      command: str) -> None:
    _check(capsys, [*BASE.get(command, [command]), "--bogus"], "--bogus")


@pytest.mark.parametrize("argv, flag", [
    ([*BASE["budget"], "--num-gpus", "nan"], "--num-gpus"),
    ([*BASE["compare"], "--rate", "-inf"], "--rate"),
    (["sweep", "preemption", "--values", "inf", "--no-write"], "--values"),
], ids=["budget", "compare", "sweep"])
def test_in_subprocess(argv: list[str], flag: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pagedsim", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and flag in lines[0], proc.stderr
