"""Benchmark :func:`pagedsim.workloads.traces.load_trace`: how long 20,000 rows take to load.

Run ``python -m pagedsim.bench_traces [NUM_ROWS]``. It writes one synthetic trace per
format (Azure CSV with 7-digit timestamps, pagedsim CSV, pagedsim JSONL) into a temporary
directory, loads each a few times and prints the best wall time (the best of several runs
is the least disturbed by other processes). The target is under 1 s for 20,000 rows.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from .workloads.traces import load_trace, save_trace
from .workloads.workload import WorkloadConfig, generate_workload


def write_azure_csv(path: Path, num_rows: int, seed: int = 0) -> None:
    """Write a synthetic trace in the Azure 2023 schema (timestamps with 7 fractional digits)."""
    requests = generate_workload(WorkloadConfig(num_requests=num_rows, rate_per_s=5.0, seed=seed))
    start = datetime(2023, 11, 16, 18, 15, 46)
    with open(path, "w", encoding="utf-8") as file:
        file.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for r in requests:
            stamp = start + timedelta(seconds=r.arrival_s)
            # datetime prints 6 digits; the published trace has 7, so add a tenth-of-us digit.
            file.write(f"{stamp:%Y-%m-%d %H:%M:%S.%f}0,{r.prompt_len},{r.output_len}\n")


def bench_load_trace(num_rows: int = 20_000, repeats: int = 3) -> dict[str, float]:
    """Best-of-``repeats`` seconds to load ``num_rows`` rows, per format."""
    requests = generate_workload(WorkloadConfig(num_requests=num_rows, seed=0, n=2))
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"azure-csv": Path(tmp, "azure.csv"), "pagedsim-csv": Path(tmp, "trace.csv"),
                 "pagedsim-jsonl": Path(tmp, "trace.jsonl")}
        write_azure_csv(paths["azure-csv"], num_rows)
        save_trace(requests, paths["pagedsim-csv"])
        save_trace(requests, paths["pagedsim-jsonl"])
        for name, path in paths.items():
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                trace = load_trace(path)
                best = min(best, time.perf_counter() - start)
            assert len(trace.requests) == num_rows
            times[name] = best
    return times


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    num_rows = int(args[0]) if args else 20_000
    for name, seconds in bench_load_trace(num_rows).items():
        print(f"load_trace {name:15s} {num_rows} rows: {seconds * 1e3:7.1f} ms "
              f"({num_rows / seconds:,.0f} rows/s)")


if __name__ == "__main__":
    main()
