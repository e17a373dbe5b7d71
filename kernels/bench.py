"""Benchmark paged decode attention: ``python -m pagedsim.kernels.bench``.

On CUDA it sweeps batch x context x block size x dtype (32 query / 8 kv heads,
head_dim 128) and times three ways of computing the same decode attention:

- ``paged``: our kernel, block tables shuffled across the whole cache;
- ``contiguous``: the same kernel, tables that are consecutive ranges (what a
  contiguous allocator produces), so ``paged / contiguous`` is the cost of paging;
- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` on a padded
  ``[batch, kv_heads, context, head_dim]`` cache, a well-tuned library baseline.

Decode attention is memory-bound: every step reads each sequence's whole K and V,
``seq_len * num_kv_heads * head_dim * 2 * dtype_bytes`` bytes. We report achieved
bytes/s and its fraction of a *measured* device-to-device copy bandwidth (the real
ceiling, below the spec sheet). Timing: CUDA events, median of ``--iters`` runs after
warm-up, with L2 flushed before every run (writing a buffer larger than L2) so small
caches are not served from L2.

``--quick`` runs tiny sizes on the CPU (Triton interpreter or torch) and only checks
that the three agree with the reference; timings there mean nothing.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F

from pagedsim.cli.base import ArgumentParser, CliError

from . import INFO, paged_attention, paged_attention_reference

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 32, 8, 128
BATCHES = (1, 8, 32, 64, 128)
CONTEXTS = (512, 2048, 8192, 32768)
BLOCK_SIZES = (8, 16, 32, 64, 128, 256)
DTYPES = ("float16", "bfloat16")
TARGET = dict(batch=64, context=4096, block_size=16, dtype="bfloat16")  # the target row
L2_FLUSH_BYTES = 512 << 20  # well above any current L2 (H100/H200: 50-60 MB)


@dataclass(slots=True)
class Row:
    """One timed configuration; times in microseconds, bandwidths in GB/s (1e9 B/s)."""

    gpu: str
    date: str
    dtype: str
    batch: int
    context_tokens: int
    block_size: int
    impl: str  # "paged", "contiguous" or "sdpa"
    num_splits: int
    time_us: float
    kv_bytes_read: int
    achieved_gbps: float
    copy_gbps: float
    fraction_of_copy: float

    def __post_init__(self) -> None:
        if self.impl not in ("paged", "contiguous", "sdpa"):
            raise ValueError(f"impl must be paged, contiguous or sdpa, got {self.impl!r}")


# --------------------------------------------------------------------------- timing


def time_cuda_us(fn: Callable[[], object], iters: int, warmup: int,
                 flush: torch.Tensor) -> float:
    """Median time of ``fn`` in microseconds, CUDA events, L2 flushed before each run."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends, strict=True):
        flush.zero_()  # evicts the previous run's data from L2
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times_ms = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    return statistics.median(times_ms) * 1e3


