"""Regression tests for bad command lines that once escaped as tracebacks, ran silently
with a default, or failed only after a whole simulation.

Each test runs the reproducer through :func:`pagedsim.cli.main` and checks the clean
outcome: exit status 2, exactly one line on stderr that names the flag and the value, and
no simulation started (the ``no_simulation`` fixture makes any run fail the test).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import error_line as _error_line

from pagedsim.cli import main
from pagedsim.experiments import (
    MAX_NUM_REQUESTS,
    Experiment,
    check_values,
    sweep_base,
    sweep_rate,
)

ROOT = Path(__file__).resolve().parents[2]
BUDGET = ["budget", "--model", "llama-2-7b", "--gpu", "a100-80gb"]
#: Flags that keep a run small and write nothing (used where a run could otherwise start).
QUIET = ["--jobs", "1", "--no-write", "--quiet"]


# --------------------------------------------------------------------------------------
# Sizes in GiB: 1e300 GiB overflowed converting to bytes (OverflowError, a traceback).


@pytest.mark.parametrize("flag", ["--weights-gb", "--activation-gb"])
def test_budget_huge_gib_is_refused(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    line = _error_line(capsys, [*BUDGET, flag, "1e300"])
    assert f"argument {flag}:" in line and "'1e300'" in line and "GiB" in line


@pytest.mark.parametrize("flag", ["--weights-gb", "--activation-gb", "--swap-gb"])
def test_compare_huge_gib_is_refused(capsys: pytest.CaptureFixture[str], no_simulation: None,
                                     flag: str) -> None:
    line = _error_line(capsys, ["compare", *QUIET, flag, "1e300"])
    assert f"argument {flag}:" in line and "'1e300'" in line


# --------------------------------------------------------------------------------------
# sweep --values: inf overflowed in int(), nan did not name the flag, 1e300 printed a
# 301-digit block size.


@pytest.mark.parametrize("sweep", ["block-size", "preemption"])
def test_sweep_values_inf(capsys: pytest.CaptureFixture[str], no_simulation: None,
                          sweep: str) -> None:
    line = _error_line(capsys, ["sweep", sweep, "--values", "inf", *QUIET])
    assert "argument --values:" in line and "'inf'" in line and "finite" in line


def test_sweep_values_nan_names_the_flag(capsys: pytest.CaptureFixture[str],
                                         no_simulation: None) -> None:
    line = _error_line(capsys, ["sweep", "block-size", "--values", "nan", *QUIET])
    assert "argument --values:" in line and "'nan'" in line


@pytest.mark.parametrize("sweep", ["block-size", "preemption", "sharing"])
def test_sweep_values_1e300_is_short(capsys: pytest.CaptureFixture[str], no_simulation: None,
                                     sweep: str) -> None:
    line = _error_line(capsys, ["sweep", sweep, "--values", "1e300", *QUIET])
    assert "argument --values:" in line and "1e+300" in line
    assert not re.search(r"\d{20}", line), line  # no 301-digit number
    assert "whole numbers from 1 to" in line  # and says what is valid


def test_sweep_values_block_larger_than_the_pool(capsys: pytest.CaptureFixture[str],
                                                 no_simulation: None) -> None:
    line = _error_line(capsys, ["sweep", "block-size", "--values", "16,65536", *QUIET])
    assert "argument --values:" in line and "block size 65536" in line


def test_check_values_library() -> None:
    exp = Experiment(num_requests=10)
    assert check_values("block-size", [1.0, 16.0], exp) == [1, 16]
    assert check_values("rate", [2, 1e300], exp) == [2.0, 1e300]
    for name, bad in (("block-size", float("inf")), ("preemption", float("nan")),
                      ("block-size", 1e300), ("sharing", 257.0), ("block-size", 1.5),
                      ("rate", 0.0), ("rate", float("nan"))):
        with pytest.raises(ValueError, match=f"sweep {name}"):
            check_values(name, [bad], exp)


# --------------------------------------------------------------------------------------
# Sizes bounded up front: 100,000 GPUs made a 3 * 10^8-block list; 10^11 requests.


def test_num_gpus_pool_too_large(capsys: pytest.CaptureFixture[str],
                                 no_simulation: None) -> None:
    line = _error_line(capsys, ["compare", "--num-gpus", "100000", *QUIET])
    assert "argument --num-gpus:" in line and "100000" in line
    assert "8,388,608" in line  # the documented bound, 2**23 blocks


def test_a_pool_of_gigabytes_is_refused_before_it_is_built(
        capsys: pytest.CaptureFixture[str], no_simulation: None) -> None:
    """Before: 1,024 H200s with llama-3-8b (66 million blocks, under the old 2**26 bound)
    took 8.9 GB and 77 s for a 5-request run of two schemes; hybrid-prefix-cache would
    have taken about 18 GB for one run."""
    line = _error_line(capsys, ["compare", "--num-gpus", "1024", "--gpu", "h200-141gb",
                                "--model", "llama-3-8b", "--num-requests", "5", *QUIET])
    assert "argument --num-gpus:" in line and "at most 8,388,608 (2**23)" in line


def test_worker_processes_are_one_per_cpu_at_most(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: ``--jobs 8`` on 2 CPUs started 8 processes, each with its own pool."""
    import os

    from pagedsim.experiments.runner import _n_jobs

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert [_n_jobs(j, 8) for j in (8, -1, None, 1)] == [2, 2, 2, 1]
    assert _n_jobs(8, 1) == 1  # and one per task
    assert main(["compare", "--jobs", "8", "--num-requests", "4", "--no-write"]) == 0
    assert "on 2 worker processes" in capsys.readouterr().err  # the start line says so


