"""The benchmark entry point: --quick checks results on the CPU; CSV output."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pagedsim.kernels import bench

REPO = Path(__file__).resolve().parents[2]


def test_quick_mode_checks_all_three_implementations() -> None:
    done = subprocess.run([sys.executable, "-m", "pagedsim.kernels.bench", "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("quick ")]
    assert len(lines) == 9 and all(ln.endswith(" ok") for ln in lines), done.stdout
    assert {ln.split()[1] for ln in lines} == {"paged", "contiguous", "sdpa"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_timed_sweep_refuses_without_cuda() -> None:
    assert bench.main(["--batch", "1", "--context", "512"]) == 2


def test_kv_bytes_is_the_memory_bound_formula() -> None:
    # seq_len * num_kv_heads * head_dim * 2 (K and V) * dtype_bytes, summed over sequences
    assert bench.kv_bytes(64, 4096, torch.bfloat16) == 64 * 4096 * 8 * 128 * 2 * 2


def test_csv_round_trip(tmp_path: Path) -> None:
    row = bench.Row("gpu", "2025-01-01T00:00:00", "bfloat16", 64, 4096, 16, "paged", 1,
                    100.0, 10**9, 10000.0, 4000.0, 2.5)
    path = tmp_path / "sub" / "bench.csv"
    bench.write_csv([row], path)
    with path.open() as f:
        got = list(csv.DictReader(f))
    assert got[0]["impl"] == "paged" and got[0]["gpu"] == "gpu" and float(got[0]["time_us"]) == 100
    with pytest.raises(ValueError):
        bench.Row("gpu", "d", "bfloat16", 1, 1, 1, "magic", 1, 1.0, 1, 1.0, 1.0, 1.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tiny_cuda_sweep(tmp_path: Path) -> None:
    out = tmp_path / "bench.csv"
    rc = bench.main(["--batch", "8", "--context", "512", "--block-size", "16", "--dtype",
                     "float16", "--iters", "3", "--warmup", "1", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(out.open()))
    assert {r["impl"] for r in rows} >= {"paged", "contiguous", "sdpa"}
    assert all(float(r["time_us"]) > 0 for r in rows)
