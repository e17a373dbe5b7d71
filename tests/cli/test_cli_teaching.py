"""The command line tells the truth (issue 13): each sweep's help gives its own defaults,
one named preset is the paper's memory setting in ``budget`` and ``compare`` alike, the
paper's numbers stand only beside runs in the paper's setting, the ``preempt`` column
says what it counts, and progress is a start line (always) plus a bar in requests (on a
terminal).

Runs are small (tens of requests, ``--jobs 1`` unless the test is about workers).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from pagedsim.cli import build_parser, experiment_options, main
from pagedsim.cli import simulate as simulate_cli
from pagedsim.cli import sweep as sweep_cli
from pagedsim.engine.simulator import simulate
from pagedsim.experiments import Experiment, run_many, run_one, sweep_base
from pagedsim.experiments import runner as runner_module
from pagedsim.experiments.spec import DEFAULT_NUM_REQUESTS
from pagedsim.experiments.sweeps import SWEEPS, SWEPT_FIELDS_OF
from pagedsim.memory.schemes import make_allocator
from pagedsim.models.budget import PAPER_OPT_13B

SMALL = ["--jobs", "1", "--no-write"]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return captured.out, captured.err


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2 and captured.out == "", captured
    (line,) = captured.err.splitlines()
    return line


def _helps(parser: Any) -> dict[str, str]:
    """Each option's help text by its long flag, whitespace collapsed."""
    return {a.option_strings[-1]: " ".join((a.help or "").split())
            for a in parser._actions if a.option_strings}


# --------------------------------------------------------------------------------------
# sweep help


def _sweep_defaults(name: str) -> Experiment:
    """What ``pagedsim sweep NAME`` really runs without flags."""
    args = build_parser().parse_args(["sweep", name])
    return sweep_base(name, lambda **kw: experiment_options.experiment(args, **kw))


@pytest.mark.parametrize("name", list(SWEEPS))
def test_each_sweep_has_its_own_help_with_its_real_defaults(
        capsys: pytest.CaptureFixture[str], name: str) -> None:
    out, _ = _run(capsys, ["sweep", name, "--help"])
    assert out.startswith(f"usage: pagedsim sweep {name} ")
    assert out == sweep_cli.sweep_parser(name).format_help()
    exp = _sweep_defaults(name)
    helps = _helps(sweep_cli.sweep_parser(name))
    assert f"default {exp.num_requests:,};" in helps["--num-requests"]
    assert f"default {exp.workload})" in helps["--workload"]
    swept = {f for f in SWEPT_FIELDS_OF[name]}
    if "rate_per_s" in swept:
        assert helps["--rate"].startswith("set per run by the rate sweep")
    else:
        assert f"default {exp.rate_per_s:g} requests/s" in helps["--rate"]
    if "preemption" in swept:
        assert helps["--preemption"].startswith("set per run by the preemption sweep")
    else:
        assert f"default {exp.preemption})" in helps["--preemption"]
    # Compare's defaults appear nowhere in a sweep's help.
    assert f"{DEFAULT_NUM_REQUESTS:,}" not in " ".join(helps.values())
    assert "for compare" not in out
    assert ("--schemes" in helps) == (name in ("rate", "cache-size", "host-cache"))
    if "host_cache_gb" in swept:
        assert helps["--host-cache-gb"].startswith("set per run by the host-cache sweep")


def test_sweep_helps_differ_and_the_overview_lists_every_sweep(
        capsys: pytest.CaptureFixture[str]) -> None:
    texts = {name: _run(capsys, ["sweep", name, "--help"])[0] for name in SWEEPS}
    assert len(set(texts.values())) == len(SWEEPS)
    overview, _ = _run(capsys, ["sweep", "--help"])
    assert overview not in texts.values()
    flat = " ".join(overview.split())
    for name in SWEEPS:
        exp = _sweep_defaults(name)
        line = flat[flat.index(f" {name} "):]
        assert f"{exp.num_requests:,} requests" in line[:600], name
    assert f"default {DEFAULT_NUM_REQUESTS}" not in flat
    assert f"default {DEFAULT_NUM_REQUESTS:,}" not in flat
    assert "default 5 for compare" not in flat
    helps = _helps(build_parser().command_parsers["sweep"])
    assert "each sweep's own" in helps["--num-requests"]
    assert "each sweep's own" in helps["--rate"]


@pytest.mark.parametrize(("name", "flag", "value"), [
    ("block-size", "--block-size", "32"), ("rate", "--rate", "3"),
    ("sharing", "--n", "2"), ("sharing", "--beam-width", "3"),
    ("preemption", "--preemption", "swap"), ("preemption", "--block-size", "8"),
])
def test_a_flag_the_sweep_sets_is_refused_not_ignored(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        name: str, flag: str, value: str) -> None:
    monkeypatch.setattr(runner_module, "run_scheme", _no_run)
    line = _error(capsys, ["sweep", name, flag, value, "--quiet", *SMALL])
    assert line.startswith(f"pagedsim: error: argument {flag}: the {name} sweep sets it")
    assert "--values" in line


def _no_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("a simulation started")


