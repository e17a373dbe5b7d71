"""Issue 22, part 7: a CLI fuzz over pairs of flags (not only single bad values).

Hypothesis draws a command, two of its value-taking flags and a value for each from a
pool that mixes valid values, edge values and bad ones (NaN, infinities, 0, negatives,
2**53, 5e-324, duplicates in lists, special files). Every case must end in exactly one
of two ways, in this process, within seconds:

* the first simulation starts (so every check passed: the runs are stubbed out), or
* exit status 2 with one line ``pagedsim: error: argument FLAG: ...`` naming one of
  the flags typed (the positional ``TRACE`` of cache-replay counts as a flag), nothing on
  stdout, no traceback, and no simulation started.

The case count is printed (``pytest -s``) and kept in :data:`RAN` for the report.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pagedsim.cli import build_parser, main
from pagedsim.experiments import cache_replay, host_sweep
from pagedsim.experiments import runner as runner_module
from pagedsim.experiments.spec import Experiment


class SimulationStarted(Exception):
    """Raised by the stubbed runs: every check before the run passed."""


NUMBERS = ["1", "2", "16", "0", "-1", "3.5", "1e300", "nan", "inf", "5e-324",
           "9007199254740992", "10000001", "", "abc"]
#: Flags whose values come from their own pools (the rest take NUMBERS).
POOLS = {
    "--model": ["opt-13b", "LLAMA-2-7B", "deepseek-v3", "gpt-oss-20b", "gpt-5", "", "@fifo",
                "@dev", "@dir"],
    "--kv-cache-dtype": ["auto", "fp8", "int4"],
    "--kv-cache-memory-gb": ["10", "10,10", "0", "1e300", "nan", "", "10,10,10"],
    "--gpu": ["a100-80gb", "h200-141gb", "tpu"],
    "--preset": ["paper-opt-13b", "nope"],
    "--preemption": ["swap", "recompute", "pause"],
    "--policy": ["v0", "chunked", "v2"],
    "--order": ["fcfs", "lpm", "random"],
    "--on-too-long": ["clip", "skip", "error", "drop"],
    "--part": ["all", "saturated", "half"],
    "--schemes": ["paged", "paged,vattention", "paged,paged", "prefix-cache,radix", "bogus",
                  ",".join(["paged"] * 70), ","],
    "--values": ["1,2", "2,2", "16,1.5", "nan", ",".join(map(str, range(1, 100))), "1e300",
                 "4096,8192"],
    "--capacity-tokens": ["inf", "0,1000", "5,5", "-1", "nan"],
    "--workload": ["sharegpt", "few-shot", "@trace", "@fifo", "@dir", "@missing", "@deep",
                   "@huge", "@trailing", "@n4"],
    "--out": ["@out", "@proc", "@dangling", "@file"],
    "TRACE": ["few-shot", "system-prompt", "sharegpt", "@trace", "@fifo", "@dir",
              "@missing", "@deep", "@huge", "@dup", "@dev"],
}
#: Flags left out: they start worker processes or a cluster (the stubs would not reach
#: them), or print the help.
SKIP = {"--jobs", "--dask", "--help"}
BASES = {
    "compare": ["compare", "--jobs", "1", "--quiet"],
    "sweep rate": ["sweep", "rate", "--jobs", "1", "--quiet"],
    "sweep block-size": ["sweep", "block-size", "--jobs", "1", "--quiet"],
    "sweep sharing": ["sweep", "sharing", "--jobs", "1", "--quiet"],
    "sweep cache-size": ["sweep", "cache-size", "--jobs", "1", "--quiet"],
    "sweep preemption": ["sweep", "preemption", "--jobs", "1", "--quiet"],
    "sweep host-cache": ["sweep", "host-cache", "--jobs", "1", "--quiet"],
    "cache-replay": ["cache-replay"],
    # No simulation: a case ends in its report (exit 0) or one line. A model and a GPU are
    # given first (a drawn --model or --gpu comes later on the line and replaces them).
    "budget": ["budget", "--model", "opt-13b", "--gpu", "a100-80gb"],
}
RAN: dict[str, int] = {"cases": 0, "errors": 0, "started": 0}


def _flags(command: str) -> list[str]:
    parser = build_parser().command_parsers[command.split()[0]]
    if command.startswith("sweep "):  # a sweep's own parser (its --help) has its flags
        from pagedsim.cli.sweep import sweep_parser

        parser = sweep_parser(command.split()[1])
    flags = [a.option_strings[-1] for a in parser._actions
             if a.option_strings and a.nargs != 0 and a.option_strings[-1].startswith("--")]
    return [f for f in flags if f not in SKIP] + (["TRACE"] if command == "cache-replay"
                                                 else [])


FLAGS = {command: _flags(command) for command in BASES}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pairs")
    made = {"@dir": str(root), "@missing": str(root / "missing.csv"),
            "@proc": "/proc/pagedsim-no-such/x", "@out": str(root / "out"),
            "@dev": "/dev/zero"}
    for name, text in {"trace": "arrival_s,prompt_len,output_len\n0,10,10\n1,20,5\n",
                       "deep": '{"a":' * 5000 + "1" + "}" * 5000 + "\n",
                       "huge": "arrival_s,prompt_len,output_len\n0,1000000000000000,10\n",
                       "trailing": "arrival_s,prompt_len,output_len,\n0,10,10,\n",
                       "n4": "arrival_s,prompt_len,output_len,n\n0,10,10,4\n1,5,5,1\n",
                       "dup": '{"timestamp": 0, "input_length": 1, "input_length": 2, '
                              '"output_length": 1, "hash_ids": [1]}\n'}.items():
        path = root / (name + (".jsonl" if name in ("deep", "dup") else ".csv"))
        path.write_text(text)
        made["@" + name] = str(path)
    (root / "afile").write_text("x")
    made["@file"] = str(root / "afile" / "sub")
    os.symlink(root / "nowhere" / "x", root / "dangling")
    made["@dangling"] = str(root / "dangling")
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "fifo")
        made["@fifo"] = str(root / "fifo")
    else:  # pragma: no cover - Windows
        made["@fifo"] = str(root)
    return made


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(*args: object, **kwargs: object) -> None:
        raise SimulationStarted

    def run_started(exp: Experiment, *args: object, **kwargs: object) -> None:
        # A run's first act is to make its requests: a workload that cannot be made
        # (few-shot prompts longer than --max-model-len) fails here, after the start,
        # where it would fail in the run; every check must come before.
        try:
            next(iter(exp.iter_requests()), None)
        except ValueError as exc:
            raise AssertionError(f"the run started, then failed making its requests: "
                                 f"{exc}") from None
        raise SimulationStarted

    monkeypatch.setattr(runner_module, "run_scheme", run_started)
    monkeypatch.setattr(cache_replay, "replay", started)
    monkeypatch.setattr(host_sweep, "replay", started)  # its own name for it


@st.composite
def pairs(draw: st.DrawFn) -> tuple[str, list[tuple[str, str]]]:
    command = draw(st.sampled_from(sorted(BASES)))
    flags = draw(st.lists(st.sampled_from(FLAGS[command]), min_size=2, max_size=2,
                          unique=True))
    return command, [(f, draw(st.sampled_from(POOLS.get(f, NUMBERS)))) for f in flags]


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture],
          deadline=None)
@given(case=pairs())
# Found by --hypothesis-seed=5 (issue 37): a block larger than the cache-size sweep's smallest
# default pool (2048 slots) ended in "capacity_tokens must be >= ..." naming no flag.
@example(case=("sweep cache-size", [("--num-gpus", "9007199254740992"),
                                    ("--block-size", "9007199254740992")]))
@example(case=("sweep cache-size", [("--block-size", "10000001"), ("--num-gpus", "1")]))
# Found by --hypothesis-seed=7202 (issue 37): prefix-sharing prompts longer than
# --max-model-len were refused only once the runs made their requests (compare: after the
# start line, naming no flag; sweep cache-size: naming --num-requests / --block-size).
@example(case=("sweep cache-size", [("--workload", "few-shot"), ("--max-model-len", "2")]))
@example(case=("compare", [("--workload", "multi-turn"), ("--max-model-len", "16")]))
# Found by a budget fuzz (issue 37): one KV figure per pipeline stage was made before the
# stages were checked against the layers (800 MB for 10**8 stages, MemoryError for 2**53);
# 'no room for a KV cache' and 'smaller than one block' named no flag, --seq-len 0 was not
# reported as 'argument --seq-len'.
@example(case=("budget", [("--pipeline-parallel-size", "9007199254740992"),
                          ("--num-gpus", "1")]))
@example(case=("budget", [("--model", "deepseek-v3"), ("--gpu", "a100-80gb")]))
@example(case=("budget", [("--block-size", "10000001"), ("--num-gpus", "1")]))
@example(case=("budget", [("--seq-len", "0"), ("--num-gpus", "1")]))
def test_flag_pairs_end_in_a_run_or_one_line_naming_a_flag(
        case, files: dict[str, str], stubbed: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    command, chosen = case
    argv = list(BASES[command])
    trace = None
    for flag, value in chosen:
        value = files.get(value, value)
        if flag == "TRACE":
            trace = value
        else:
            argv += [flag, value]
    if command == "cache-replay":
        argv.insert(1, trace if trace is not None else "few-shot")
    elif command != "budget" and "--out" not in argv:
        argv += ["--out", files["@out"]]
    RAN["cases"] += 1
    try:
        status = main(argv)
    except SimulationStarted:
        RAN["started"] += 1
        capsys.readouterr()
        return
    captured = capsys.readouterr()
    if command == "budget" and status == 0:  # its report: every check passed
        RAN["started"] += 1
        return
    RAN["errors"] += 1
    assert status == 2, f"{argv}: exit {status}, stderr {captured.err!r}"
    assert "Traceback" not in captured.err and captured.out == "", argv
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pagedsim: error: "), (argv, captured.err)
    # "argument --a: ..." or, for an error of two flags together, "argument --a / --b:".
    named = re.match(r"pagedsim: error: argument ([^:]+?):", lines[0])
    assert named is not None, (argv, lines[0])
    assert {f for f, _ in chosen} & set(named.group(1).split(" / ")), (argv, lines[0])


def test_report_case_counts() -> None:
    """Runs after the fuzz (file order): says how many cases it ran, and that both ends
    were reached (a fuzz whose every case errors, or none does, tests little)."""
    print(f"\nCLI pair fuzz: {RAN['cases']} cases, {RAN['errors']} one-line errors, "
          f"{RAN['started']} reached the first run")
    if RAN["cases"]:
        assert RAN["errors"] > 0 and RAN["started"] > 0