def test_budget_many_gpus_is_only_arithmetic(capsys: pytest.CaptureFixture[str]) -> None:
    """The budget allocates nothing, so 100,000 GPUs is fine there."""
    assert main([*BUDGET, "--num-gpus", "100000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_gpus"] == 100000


@pytest.mark.parametrize("value", ["100000000000", "1e23", "1" + "0" * 400])
def test_num_requests_bounded(capsys: pytest.CaptureFixture[str], no_simulation: None,
                              value: str) -> None:
    line = _error_line(capsys, ["compare", "--num-requests", value, *QUIET])
    assert "argument --num-requests:" in line
    assert len(line) < 250, line  # a 401-digit number is not repeated in full


def test_experiment_bounds_library() -> None:
    with pytest.raises(ValueError, match="num_requests must be <= 10,000,000"):
        Experiment(num_requests=MAX_NUM_REQUESTS + 1)
    with pytest.raises(ValueError, match="2\\*\\*23"):
        Experiment(num_gpus=100_000)
    with pytest.raises(ValueError, match="n must be <= max_num_seqs"):
        Experiment(n=257)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        Experiment(gpu_memory_utilization=1.5)  # the pool is checked when built, not run


# --------------------------------------------------------------------------------------
# --out naming a file failed with "[Errno 17] File exists" after the whole simulation.


@pytest.mark.parametrize("command", [["compare"], ["sweep", "block-size"], ["figures"]])
def test_out_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                       no_simulation: None, command: list[str]) -> None:
    target = tmp_path / "taken"
    target.write_text("not a folder")
    for out in (target, target / "below"):
        line = _error_line(capsys, [*command, "--out", str(out), "--jobs", "1", "--quiet"])
        assert "argument --out:" in line and str(target) in line and "not a folder" in line
    assert target.read_text() == "not a folder"


# --------------------------------------------------------------------------------------
# --workload "" silently ran ShareGPT.


