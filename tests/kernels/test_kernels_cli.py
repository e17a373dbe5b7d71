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
