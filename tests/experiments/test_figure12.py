"""Figure 12 (pagedsim.experiments.figure12): the sustained rate read off a latency curve,
the ratios beside the paper's, and the committed figure's README section."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pagedsim.experiments.figure12 import (
    FIGURE12_RATES,
    paged_ratio,
    ratio_lines,
    sustained_rate,
    sustained_rates,
)
from pagedsim.paper import FIGURE12_RATIOS

FIGURES = Path(__file__).resolve().parents[2] / "figures"


def test_sustained_rate_interpolates_the_crossing() -> None:
    # 2x the first latency is 0.2; it is crossed between 2 (0.15) and 3 (0.35): 2.25.
    assert sustained_rate([1, 2, 3, 4], [0.1, 0.15, 0.35, 0.9]) == (2.25, True)
    assert sustained_rate([1, 2], [0.1, 0.3], factor=3.0) == (2.0, False)
    assert sustained_rate([1.0], [0.5]) == (1.0, False)
    with pytest.raises(ValueError, match="increase"):
        sustained_rate([2, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="one latency per rate"):
        sustained_rate([1, 2], [0.1])


def _frame() -> pd.DataFrame:
    rows = []
    for scheme, knee in (("contiguous-max", 1.0), ("contiguous-oracle", 2.0), ("paged", 4.0)):
        for rate in (0.5, 1.0, 2.0, 4.0, 8.0):
            lat = 0.02 if rate <= knee else 0.02 * (1 + 10 * (rate - knee))
            rows.append({"scheme": scheme, "rate_per_s": rate, "p50_normalized_latency_s": lat})
    return pd.DataFrame(rows)


def test_ratios_of_a_frame() -> None:
    df = _frame()
    rates = sustained_rates(df)
    # Each crosses 0.04 a tenth of the way past its knee toward the next grid rate.
    assert rates["paged"][0] == pytest.approx(4.0 + 0.1 * 4 / 4)
    assert rates["contiguous-max"][0] == pytest.approx(1.0 + 0.1)
    assert paged_ratio(df, "contiguous-max") == pytest.approx(rates["paged"][0] / 1.1)
    text = "\n".join(ratio_lines(df))
    assert "paged / contiguous-oracle" in text and "1.7-2.7x" in text
    assert FIGURE12_RATIOS["contiguous-max"] == (2.7, 8.0)


def test_committed_figure_and_its_readme_agree() -> None:
    df = pd.read_csv(FIGURES / "figure12.csv")
    assert sorted(df["rate_per_s"].unique()) == sorted(FIGURE12_RATES)
    readme = (FIGURES / "README.md").read_text(encoding="utf-8")
    for line in ratio_lines(df):
        assert line in readme
    # The paper's headline holds in ours: paged sustains more than Oracle and Max.
    assert paged_ratio(df, "contiguous-oracle") > 1.5
    assert paged_ratio(df, "contiguous-max") > paged_ratio(df, "contiguous-oracle")
