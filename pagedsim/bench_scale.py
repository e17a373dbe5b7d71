"""The scale figure of ``python -m pagedsim.bench``: how fast, and in how much memory,
``pagedsim compare --schemes paged --num-requests N --no-write --quiet --json --jobs 1``
replays N ShareGPT-like requests (the default setting: OPT-13B, one A100-40GB, 5 req/s).

The command runs in a fresh Python process (``python -m pagedsim.bench_scale N``), so its
peak memory is its own: Linux's ``VmHWM`` (the resident high-water mark; ``ru_maxrss``
would carry a forking parent's peak through exec), ``ru_maxrss`` elsewhere. The child
prints one JSON line: wall seconds, peak bytes, requests, and the simulated server's
pace (requests finished per simulated second) and makespan (seconds).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import time


def peak_rss_bytes() -> int:
    """This process's peak resident memory in bytes (``VmHWM`` where Linux has it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, kB elsewhere


def compare_argv(num_requests: int) -> list[str]:
    """The measured command's arguments (after ``pagedsim``)."""
    return ["compare", "--schemes", "paged", "--num-requests", str(num_requests),
            "--no-write", "--quiet", "--json", "--jobs", "1"]


def bench_scale(num_requests: int = 100_000) -> dict[str, float]:
    """Run the command in a fresh process; returns ``seconds`` (wall), ``peak_bytes``,
    ``requests`` and ``requests_per_s``."""
    proc = subprocess.run([sys.executable, "-m", "pagedsim.bench_scale", str(num_requests)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pagedsim.bench_scale {num_requests} failed: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["requests_per_s"] = out["requests"] / out["seconds"]
    return out


def scale_report(num_requests: int) -> str:
    """The benchmark's scale line."""
    r = bench_scale(num_requests)
    return (f"compare --schemes paged, {num_requests:,} requests: {r['seconds']:.1f} s, "
            f"{r['requests_per_s']:,.0f} requests/s, peak memory {r['peak_bytes'] / 2**20:,.0f} "
            "MiB (one process; its per-step sums and 76-byte request rows, no per-step rows)")


def main(argv: list[str] | None = None) -> int:
    """The child: run the command, then print ``{"seconds", "peak_bytes", "requests"}``."""
    from .cli import main as cli_main

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m pagedsim.bench_scale NUM_REQUESTS", file=sys.stderr)
        return 2
    num_requests = int(args[0])
    t0 = time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the run's JSON row: only what it says of the queue
        status = cli_main(compare_argv(num_requests))
    seconds = time.perf_counter() - t0
    if status:
        return status
    (row,) = json.loads(out.getvalue())
    print(json.dumps({"seconds": seconds, "peak_bytes": peak_rss_bytes(),
                      "requests": num_requests, "pid": os.getpid(),
                      "served_per_s": row["requests_per_s"],
                      "makespan_s": row["makespan_s"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