@pytest.mark.parametrize("command", [["compare"], ["sweep", "block-size"]])
def test_empty_workload(capsys: pytest.CaptureFixture[str], no_simulation: None,
                        command: list[str]) -> None:
    line = _error_line(capsys, [*command, "--workload", "", *QUIET])
    assert "argument --workload:" in line and "empty" in line and "sharegpt" in line


# --------------------------------------------------------------------------------------
# sweep rate on a trace gave identical rows for every rate. It was refused; now each rate
# rescales the trace's arrivals (tests/workloads/test_trace_flags.py), and a trace that cannot be
# rescaled (a single request has no gap) fails before any run, naming the rates.


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0.5,50,30\n")
    return path


@pytest.mark.parametrize("sweep", ["rate", "all"])
def test_rate_sweep_on_a_trace_without_gaps(capsys: pytest.CaptureFixture[str],
                                            no_simulation: None, trace: Path,
                                            sweep: str) -> None:
    argv = ["sweep", sweep, "--workload", str(trace), *QUIET]
    if sweep == "rate":
        argv += ["--values", "1,16"]
    line = _error_line(capsys, argv)
    # The swept rates when given; else the trace, which cannot take any rate.
    flag = "--values" if sweep == "rate" else "--workload"
    assert f"argument {flag}:" in line and str(trace) in line and "2 arrivals" in line


def test_rate_sweep_on_a_trace_without_gaps_library(trace: Path) -> None:
    exp = Experiment(workload=str(trace))
    with pytest.raises(ValueError, match="rate_per_s 1 requests/s cannot be applied"):
        sweep_rate(exp, [1.0, 16.0], jobs=1, progress=False)

    def make(**kw: object) -> Experiment:
        return exp

    assert sweep_base("rate", make) is exp  # the rate is applied per swept value
    assert sweep_base("block-size", make) is exp


# --------------------------------------------------------------------------------------
# Preset names in any case.


def test_presets_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BUDGET, "--json"]) == 0
    lower = json.loads(capsys.readouterr().out)
    assert main(["budget", "--model", "LLAMA-2-7B", "--gpu", "A100-80GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == lower
    assert lower["model"] == "llama-2-7b" and lower["gpu"] == "a100-80gb"


def test_presets_any_case_in_compare(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--num-requests", "5", "--schemes", "paged", "--json", *QUIET]
    assert main([*argv, "--model", "OPT-13B", "--gpu", "A100-40GB"]) == 0
    upper = json.loads(capsys.readouterr().out)
    assert main([*argv, "--model", "opt-13b", "--gpu", "a100-40gb"]) == 0
    assert json.loads(capsys.readouterr().out) == upper


def test_unknown_preset_lists_the_valid(capsys: pytest.CaptureFixture[str]) -> None:
    line = _error_line(capsys, ["budget", "--model", "GPT-5", "--gpu", "a100-80gb"])
    assert "argument --model:" in line and "'GPT-5'" in line and "llama-2-7b" in line


# --------------------------------------------------------------------------------------
# `pagedsim sweep` with no name ran every sweep; now it lists them.


def test_sweep_without_a_name_lists_the_sweeps(capsys: pytest.CaptureFixture[str],
                                               no_simulation: None) -> None:
    line = _error_line(capsys, ["sweep", "--quiet"])
    for name in ("block-size", "rate", "sharing", "preemption", "all"):
        assert name in line


# --------------------------------------------------------------------------------------
# The real exit status and stderr, in a fresh interpreter.


@pytest.mark.parametrize("argv", [
    [*BUDGET, "--weights-gb", "1e300"],
    ["sweep", "block-size", "--values", "inf", *QUIET],
    ["sweep"],
], ids=["gib", "values", "no-sweep"])
def test_in_subprocess(argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "pagedsim", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------------------
# A closed pipe (`pagedsim schemes | head -1`) printed "error: [Errno 32] Broken pipe".


def test_closed_pipe_is_quiet(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    class ClosedPipe:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["schemes"]) == 1
    assert capsys.readouterr().err == ""
