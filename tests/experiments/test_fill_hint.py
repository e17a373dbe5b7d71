"""The compare table's hint when memory never limited the batch (pagedsim.experiments.fill_hint):
there when no run saturated, absent when one did, its estimates recomputed here, and the
README's gpt-oss example run as it says."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from pagedsim.experiments import Experiment, compare, compare_table
from pagedsim.experiments.fill_hint import fill_hint_lines, round_up
from pagedsim.experiments.runner import Comparison
from pagedsim.models.budget import kv_budget

ROOT = Path(__file__).resolve().parents[2]
FIRST = "memory never limited the batch"


def test_round_up_keeps_two_significant_figures() -> None:
    assert round_up(41.3) == 42
    assert round_up(16.0) == 16
    assert round_up(0.1234) == pytest.approx(0.13)
    assert round_up(1234) == 1300


def test_no_hint_when_a_run_saturated() -> None:
    cmp = compare(Experiment(num_requests=100), ("paged",), jobs=1, progress=False,
                  keep_steps=False)
    assert cmp.summary["sat_token"].notna().all()  # the paper's rate saturates
    assert fill_hint_lines(cmp) == []
    assert FIRST not in compare_table(cmp)


def test_hint_names_the_rate_at_which_the_pool_fills_when_unsaturated() -> None:
    exp = Experiment(num_requests=100, rate_per_s=0.5)
    cmp = compare(exp, ("contiguous-oracle", "paged"), jobs=1, progress=False,
                  keep_steps=False)
    assert cmp.summary["sat_token"].isna().all()  # nobody ever waited
    table = compare_table(cmp)
    assert FIRST in table and "linear estimate" in table
    # Recomputed: the fullest pool's held share, scaled linearly by the rate.
    held = {r["scheme"]: r["all_token"] + r["all_reserved"] + r["all_internal_frag"]
            for r in cmp.summary.to_dict("records")}
    fullest = max(held, key=held.__getitem__)
    assert fullest == "contiguous-oracle"  # it reserves every request's final length
    batch = float(cmp.summary.set_index("scheme").at[fullest, "mean_batch_size"])
    assert batch / held[fullest] <= exp.max_num_seqs  # the batch cap is not reached first
    rate = round_up(0.5 / held[fullest])  # round_up: tested above
    assert table.splitlines()[-1].endswith(f"try --rate {rate:g}")


def _unsaturated(exp: Experiment, share: float, batch: float) -> Comparison:
    """A comparison whose one run held ``share`` of its pool with ``batch`` requests a
    step and never saturated."""
    row = {"scheme": "all-full", "sat_token": float("nan"), "all_token": share,
           "all_reserved": 0.0, "all_internal_frag": 0.0, "mean_batch_size": batch}
    return Comparison(exp, pd.DataFrame([row]))


def test_hint_suggests_a_smaller_pool_when_max_num_seqs_stops_the_batch() -> None:
    exp = Experiment(model="gpt-oss-120b", gpu="h100-80gb")
    lines = fill_hint_lines(_unsaturated(exp, 0.121, 38.88))
    assert lines[0].startswith(FIRST)
    text = lines[1]
    # 0.121 x 256 / 38.88 = 0.797: the pool never fills, whatever the rate.
    assert "max_num_seqs = 256" in text and "about 80%: no rate fills it" in text
    # The pool the batch at 128 requests fills: 0.121 x 128 / 38.88 of the KV bytes.
    b = kv_budget("gpt-oss-120b", "h100-80gb", gpu_memory_utilization=1.0,
                  activation_bytes=exp.activation_bytes)
    want = 0.121 * 128 / 38.88 * b.kv_cache_bytes
    util = math.floor(100 * (b.weights_bytes + b.activation_bytes + want)
                      / b.gpu_memory_bytes) / 100
    left = int(b.gpu_memory_bytes * util) - b.weights_bytes - b.activation_bytes
    rate = round_up(5 * left / b.kv_cache_bytes / 0.121)
    assert text.endswith(f"try --gpu-memory-utilization {util:g} --rate {rate:g}")
    assert (util, rate) == (0.91, 16)


def test_no_estimate_for_an_offline_batch() -> None:
    """At rate inf every request arrived at t = 0: no rate fills the pool."""
    lines = fill_hint_lines(_unsaturated(Experiment(rate_per_s=math.inf), 0.2, 10.0))
    assert len(lines) == 1 and lines[0].startswith(FIRST)


@pytest.mark.slow
def test_readme_gpt_oss_example_runs_as_it_says() -> None:
    """README: the default gpt-oss-120b compare (``compare --model gpt-oss-120b --gpu
    h100-80gb``: vLLM's memory defaults, utilization 0.9 and no activations) never fills
    its pools (the batches it quotes), its hint's command makes them fill, and there
    hybrid batches more than all-full (the numbers quoted)."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    cli = dict(model="gpt-oss-120b", gpu="h100-80gb", gpu_memory_utilization=0.9,
               activation_bytes=0)
    exp = Experiment(**cli)
    cmp = compare(exp, ("all-full", "hybrid"), jobs=1, progress=False, keep_steps=False)
    default = cmp.summary.set_index("scheme")["mean_batch_size"]
    assert (f"hybrid batches {default['hybrid']:.2f} requests a step against all-full's "
            f"{default['all-full']:.2f}, since its steps are shorter") in readme
    hint = fill_hint_lines(cmp)[-1]
    flags = re.search(r"try ((?:--gpu-memory-utilization (\S+) )?--rate (\S+))$", hint)
    assert flags is not None, hint
    assert f"`{flags.group(1)}`" in readme
    if flags.group(2) is not None:
        cli["gpu_memory_utilization"] = float(flags.group(2))
    full = Experiment(**cli, rate_per_s=float(flags.group(3)))
    by = compare(full, ("all-full", "hybrid"), jobs=1, progress=False,
                 keep_steps=False).summary.set_index("scheme")
    assert by["sat_token"].notna().all()  # the pools filled
    assert by.at["hybrid", "mean_batch_size"] > by.at["all-full", "mean_batch_size"]
    assert by.at["hybrid", "preemptions"] < by.at["all-full", "preemptions"]
    quoted = (f"hybrid batches {by.at['hybrid', 'mean_batch_size']:.2f} requests a step "
              f"against all-full's {by.at['all-full', 'mean_batch_size']:.2f} "
              f"({by.at['hybrid', 'preemptions']:,} preemptions against "
              f"{by.at['all-full', 'preemptions']:,}")
    assert quoted in readme
