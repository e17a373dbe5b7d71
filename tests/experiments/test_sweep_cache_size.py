"""``pagedsim sweep cache-size``: prefix-cache hit rate against the KV pool's size for the
caching schemes, beside the scheduler-free replay (small runs; each test a few seconds)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from experiments_helpers import one_error_line

from pagedsim.cli import main
from pagedsim.experiments import Experiment
from pagedsim.experiments.cache_replay import replay
from pagedsim.experiments.sweeps import REPLAY_ROW, num_runs, sweep_cache_size

SMALL = ["--num-requests", "40", "--jobs", "1", "--quiet"]


def test_the_cli_writes_a_csv_and_a_figure(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "cache-size", "--values", "512,4096", "--out", str(tmp_path),
                 *SMALL]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sweep cache-size (multi-turn-like, 40 requests")
    df = pd.read_csv(tmp_path / "sweep_cache_size.csv")
    assert (tmp_path / "sweep_cache_size_prefix_hit_rate.png").stat().st_size > 0
    assert sorted(df["scheme"].unique()) == sorted(["prefix-cache", "radix", REPLAY_ROW])
    assert sorted(df["capacity_slots"].unique()) == [512, 4096]
    assert df["prefix_hit_rate"].between(0, 1).all()
    # A bigger pool keeps more: no scheme hits less with 8 times the room here.
    for _, g in df.groupby("scheme"):
        small, big = g.sort_values("capacity_slots")["prefix_hit_rate"]
        assert big >= small


def test_replay_rows_are_cache_replay_on_the_same_requests() -> None:
    exp = Experiment(workload="multi-turn", num_requests=60, rate_per_s=5.0)
    df = sweep_cache_size(exp, [1024, 8192], ["prefix-cache"], jobs=1, progress=False)
    rows = df[df["scheme"] == REPLAY_ROW].set_index("capacity_slots")
    for cap in (1024, 8192):
        r = replay(exp.requests(), 16, cap)
        assert rows.at[cap, "prefix_hit_rate"] == r.hit_rate
        assert rows.at[cap, "prefix_hits"] == r.hits
        assert rows.at[cap, "evictions"] == r.evictions
    sims = df[df["scheme"] == "prefix-cache"].set_index("capacity_slots")
    assert list(sims.index) == [1024, 8192]
    assert (sims["capacity_tokens"] == sims.index).all()
    assert math.isnan(rows.at[1024, "mean_batch_size"])  # no scheduler: no batch


def test_a_pool_size_is_rounded_down_to_whole_blocks() -> None:
    exp = Experiment(workload="multi-turn", num_requests=10, capacity_tokens=1000)
    assert exp.capacity_slots() == 992 and exp.preset is None
    assert "992 KV slots" in exp.label()
    with pytest.raises(ValueError, match="capacity_tokens must be >= 16"):
        Experiment(capacity_tokens=8)


def test_num_runs_counts_schemes() -> None:
    assert num_runs("cache-size") == 12
    assert num_runs("cache-size", [1024, 2048], ["radix"]) == 2


@pytest.mark.parametrize("argv, flag", [
    (["--values", "8"], "--values"),
    (["--values", "1e300"], "--values"),
    (["--values", "nan"], "--values"),
    (["--values", "2048.5"], "--values"),
    (["--gpu-memory-utilization", "0.5"], "--gpu-memory-utilization"),
    (["--activation-gb", "1"], "--activation-gb"),
    (["--schemes", "bogus"], "--schemes"),
])
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str],
                               flag: str) -> None:
    line = one_error_line(capsys, ["sweep", "cache-size", *argv, *SMALL, "--no-write"])
    assert line.startswith(f"pagedsim: error: argument {flag}"), line
    if flag == "--values":  # names the bad value, short
        assert f"got {float(argv[1]):g}" in line or f"got '{argv[1]}'" in line, line


def test_schemes_stay_refused_where_a_sweep_has_none(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    line = one_error_line(capsys, ["sweep", "block-size", "--schemes", "paged", *SMALL])
    assert "applies to the rate, cache-size and host-cache sweeps, not block-size" in line


def test_help_names_its_defaults_and_units(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "cache-size", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "KV pools of 2,048, 4,096, 8,192, 16,384, 32,768, 65,536 token slots" in out
    assert "for prefix-cache, radix" in out and "multi-turn" in out
    assert "--schemes LIST" in out and "token slots" in out
