"""The Mooncake experiment's host-tier part (``pagedsim.experiments.mooncake_host``) on a
few requests of the 300-line sample: the runs, the files, a README section whose numbers
are the results', and commands in it that simulate what it simulated."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from pagedsim.cli import build_parser
from pagedsim.cli.experiment_options import experiment
from pagedsim.experiments.cache_replay import REPLAY_ROW
from pagedsim.experiments.mooncake import SCHEMES, mooncake_experiment
from pagedsim.experiments.mooncake_host import HOST_GB, host_runs, host_section, write_host
from pagedsim.experiments.runner import compare
from pagedsim.experiments.tables import _pct

SAMPLE = str(Path(__file__).resolve().parents[1] / "data" / "mooncake_sample.jsonl")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    exp = mooncake_experiment(SAMPLE, 40)
    cmp = compare(exp, SCHEMES, jobs=1, progress=False)
    df = host_runs(exp, cmp, jobs=1, progress=False)
    out = tmp_path_factory.mktemp("mooncake_host")
    return exp, cmp, df, write_host(df, out), host_section(df, exp, "OUT")


def test_the_runs_and_their_files(runs) -> None:
    exp, cmp, df, paths, _ = runs
    assert [p.name for p in paths] == ["mooncake_host_tiers.csv", "mooncake_host_tiers.png"]
    assert all(p.stat().st_size > 0 for p in paths)
    written = pd.read_csv(paths[0])
    assert len(written) == len(df)
    rows = df[df["scheme"] != REPLAY_ROW]
    assert sorted(set(rows["host_cache_gb"])) == [0.0, *HOST_GB]
    # Hits per tier add up, and the GPU-only rows are the comparison's own.
    assert (rows["prefix_hits_gpu"] + rows["prefix_hits_host"] == rows["prefix_hits"]).all()
    pc0 = rows[(rows["scheme"] == "prefix-cache") & (rows["host_cache_gb"] == 0)].iloc[0]
    own = cmp.summary.set_index("scheme").loc["prefix-cache"]
    assert pc0["prefix_hits"] == own["prefix_hits"] and pc0["prefix_hits_host"] == 0
    # The replay row of each size is at the GPU pool plus the host tier's slots.
    replay = df[df["scheme"] == REPLAY_ROW].set_index("host_cache_gb")
    for g in HOST_GB:
        host_slots = replace(exp, host_cache_gb=g).host_cache_blocks() * exp.block_size
        assert replay.loc[g, "total_capacity_slots"] == exp.capacity_slots() + host_slots


def test_the_section_says_the_results(runs) -> None:
    _, _, df, _, text = runs
    big = HOST_GB[-1]
    for r in df[df["scheme"] != REPLAY_ROW].to_dict("records"):
        scheme = r["scheme"] + (", write-through" if r["host_write_through"] else "")
        line = next(ln for ln in text.splitlines()
                    if ln.startswith(f"| {r['host_cache_gb']:,.0f} | {scheme} |"))
        assert (f"| {_pct(r['prefix_hit_rate'])}% | {_pct(r['prefix_hit_rate_gpu'])}% | "
                f"{_pct(r['prefix_hit_rate_host'])}% |") in line
        assert f"| {r['mean_ttft_s']:.1f} | {r['p90_ttft_s']:.1f} |" in line
    pc = df[(df["scheme"] == "prefix-cache") & (df["host_cache_gb"] == big)
            & ~df["host_write_through"].astype(bool)].iloc[0]
    assert (f"With {big:,.0f} GiB of host memory prefix-cache serves "
            f"{_pct(pc['prefix_hit_rate'])}%") in " ".join(text.split())
    assert "recompute" in text and "| 16 |" in text  # the load-or-recompute table


def test_its_commands_simulate_the_same_runs(runs) -> None:
    exp, _, _, _, text = runs
    cmds = [ln for ln in text.splitlines() if ln.startswith("pagedsim ")]
    assert len(cmds) == 3
    parser = build_parser()
    sweep = parser.parse_args(shlex.split(cmds[0].replace("PATH/", str(Path(SAMPLE).parent)
                                                          + "/"))[1:])
    assert sweep.values == list(HOST_GB) and sweep.schemes == ["prefix-cache"]
    assert experiment(sweep) == exp  # the sweep sets the tier per run
    for cmd, write_through in ((cmds[1], False), (cmds[2], True)):
        args = parser.parse_args(shlex.split(cmd.replace("PATH/", str(Path(SAMPLE).parent)
                                                         + "/"))[1:])
        assert experiment(args) == replace(exp, host_cache_gb=HOST_GB[-1],
                                           host_write_through=write_through)
