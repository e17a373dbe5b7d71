"""The kernels' command lines answer --help (it used to be ignored) with every option
explained."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")


@pytest.mark.parametrize("module", ["pagedsim.kernels", "pagedsim.kernels.bench"])
def test_help_explains_every_option(module):
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: python -m {module}")
    assert "backend=" not in out.stdout  # help, not the backend report



def test_every_bench_option_has_help(monkeypatch):
    import argparse

    from pagedsim.kernels import bench

    captured: list[argparse.ArgumentParser] = []
    real = argparse.ArgumentParser.parse_args

    def keep(self, *args, **kwargs):
        captured.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", keep)
    bench.parse_args([])
    assert [a.option_strings for a in captured[0]._actions if not a.help] == []


@pytest.mark.parametrize("argv, needle", [
    (["--batch", "0"], "argument --batch: must be from 1 to 4,096, got 0"),
    (["--batch", "8", "100000000"], "argument --batch: must be from 1 to 4,096, got 100,000,000"),
    (["--context", "1000000000"], "argument --context: must be from 1 to 1,048,576"),
    (["--block-size", "12"], "argument --block-size: must be a power of two"),
    (["--iters", "1000000000"], "argument --iters: must be from 1 to 10,000"),
    (["--warmup", "-1"], "argument --warmup: must be from 0 to 1,000, got -1"),
    (["--max-minutes", "nan"], "argument --max-minutes: must be from 0 to 1,440 (and more "
                               "than 0), got nan"),
    (["--batch", "x"], "argument --batch: invalid int value: 'x'"),
])
def test_bench_flags_are_checked_before_anything_runs(capsys, argv, needle):
    """Were: taken as given (on a GPU: --batch 0 or --iters 0 a traceback, --iters 10**9 a
    sweep that never ends, --max-minutes nan no limit); argparse's usage text, not one line."""
    from pagedsim.kernels import bench

    assert bench.main([*argv, "--out", "unused.csv"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and needle in lines[0], captured.err
    assert captured.out == ""  # not even the backend line: nothing ran