# --------------------------------------------------------------------------------------
# One preset for the paper's memory setting, in budget and in compare


def test_budget_preset_is_the_papers_setting_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = _run(capsys, ["budget", "--preset", "paper-opt-13b"])
    assert "40 GiB x 1 - 26 GiB weights - 2 GiB activations = 12 GiB of KV cache" in out
    assert "= 15728 token slots" in out
    assert "this is preset paper-opt-13b" in out and "15.7K" in out
    out, _ = _run(capsys, ["budget", "--preset", "paper-opt-13b", "--json"])
    data = json.loads(out)
    assert data["max_tokens"] == 15728 and data["preset"] == "paper-opt-13b"


def test_budget_without_the_preset_keeps_vllms_defaults_and_points_to_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = _run(capsys, ["budget", "--model", "opt-13b", "--gpu", "a100-40gb"])
    assert "40 GiB x 0.9 - 26 GiB weights - 0 GiB activations" in out
    assert "= 13104 token slots" in out  # unchanged
    assert "--preset paper-opt-13b" in out and "15,728 token slots" in out
    assert "15.7K" in out
    out, _ = _run(capsys, ["budget", "--preset", "paper-opt-13b",
                           "--gpu-memory-utilization", "0.9", "--json"])
    assert json.loads(out)["preset"] is None  # overridden: no longer the paper's
    out, _ = _run(capsys, ["budget", "--model", "llama-2-7b", "--gpu", "a100-80gb"])
    assert "preset" not in out  # no named setting for this pair


def test_budget_needs_a_model_and_gpu_or_a_preset(capsys: pytest.CaptureFixture[str]) -> None:
    line = _error(capsys, ["budget", "--gpu", "a100-80gb"])
    assert "argument --model" in line and "--preset" in line
    line = _error(capsys, ["budget", "--preset", "paper-opt-175b"])
    assert "argument --preset" in line and "paper-opt-13b" in line


def test_compare_runs_the_same_preset_and_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    default = build_parser().parse_args(["compare"])
    exp = experiment_options.experiment(default)
    assert exp.capacity_slots() == PAPER_OPT_13B.budget().max_tokens == 15728
    assert exp.preset == "paper-opt-13b"
    named = experiment_options.experiment(build_parser().parse_args(
        ["compare", "--preset", "PAPER-OPT-13B"]))
    assert named == exp
    out, _ = _run(capsys, ["compare", "--num-requests", "20", "--schemes", "paged", *SMALL,
                           "--quiet"])
    assert out.splitlines()[0].startswith(
        "KV-cache memory by scheme: opt-13b on a100-40gb (preset paper-opt-13b), 15,728 "
        "KV slots")


# --------------------------------------------------------------------------------------
# The paper's numbers only in the paper's setting


def _table(capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    out, _ = _run(capsys, ["compare", "--num-requests", "30", "--schemes",
                           "contiguous-max,paged", *SMALL, "--quiet", *flags])
    return out


def test_paper_numbers_beside_the_papers_setting(capsys: pytest.CaptureFixture[str]) -> None:
    out = _table(capsys)
    paged = next(line for line in out.splitlines() if line.startswith("paged "))
    assert "96.3" in paged and "30.42" in paged  # Fig. 2 token share, Fig. 13 batch
    assert "Fig. 2 shares" in out and "Fig. 13 mean batch size (sharegpt at 2 req/s" in out
    assert "this run: 5 req/s" in out  # the rate differs, and is said to


def test_no_figure2_shares_beside_alpaca_n4(capsys: pytest.CaptureFixture[str]) -> None:
    out = _table(capsys, "--workload", "alpaca", "--n", "4")
    _no_paper_columns(out)
    assert ("the vLLM paper's Fig. 2 shares and Fig. 13 batch sizes are not printed: this "
            "run is not their setting (workload alpaca; n = 4)") in out


def test_alpaca_n1_gets_figure13_alpaca_but_not_figure2(
        capsys: pytest.CaptureFixture[str]) -> None:
    out = _table(capsys, "--workload", "alpaca", "--rate", "30")
    paged = next(line for line in out.splitlines() if line.startswith("paged "))
    assert "132.44" in paged and "96.3" not in paged
    assert "Fig. 13 mean batch size (alpaca at 30 req/s)" in out
    assert "Fig. 2 shares are not printed" in out and "(workload alpaca)" in out


def test_no_paper_numbers_in_another_memory_setting(capsys: pytest.CaptureFixture[str]) -> None:
    out = _table(capsys, "--gpu-memory-utilization", "0.9")
    _no_paper_columns(out)
    assert "not preset paper-opt-13b" in out


def _no_paper_columns(out: str) -> None:
    """The table has our nine columns only: no '| paper:' part in any row."""
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("scheme"))
    assert "paper" not in header and len(header.split()) == 9
    for line in lines:
        if line.startswith(("contiguous-max", "paged")):
            cells = line.replace(" *", "").split()  # '*': never saturated
            assert "|" not in line and len(cells) == 9, line


# --------------------------------------------------------------------------------------
# What preempt counts, and how multi-sequence groups are preempted

