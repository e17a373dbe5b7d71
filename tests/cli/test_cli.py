"""The command line: the seed's numbers in text and JSON, one-line errors with exit status 2.

Most checks call :func:`pagedsim.cli.main` in-process; a few run ``python -m pagedsim`` (and
the installed ``pagedsim`` console script, when it is on PATH) in a subprocess, to see the
real exit status and that no traceback reaches the user.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pagedsim import __version__
from pagedsim.cli import COMMANDS, build_parser, main
from pagedsim.units import GiB, KiB

ROOT = Path(__file__).resolve().parents[2]
SEED = ["budget", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--weights-gb", "40"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _check_one_line_error(status: int, out: str, err: str) -> str:
    assert status == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pagedsim: error: ")
    return lines[0]


# --------------------------------------------------------------------------------------
# The seed's example


def test_budget_text_has_the_seeds_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys, *SEED)
    assert status == 0 and err == ""
    assert ("2 (K and V) x 32 layers x 32 kv heads x 128 head_dim x 2 bytes = 524288 bytes "
            "= 512 KiB per token") in out
    assert "one 1024-token sequence = 1024 x 512 KiB = 512 MiB" in out
    assert "80 GiB x 0.9 - 40 GiB weights - 0 GiB activations = 32 GiB of KV cache" in out
    assert "4096 blocks of 16 = 65536 token slots" in out
    assert "2**30" in out  # the units are stated


def test_budget_defaults_match_explicit_flags(capsys: pytest.CaptureFixture[str]) -> None:
    _, default_out, _ = _run(capsys, *SEED)
    _, explicit_out, _ = _run(capsys, *SEED, "--gpu-memory-utilization", "0.9",
                              "--activation-gb", "0", "--block-size", "16", "--num-gpus", "1")
    assert default_out == explicit_out


def test_budget_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, *SEED, "--json")
    assert status == 0
    d = json.loads(out)
    assert d["bytes_per_token"] == 512 * KiB
    assert d["kv_cache_bytes"] == 32 * GiB
    assert d["gpu_memory_bytes"] == 80 * GiB
    assert d["weights_bytes"] == 40 * GiB
    assert d["num_blocks"] == 4096
    assert d["max_tokens"] == 65536
    assert d["block_size"] == 16
    assert d["model"] == "llama-2-7b" and d["gpu"] == "a100-80gb"


def test_budget_weights_default_to_the_preset(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "budget", "--model", "opt-13b", "--gpu", "a100-80gb", "--json")
    assert status == 0
    assert json.loads(out)["weights_bytes"] == 26 * GiB


def test_budget_fractional_gib(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, *SEED, "--activation-gb", "0.5", "--json")
    assert status == 0
    d = json.loads(out)
    assert d["activation_bytes"] == GiB // 2
    assert d["kv_cache_bytes"] == 32 * GiB - GiB // 2


def test_budget_table1_opt13b(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "budget", "--model", "opt-13b", "--gpu", "a100-40gb",
                          "--weights-gb", "26", "--activation-gb", "2",
                          "--gpu-memory-utilization", "1")
    assert status == 0
    assert "800 KiB per token" in out
    assert "40 GiB x 1 - 26 GiB weights - 2 GiB activations = 12 GiB of KV cache" in out
    assert "983 blocks of 16 = 15728 token slots" in out


def test_budget_several_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "budget", "--model", "opt-175b", "--gpu", "a100-80gb",
                          "--num-gpus", "8", "--gpu-memory-utilization", "1",
                          "--activation-gb", "30")
    assert status == 0
    assert "8 x 80 GiB x 1 - 346 GiB weights - 30 GiB activations = 264 GiB of KV cache" in out


@pytest.mark.parametrize("command", ["models", "gpus"])
def test_listings(capsys: pytest.CaptureFixture[str], command: str) -> None:
    status, out, _ = _run(capsys, command)
    assert status == 0
    from pagedsim import GPUS, MODELS

    for name in MODELS if command == "models" else GPUS:
        assert name in out
    status, out, _ = _run(capsys, command, "--json")
    assert status == 0
    assert set(json.loads(out)) == set(MODELS if command == "models" else GPUS)


def test_models_listing_shows_kv_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _run(capsys, "models")
    row = next(line for line in out.splitlines() if line.startswith("llama-2-7b "))
    assert "512 KiB" in row


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "--version")
    assert status == 0
    assert out.strip() == f"pagedsim {__version__}"


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "budget", "--help")
    assert status == 0
    assert "GiB" in out and "2**30" in out


def test_every_registered_command_has_a_runner() -> None:
    parser = build_parser()
    assert len(parser.command_names) == len(COMMANDS)
    for name in parser.command_names:
        extra = {"budget": ["--model", "opt-13b", "--gpu", "a100-80gb"],
                 "cache-replay": ["trace.jsonl"],
                 "calibrate": ["result.json", "--model", "llama-3.1-8b", "--gpu",
                               "a100-80gb", "--out", "profile.json"]}.get(name, [])
        args = parser.parse_args([name, *extra])
        assert callable(args.run)


# --------------------------------------------------------------------------------------
# Bad input: one line on stderr, exit status 2, the bad value named.

BAD = [
    # (argv, text the message must contain)
    ([*SEED, "--block-size", "0"], ["block_size", "0"]),
    ([*SEED, "--block-size", "-1"], ["block_size", "-1"]),
    ([*SEED, "--block-size", "1.5"], ["--block-size", "1.5"]),
    ([*SEED, "--gpu-memory-utilization", "1.5"], ["gpu_memory_utilization", "1.5"]),
    ([*SEED, "--gpu-memory-utilization", "0"], ["gpu_memory_utilization", "0"]),
    ([*SEED, "--gpu-memory-utilization", "-0.1"], ["gpu_memory_utilization", "-0.1"]),
    ([*SEED, "--gpu-memory-utilization", "nan"], ["gpu_memory_utilization", "nan"]),
    ([*SEED, "--gpu-memory-utilization", "x"], ["--gpu-memory-utilization", "'x'"]),
    ([*SEED, "--num-gpus", "0"], ["num_gpus", "0"]),
    ([*SEED, "--weights-gb", "-3"], ["--weights-gb", "-3"]),
    ([*SEED, "--weights-gb", "inf"], ["--weights-gb", "inf"]),
    ([*SEED, "--weights-gb", "72"], ["no room", "72 GiB"]),
    ([*SEED, "--seq-len", "0"], ["--seq-len", "0"]),
    (["budget", "--model", "gpt-5", "--gpu", "a100-80gb"], ["'gpt-5'", "llama-2-7b", "opt-175b"]),
    (["budget", "--model", "opt-13b", "--gpu", "tpu"], ["'tpu'", "a100-40gb", "h200-141gb"]),
    (["budget", "--model", "opt-175b", "--gpu", "a100-80gb"], ["opt-175b", "346 GiB"]),
    (["budget", "--gpu", "a100-80gb"], ["--model"]),
    ([*SEED, "--bogus"], ["--bogus"]),
    (["frobnicate"], ["'frobnicate'", "budget"]),
    ([], ["missing command", "budget", "models", "gpus"]),
]


@pytest.mark.parametrize(("argv", "expected"), BAD, ids=[" ".join(a[-2:]) for a, _ in BAD])
def test_bad_input_in_process(capsys: pytest.CaptureFixture[str], argv: list[str],
                              expected: list[str]) -> None:
    line = _check_one_line_error(*_run(capsys, *argv))
    for text in expected:
        assert text in line, line


def _subprocess_commands() -> list[list[str]]:
    commands = [[sys.executable, "-m", "pagedsim"]]
    script = shutil.which("pagedsim", path=str(Path(sys.executable).parent))
    if script:
        commands.append([script])
    return commands


@pytest.mark.parametrize("command", _subprocess_commands(), ids=lambda c: Path(c[-1]).name)
@pytest.mark.parametrize(
    "argv",
    [
        [*SEED, "--block-size", "-1"],
        [*SEED, "--gpu-memory-utilization", "1.5"],
        ["budget", "--model", "gpt-5", "--gpu", "a100-80gb"],
        [*SEED, "--block-size", "abc"],
        [],
    ],
    ids=["block-size", "utilization", "model", "argparse", "no-command"],
)
def test_bad_input_in_subprocess(command: list[str], argv: list[str]) -> None:
    proc = subprocess.run([*command, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    _check_one_line_error(proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("command", _subprocess_commands(), ids=lambda c: Path(c[-1]).name)
def test_seed_example_in_subprocess(command: list[str]) -> None:
    proc = subprocess.run([*command, *SEED], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "= 32 GiB of KV cache" in proc.stdout
    proc = subprocess.run([*command, *SEED, "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_blocks"] == 4096
