"""``pagedsim sweep host-cache``: hit rate per tier and time to first token against a host
tier's size, beside the scheduler-free replay at the same total capacity; the host tier's
flags of ``compare`` (small runs)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from experiments_helpers import one_error_line

from pagedsim.cli import main
from pagedsim.experiments import Experiment
from pagedsim.experiments.cache_replay import REPLAY_ROW, replay
from pagedsim.experiments.sweeps import num_runs

SMALL = ["--num-requests", "60", "--jobs", "1", "--quiet"]


def test_the_cli_writes_the_tiers_and_the_replay(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "host-cache", "--values", "0,1", "--schemes", "prefix-cache",
                 "--out", str(tmp_path), *SMALL]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sweep host-cache (multi-turn-like, 60 requests")
    df = pd.read_csv(tmp_path / "sweep_host_cache.csv")
    for name in ("prefix_hit_rate", "mean_ttft_s", "tiers"):
        assert (tmp_path / f"sweep_host_cache_{name}.png").stat().st_size > 0
    runs = df[df["scheme"] == "prefix-cache"].set_index("host_cache_gb")
    assert list(runs.index) == [0.0, 1.0] and runs["mean_ttft_s"].notna().all()
    assert (runs["prefix_hits_gpu"] + runs["prefix_hits_host"] == runs["prefix_hits"]).all()
    assert runs.loc[0.0, "prefix_hits_host"] == 0
    # The replay runs at the GPU pool plus the host tier, in token slots.
    exp = Experiment(workload="multi-turn", num_requests=60, rate_per_s=5.0)
    host_slots = Experiment(workload="multi-turn", num_requests=60, rate_per_s=5.0,
                            host_cache_gb=1.0).host_cache_blocks() * 16
    rows = df[df["scheme"] == REPLAY_ROW].set_index("host_cache_gb")
    total = exp.capacity_slots() + host_slots
    assert rows.loc[1.0, "total_capacity_slots"] == total
    assert rows.loc[1.0, "prefix_hit_rate"] == replay(exp.requests(), 16, total).hit_rate
    assert num_runs("host-cache", [0, 1], ["prefix-cache"]) == 2


def test_compare_with_a_tier_reports_its_hits_per_tier(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["compare", "--workload", "multi-turn", "--schemes", "paged,prefix-cache",
                 "--host-cache-gb", "2", "--host-write-through", "--no-write", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "host tier 2 GiB (write-through, overlapped)" in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("host tier (")]
    assert line.startswith("host tier (prefix-cache, 163 blocks): served")  # 2 GiB / 12.5 MiB


@pytest.mark.parametrize("argv, flag", [
    (["sweep", "host-cache", "--values", "-1"], "--values"),
    (["sweep", "host-cache", "--values", "1,1"], "--values"),
    (["sweep", "host-cache", "--host-cache-gb", "4"], "--host-cache-gb"),
    (["sweep", "host-cache", "--schemes", "bogus"], "--schemes"),
    (["compare", "--host-cache-gb", "nan"], "--host-cache-gb"),
    (["compare", "--host-cache-gb", "-3"], "--host-cache-gb"),
    (["compare", "--no-host-overlap"], "--no-host-overlap"),
    (["compare", "--host-write-through"], "--host-write-through"),
])
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str],
                               flag: str) -> None:
    line = one_error_line(capsys, [*argv, *SMALL, "--no-write"])
    assert line.startswith(f"pagedsim: error: argument {flag}"), line