#: A small pool (40 GiB x 0.72 - 26 - 2 = 0.8 GiB: 1,040 slots) that preempts a lot.
TIGHT = ["--gpu-memory-utilization", "0.72", "--rate", "inf"]


def test_preempt_counts_events_and_names_the_requests(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--num-requests", "40", "--schemes", "paged", *TIGHT, *SMALL,
            "--quiet"]
    out, _ = _run(capsys, argv)
    assert "preempt: preemption events; one request can be preempted several times" in out
    match = re.search(r"requests preempted at least once: paged ([\d,]+), of 40\)", out)
    assert match, out
    # Independently: the simulator's own per-request records.
    args = build_parser().parse_args(argv)
    exp = experiment_options.experiment(args)
    alloc = make_allocator("paged", exp.capacity_slots(), exp.block_size, exp.max_model_len)
    result = simulate(exp.requests(), alloc, exp.cost_model(), exp.scheduler_config(),
                      progress=False)
    per_request = result.requests()["num_preemptions"]
    assert int(match.group(1).replace(",", "")) == int((per_request > 0).sum())
    events = int(next(line for line in out.splitlines()
                      if line.startswith("paged ")).split()[8].replace(",", ""))
    assert events == result.num_preemptions == int(per_request.sum())
    assert events > (per_request > 0).sum() > 0  # some request was preempted twice
    rows = json.loads(_run(capsys, [*argv, "--json"])[0])
    assert rows[0]["preempted_requests"] == int((per_request > 0).sum())


def test_multi_sequence_groups_are_said_to_swap(capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = _run(capsys, ["compare", "--num-requests", "30", "--schemes", "paged",
                           "--workload", "alpaca", "--n", "4", *TIGHT, *SMALL, "--quiet"])
    title = out.splitlines()[0]
    assert "preemption by recompute (multi-sequence groups swap, as in vLLM v0)" in title
    assert "swapped to the CPU, not recomputed" in out
    assert re.search(r"swap-outs: paged [1-9]", out), out  # and they really did swap
    out, _ = _run(capsys, ["compare", "--num-requests", "10", "--schemes", "paged", *SMALL,
                           "--quiet"])
    assert "multi-sequence" not in out and "swap-outs" not in out


# --------------------------------------------------------------------------------------
# Progress: a start line always, a bar in requests on a terminal


def test_a_start_line_without_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    _, err = _run(capsys, ["compare", "--num-requests", "20", "--schemes",
                           "contiguous-max,paged", *SMALL])
    assert err.splitlines() == ["pagedsim compare: 2 runs (one per scheme) of 20 requests "
                                "each, 40 in all, in this process"]
    _, err = _run(capsys, ["sweep", "block-size", "--values", "16,32",
                           "--num-requests", "10", *SMALL])
    assert err.splitlines()[0] == ("pagedsim sweep block-size: 2 runs (values 16, 32) of 10 "
                                   "requests each, 20 in all, in this process")
    _, err = _run(capsys, ["compare", "--num-requests", "20", "--schemes", "paged", *SMALL,
                           "--quiet"])
    assert err == ""


class FakeBar:
    """Records what a tqdm bar was told."""

    made: list[FakeBar] = []

    def __init__(self, total: int = 0, unit: str = "", **kwargs: object) -> None:
        self.total, self.unit, self.n, self.updates = total, unit, 0, 0
        self.postfix = ""
        FakeBar.made.append(self)

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def update(self, k: int) -> None:
        self.n += k
        self.updates += 1

    def close(self) -> None:
        pass


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[FakeBar]:
    import tqdm

    FakeBar.made = []
    monkeypatch.setattr(tqdm, "tqdm", FakeBar)
    return FakeBar.made


def test_the_bar_counts_requests_as_they_finish(bars: list[FakeBar],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_one, "PROGRESS_EVERY_S", 0.0)
    tasks = [(Experiment(num_requests=30), s) for s in ("contiguous-max", "paged")]
    run_many(tasks, jobs=1, progress=True)
    (bar,) = bars
    assert bar.unit == "req" and bar.total == 60 and bar.n == 60
    assert bar.updates > len(tasks)  # within runs, not one tick per scheme
    # Beside the count and tqdm's time left: the simulated time the slower run reached.
    assert bar.postfix.startswith("simulated ") and bar.postfix.endswith(" s")


def test_the_bar_hears_from_worker_processes(bars: list[FakeBar]) -> None:
    tasks = [(Experiment(num_requests=40), s) for s in ("contiguous-max", "paged")]
    out = run_many(tasks, jobs=2, progress=True)
    assert all(r is not None for r in out)
    (bar,) = bars
    assert bar.unit == "req" and bar.total == 80 and bar.n == 80


def test_the_cli_shows_the_bar_on_a_terminal(capsys: pytest.CaptureFixture[str],
                                             bars: list[FakeBar],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulate_cli, "_progress", lambda args: not args.quiet)
    _run(capsys, ["compare", "--num-requests", "15", "--schemes", "paged", *SMALL])
    (bar,) = bars
    assert bar.total == 15 and bar.n == 15
