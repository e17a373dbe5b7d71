"""``python -m pagedsim.experiments.mooncake`` on the 300-line Mooncake sample (a few of
its requests): the files it writes, a README whose numbers are the results', and commands
in it that simulate what it simulated."""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd
import pytest

from pagedsim.cli import build_parser
from pagedsim.cli.experiment_options import experiment
from pagedsim.experiments.mooncake import (
    commands,
    main,
    make_mooncake_figures,
    mooncake_experiment,
)
from pagedsim.experiments.tables import _pct

SAMPLE = str(Path(__file__).resolve().parents[1] / "data" / "mooncake_sample.jsonl")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mooncake")
    make_mooncake_figures(SAMPLE, out, num_requests=12, jobs=1, progress=False,
                          sizes=(300_000,))
    return out


def test_it_writes_the_figures_and_tables(written: Path) -> None:
    for name in ("compare_summary.csv", "compare_steps.csv", "compare_shares.png",
                 "compare_timeline_paged.png", "compare_timeline_prefix-cache.png",
                 "compare_timeline_radix.png", "mooncake_shares_over_time.png",
                 "sweep_cache_size.csv", "sweep_cache_size_prefix_hit_rate.png",
                 "README.md"):
        assert (written / name).stat().st_size > 0, name


def test_the_readme_numbers_are_the_results(written: Path) -> None:
    text = (written / "README.md").read_text()
    summary = pd.read_csv(written / "compare_summary.csv").set_index("scheme")
    for scheme in ("paged", "prefix-cache", "radix"):
        row = summary.loc[scheme]
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {scheme} |"))
        assert f"| {_pct(row['prefix_hit_rate'])}% |" in line
        assert f"| {int(row['prefill_tokens_computed']):,} |" in line
        assert f"| {_pct(row['token'])}% |" in line
    assert summary.loc["paged", "prefix_hit_rate"] == 0
    sweep = pd.read_csv(written / "sweep_cache_size.csv")
    assert sorted(sweep["capacity_slots"].unique()) == [300_000, 1_011_248]
    assert "first 12 requests" in text and "PATH/mooncake_sample.jsonl" in text


def test_the_tables_name_the_trace_as_the_readme_does(written: Path) -> None:
    """Every CSV names the trace ``PATH/<file>``, never the folder it was read from: the
    committed tables are then the same wherever the trace lies (they once held the
    machine's path, unless the run was given a relative ``PATH/...``)."""
    for name in ("compare_summary.csv", "sweep_cache_size.csv", "mooncake_host_tiers.csv"):
        df = pd.read_csv(written / name)
        assert set(df["workload"]) == {"PATH/mooncake_sample.jsonl"}, name
        assert str(Path(SAMPLE).parent) not in (written / name).read_text(), name


def test_its_commands_simulate_the_same_experiment(tmp_path: Path) -> None:
    exp = mooncake_experiment(SAMPLE, 12)
    compare_cmd, sweep_cmd = commands(SAMPLE, str(tmp_path), exp, [300_000, 1_011_248])
    args = build_parser().parse_args(shlex.split(compare_cmd)[1:])
    assert experiment(args) == exp
    assert args.schemes == ["paged", "prefix-cache", "radix"]
    args = build_parser().parse_args(shlex.split(sweep_cmd)[1:])
    assert experiment(args) == exp and args.values == [300_000, 1_011_248]


def test_a_missing_trace_is_one_line(capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    assert main([str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "argument trace:" in err[0] and "No such file" in err[0]


@pytest.mark.parametrize("argv, flag", [
    (["--num-requests", "0"], "--num-requests"),
    (["--out", "/proc/pagedsim-no-such/x"], "--out"),
])
def test_bad_flags_are_one_line_before_the_runs(capsys: pytest.CaptureFixture[str],
                                                argv: list[str], flag: str) -> None:
    """Issue 22: --out is checked and created before the runs, not after them."""
    assert main([SAMPLE, *argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"argument {flag}:" in err[0], err