def measure_copy_gbps(iters: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    t_us = time_cuda_us(lambda: dst.copy_(src), iters, 3, flush)
    return 2 * src.numel() / (t_us * 1e-6) / 1e9


# --------------------------------------------------------------------------- inputs


def kv_bytes(batch: int, context: int, dtype: torch.dtype) -> int:
    """Bytes of K and V one decode step reads: the memory-bound work."""
    return batch * context * NUM_KV_HEADS * HEAD_DIM * 2 * dtype.itemsize


def build_inputs(batch: int, context: int, block_size: int, dtype: torch.dtype,
                 device: str, seed: int = 0):
    """Paged cache with shuffled tables and consecutive tables over the same blocks."""
    gen = torch.Generator(device=device).manual_seed(seed)
    blocks_per_seq = math.ceil(context / block_size)
    num_blocks = batch * blocks_per_seq
    shape = (num_blocks, block_size, NUM_KV_HEADS, HEAD_DIM)
    k_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    v_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    q = torch.randn(batch, NUM_HEADS, HEAD_DIM, generator=gen, device=device, dtype=dtype)
    perm = torch.randperm(num_blocks, generator=gen, device=device)
    shuffled = perm.to(torch.int32).reshape(batch, blocks_per_seq)
    consecutive = torch.arange(num_blocks, dtype=torch.int32, device=device).reshape(
        batch, blocks_per_seq)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    return q, k_cache, v_cache, shuffled, consecutive, seq_lens


def padded_cache(k_cache: torch.Tensor, tables: torch.Tensor, context: int) -> torch.Tensor:
    """The same tokens as a padded contiguous ``[batch, kv_heads, context, head_dim]`` tensor."""
    batch = tables.shape[0]
    gathered = k_cache[tables.long()]  # [batch, blocks, BS, KVH, D]
    return gathered.reshape(batch, -1, NUM_KV_HEADS, HEAD_DIM)[:, :context].permute(
        0, 2, 1, 3).contiguous()


def sdpa_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [B, H, D], k/v [B, KVH, T, D] -> [B, H, D] (GQA handled by SDPA)."""
    return F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)[:, :, 0]


# --------------------------------------------------------------------------- sweep


def bench_config(batch: int, context: int, block_size: int, dtype_name: str, *, gpu: str,
                 date: str, copy_gbps: float, iters: int, warmup: int,
                 flush: torch.Tensor, with_sdpa: bool) -> list[Row]:
    """Time paged, contiguous and (if ``with_sdpa``; it ignores the block size) SDPA."""
    dtype = getattr(torch, dtype_name)
    q, k_cache, v_cache, shuffled, consecutive, seq_lens = build_inputs(
        batch, context, block_size, dtype, "cuda")
    nbytes = kv_bytes(batch, context, dtype)
    rows = []

    def row(impl: str, t_us: float, splits: int) -> Row:
        gbps = nbytes / (t_us * 1e-6) / 1e9
        return Row(gpu, date, dtype_name, batch, context, block_size, impl, splits,
                   round(t_us, 2), nbytes, round(gbps, 1), round(copy_gbps, 1),
                   round(gbps / copy_gbps, 4))

    from .attention import _num_sms, choose_num_splits

    splits = choose_num_splits(batch, NUM_KV_HEADS, shuffled.shape[1] * block_size,
                               _num_sms(q.device))
    out = torch.empty_like(q)
    for impl, tables in (("paged", shuffled), ("contiguous", consecutive)):
        fn = lambda t=tables: paged_attention(  # noqa: E731
            q, k_cache, v_cache, t, seq_lens, out=out, check_values=False)
        rows.append(row(impl, time_cuda_us(fn, iters, warmup, flush), splits))
    # Correctness spot check on one sequence (cheap) before trusting the numbers.
    ref = paged_attention_reference(q[:1], k_cache, v_cache, shuffled[:1], seq_lens[:1])
    got = paged_attention(q[:1], k_cache, v_cache, shuffled[:1], seq_lens[:1])
    err = float((got.double().cpu() - ref).norm() / ref.norm())
    if err > 1e-2:
        raise AssertionError(f"paged_attention is wrong at {batch}x{context}x{block_size}: {err}")

    if with_sdpa:
        k_pad = padded_cache(k_cache, consecutive, context)
        v_pad = padded_cache(v_cache, consecutive, context)
        del k_cache, v_cache
        rows.append(row("sdpa", time_cuda_us(lambda: sdpa_decode(q, k_pad, v_pad), iters,
                                             warmup, flush), 1))
    return rows


def fits(batch: int, context: int, dtype: torch.dtype) -> bool:
    """Paged K+V, the padded SDPA copies and their temporaries must fit in free memory."""
    free, _ = torch.cuda.mem_get_info()
    # Peak while building the padded V: paged K+V, padded K, gathered V, padded V = 2.5x.
    return 3 * kv_bytes(batch, context, dtype) + (1 << 30) < 0.85 * free


def run_cuda(args: argparse.Namespace) -> list[Row]:
    gpu = torch.cuda.get_device_name()
    date = _dt.datetime.now().isoformat(timespec="seconds")
    copy_gbps = measure_copy_gbps()
    print(f"{gpu}: measured device copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    configs = [(TARGET["batch"], TARGET["context"], TARGET["block_size"], TARGET["dtype"])]
    configs += [(b, c, bs, dt) for dt in args.dtype for c in args.context for b in args.batch
                for bs in args.block_size]
    deadline = time.monotonic() + args.max_minutes * 60
    rows: list[Row] = []
    for batch, context, block_size, dtype_name in configs:
        if time.monotonic() > deadline:
            print(f"--max-minutes {args.max_minutes} reached: stopping", flush=True)
            break
        if not fits(batch, context, getattr(torch, dtype_name)):
            print(f"skip {batch}x{context} {dtype_name}: does not fit", flush=True)
            continue
        new = bench_config(batch, context, block_size, dtype_name, gpu=gpu, date=date,
                           copy_gbps=copy_gbps, iters=args.iters, warmup=args.warmup,
                           flush=flush,
                           with_sdpa=block_size == args.block_size[0] or not rows)
        torch.cuda.empty_cache()
        rows += new
        by = {r.impl: r for r in new}
        print(f"{dtype_name} batch {batch:4d} ctx {context:6d} bs {block_size:3d}: "
              f"paged {by['paged'].time_us:9.1f} us ({by['paged'].fraction_of_copy:.0%} of copy)"
              f"  paged/contig {by['paged'].time_us / by['contiguous'].time_us:.3f}"
              + (f"  sdpa {by['sdpa'].time_us:9.1f} us" if "sdpa" in by else ""), flush=True)
    return rows


# --------------------------------------------------------------------------- quick (CPU)


def run_quick() -> bool:
    """Tiny sizes: paged, contiguous and SDPA against the reference. True when all agree."""
    ok = True
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
    for batch, context, block_size, dtype in [(2, 40, 8, torch.float32),
                                             (3, 33, 16, torch.float16),
                                             (1, 64, 4, torch.bfloat16)]:
        q, k_cache, v_cache, shuffled, consecutive, seq_lens = build_inputs(
            batch, context, block_size, dtype, INFO.device)
        # The consecutive tables read other blocks of the cache, hence their own reference.
        ref_paged = paged_attention_reference(q, k_cache, v_cache, shuffled, seq_lens)
        ref_contig = paged_attention_reference(q, k_cache, v_cache, consecutive, seq_lens)
        results = {
            "paged": (paged_attention(q, k_cache, v_cache, shuffled, seq_lens), ref_paged),
            "contiguous": (paged_attention(q, k_cache, v_cache, consecutive, seq_lens),
                           ref_contig),
            "sdpa": (sdpa_decode(q, padded_cache(k_cache, shuffled, context),
                                 padded_cache(v_cache, shuffled, context)), ref_paged),
        }
        for impl, (out, ref) in results.items():
            err = float((out.double().cpu() - ref).norm() / ref.norm())
            good = err < tol[dtype]
            ok &= good
            print(f"quick {impl:10s} {str(dtype):15s} batch {batch} ctx {context} "
                  f"bs {block_size}: rel err {err:.2e} {'ok' if good else 'FAIL'}")
    return ok


# --------------------------------------------------------------------------- output


def write_csv(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Row)])
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))


def plot(rows: list[Row], path: Path) -> None:
    """Fraction of copy bandwidth vs context, one line per block size (batch 64, bf16)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    sel = [r for r in rows if r.batch == 64 and r.dtype == "bfloat16" and r.impl == "paged"]
    for bs in sorted({r.block_size for r in sel}):
        pts = sorted((r.context_tokens, r.fraction_of_copy) for r in sel if r.block_size == bs)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"block {bs}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("achieved / measured copy bandwidth")
    ax.set_title(f"paged decode attention, batch 64, bf16\n{rows[0].gpu if rows else ''}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


#: Each flag's range (inclusive): a sweep is a few minutes of one GPU, not hours.
LIMITS = {"batch": (1, 4096), "context": (1, 2**20), "block_size": (1, 256),
          "iters": (1, 10_000), "warmup": (0, 1_000), "max_minutes": (0, 24 * 60)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The flags, each checked against :data:`LIMITS` (block sizes are powers of two, as
    the kernel's block loop needs); a bad one raises :class:`CliError` naming it."""
    # pagedsim's parser: a usage error is one line (CliError), not usage text and exit.
    p = ArgumentParser(prog="python -m pagedsim.kernels.bench",
                       description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny CPU correctness run, no timing")
    p.add_argument("--out", type=Path, default=Path("figures/bench_paged_attention.csv"),
                   help="CSV of the timed sweep, one row per configuration (default "
                        "figures/bench_paged_attention.csv)")
    p.add_argument("--plot", type=Path, default=None, help="also write a PNG plot here")
    p.add_argument("--batch", type=int, nargs="+", default=list(BATCHES), metavar="SEQS",
                   help=f"sequences per decode step (default {' '.join(map(str, BATCHES))})")
    p.add_argument("--context", type=int, nargs="+", default=list(CONTEXTS), metavar="TOKENS",
                   help="tokens of context per sequence (default "
                        f"{' '.join(map(str, CONTEXTS))})")
    p.add_argument("--block-size", type=int, nargs="+", default=list(BLOCK_SIZES),
                   metavar="SLOTS", help="slots per KV block (default "
                                         f"{' '.join(map(str, BLOCK_SIZES))})")
    p.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=DTYPES,
                   help="K/V and query dtypes (default both)")
    p.add_argument("--iters", type=int, default=30,
                   help="timed launches per configuration, CUDA events (default 30)")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed launches first, to compile and warm caches (default 5)")
    p.add_argument("--max-minutes", type=float, default=5.0,
                   help="stop the sweep after this long (the rows so far are written)")
    args = p.parse_args(argv)
    for name, (low, high) in LIMITS.items():
        flag = "--" + name.replace("_", "-")
        given = getattr(args, name)
        for value in given if isinstance(given, list) else [given]:
            if not (math.isfinite(value) and low <= value <= high) or (
                    name == "max_minutes" and value == 0):
                more = " (and more than 0)" if name == "max_minutes" else ""
                got = f"{value:,}" if isinstance(value, int) else f"{value:g}"
                raise CliError(f"argument {flag}: must be from {low} to {high:,}{more}, "
                               f"got {got}")
            if name == "block_size" and value & (value - 1):
                raise CliError(f"argument {flag}: must be a power of two (the kernel's "
                               f"block loop), got {value}")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except CliError as exc:
        print(f"python -m pagedsim.kernels.bench: error: {exc}", file=sys.stderr)
        return 2
    print(f"backend: {INFO.name} on {INFO.device} ({INFO.reason})")
    if args.quick:
        return 0 if run_quick() else 1
    if not torch.cuda.is_available() or INFO.name != "triton":
        print("the timed sweep needs CUDA and triton; try --quick", file=sys.stderr)
        return 2
    rows = run_cuda(args)
    write_csv(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
