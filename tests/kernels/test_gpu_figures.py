"""The GPU numbers README.md and figures/gpu/*/README.md quote are the committed files'."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "figures" / "gpu" / "NVIDIA_H200_2026-11-30"


def _headline() -> tuple[float, float]:
    """Fraction of copy bandwidth and paged/contiguous time ratio in the headline setting."""
    df = pd.read_csv(RUN / "bench.csv")
    key = (df.dtype == "bfloat16") & (df.batch == 64) & (df.context_tokens == 4096) \
        & (df.block_size == 16) & (df.num_splits == 1)
    paged = df[key & (df.impl == "paged")].iloc[0]
    contig = df[key & (df.impl == "contiguous")].iloc[0]
    return float(paged.fraction_of_copy), float(paged.time_us / contig.time_us)


def test_quoted_gpu_numbers_are_the_files() -> None:
    frac, ratio = _headline()
    tests = (RUN / "kernel_tests.txt").read_text()
    passed = re.search(r"(\d+) passed, (\d+) skipped", tests)
    measure = (RUN / "measure.txt").read_text()
    steps = re.search(r"paged\s+steps (\d+)\s+largest gap: (\d+) token slots", measure)
    copy_gbps = pd.read_csv(RUN / "bench.csv").copy_gbps.iloc[0]
    assert passed and steps
    for doc in (ROOT / "README.md", RUN / "README.md"):
        text = " ".join(doc.read_text().split())
        assert f"{100 * frac:.0f}% of the measured" in text, doc
        assert f"{ratio:.3f} times the time" in text, doc
        assert f"{int(steps[1]):,} steps" in text, doc
        assert f"{passed[1]} passed, {passed[2]} skipped" in text, doc
    run_readme = " ".join((RUN / "README.md").read_text().split())
    assert f"({copy_gbps:,.0f} GB/s)" in run_readme
    assert f"largest gap of {steps[2]} token slots" in run_readme
    assert f"after {len(pd.read_csv(RUN / 'bench.csv'))} rows" in run_readme
