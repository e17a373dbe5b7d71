"""Allocator and simulator speed: ``python -m pagedsim.bench`` prints operations per second.

Targets on a 2-core laptop-class machine: ``PagedAllocator.append_slot`` >= 2,000,000/s,
allocate (a 16-block prompt) + free pairs >= 300,000/s, prefix-cache lookup + allocate +
free pairs (16-block prompts, half of the blocks cached) >= 100,000/s, a mixed stream of
allocate / append / free at 1.0x or more of a lean list-and-dict allocator measured in the
same run (:mod:`pagedsim.bench_mixed`), the paged scheduler through 20,000 ShareGPT-like
requests in < 60 s. Timings are best-of-``repeats`` wall clock; the allocators' with
garbage collection paused, as ``timeit`` times (the scheduler's and the scale figure's
run with it on, as a simulation does). Last, the scale figure
(:mod:`pagedsim.bench_scale`): requests per second and peak memory of ``pagedsim compare
--schemes paged`` on 100,000 requests, in a fresh process (``--scale N`` for another
size).
"""

from __future__ import annotations

import argparse
import time

from .bench_mixed import gc_paused, mixed_report
from .bench_scale import scale_report
from .memory.contiguous import ContiguousAllocator
from .memory.paged import PagedAllocator
from .memory.prefix_cache import PrefixCachingAllocator
from .workloads.block_hashes import BlockHashes
from .workloads.workload import Request


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        with gc_paused():
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
    return best


def bench_append_slot(num_ops: int = 2_000_000, repeats: int = 3) -> float:
    """append_slot calls per second: 64 sequences growing round-robin, block size 16."""
    num_seqs = 64
    per_seq = num_ops // num_seqs

    def run() -> None:
        a = PagedAllocator(num_seqs * (per_seq // 16 + 2), 16)
        for s in range(num_seqs):
            a.allocate(s, 1)
        append = a.append_slot
        for _ in range(per_seq):
            for s in range(num_seqs):
                append(s)

    return per_seq * num_seqs / _best(run, repeats)


def bench_allocate_free(num_ops: int = 300_000, repeats: int = 3) -> float:
    """allocate(256-token prompt = 16 blocks) + free pairs per second."""
    def run() -> None:
        a = PagedAllocator(1024, 16)
        alloc, free = a.allocate, a.free
        for i in range(num_ops):
            alloc(i, 256)
            free(i)

    return num_ops / _best(run, repeats)


def _half_cached_prompts(num_requests: int, first_id: int = 0) -> list[Request]:
    """256-token prompts (16 blocks of 16) in two 128-token pieces: piece 0, which every
    prompt shares, then a piece of the request's own."""
    return [Request(i, 0.0, 256, 1, prompt_pieces=(0, 1 + i), prompt_piece_tokens=128)
            for i in range(first_id, first_id + num_requests)]


def bench_prefix_allocate_free(num_ops: int = 100_000, repeats: int = 3,
                               num_requests: int = 2048, fresh: bool = False
                               ) -> tuple[float, float]:
    """prefix-cache pairs per second: ``lookup_prefix`` + ``allocate_group`` (a 256-token
    prompt = 16 blocks, the first 8 of them cached) + ``free``; also returns the fraction
    of prompt tokens that hit (0.5 by construction, checked by the caller).

    The requests cycle through ``num_requests`` distinct prompts in a pool of 1,024
    blocks. The pool keeps the shared 8 blocks and the own halves of at most the last
    127 requests, so a request's own half is evicted long before it comes back: every
    admission hits 8 blocks and takes 8 from the free queue, evicting a cached block for
    each. Hash chains are computed once per request, at its first arrival (a warm-up
    pass through every request, untimed), and kept with it (its ``BlockHashes``, as the
    scheduler keeps them and vLLM hashes a request's blocks when it arrives); the timed
    pairs reuse them. ``fresh=True``: every timed pair is a new request instead, so its
    chain is hashed inside the timed loop.
    """
    hits = 0
    times: list[float] = []

    def run() -> None:
        nonlocal hits
        a = PrefixCachingAllocator(1024, 16)
        look, alloc, free = a.lookup_prefix, a.allocate_group, a.free
        hits = 0
        if fresh:
            stream = _half_cached_prompts(num_ops)
            with gc_paused():
                t0 = time.perf_counter()
                for r in stream:  # each request new: its hashes made and hashed in the loop
                    i, h = r.request_id, BlockHashes(r, 16)
                    hits += look(h, 256, i)
                    alloc([i], 256, 257, block_hashes=h)
                    free(i)
                times.append(time.perf_counter() - t0)
            return
        cycle = [BlockHashes(r, 16) for r in _half_cached_prompts(num_requests)]
        for i, h in enumerate(cycle + cycle):  # arrival: every chain hashed once (untimed)
            alloc([i % num_requests], 256, 257, block_hashes=h)
            free(i % num_requests)
        stream = [(i % num_requests, cycle[i % num_requests]) for i in range(num_ops)]
        with gc_paused():
            t0 = time.perf_counter()
            for i, h in stream:
                hits += look(h, 256, i)
                alloc([i], 256, 257, block_hashes=h)
                free(i)
            times.append(time.perf_counter() - t0)

    for _ in range(repeats):
        run()
    return num_ops / min(times), hits / (256 * num_ops)


def prefix_report(num_ops: int) -> str:
    """The benchmark's prefix-cache lines: pairs per second with chains kept with each
    request (the target's figure) and with every request new (its chain hashed in the
    timed loop)."""
    rate, hit = bench_prefix_allocate_free(num_ops)
    fresh, _ = bench_prefix_allocate_free(num_ops, fresh=True)
    return (f"PrefixCaching lookup+alloc+free {rate:>12,.0f} /s   (16-block prompt, {hit:.0%} "
            "of its tokens cached; target >= 100,000)\n"
            "    hash chains are computed once per request, at its arrival, and kept with it\n"
            "    (as vLLM hashes a request's blocks on arrival); the pairs above reuse them\n"
            f"PrefixCaching, chains hashed in  {fresh:>12,.0f} /s   (every pair a new "
            "request: its 16-block chain hashed inside the timed loop)")


def bench_contiguous_allocate_free(num_ops: int = 100_000, repeats: int = 3) -> dict[str, float]:
    """allocate + free pairs per second for each contiguous placement (8 live regions)."""
    out = {}
    for placement in ("first-fit", "best-fit", "buddy"):
        def run(placement: str = placement) -> None:
            a = ContiguousAllocator(1 << 16, "oracle", placement, 4096)
            for s in range(8):
                a.allocate(("live", s), 100 + 37 * s, 500 + 91 * s)
            for i in range(num_ops):
                a.allocate(i, 200, 300 + i % 700)
                a.free(i)

        out[placement] = num_ops / _best(run, repeats)
    return out


def bench_scheduler(num_requests: int = 20_000) -> tuple[float, int]:
    """Seconds to simulate ``num_requests`` ShareGPT-like requests through the paged
    scheduler (OPT-13B on an A100-40GB, the paper's 15,728-slot pool, 5 req/s)."""
    from .engine.cost import CostModel
    from .engine.simulator import simulate
    from .models.budget import kv_budget
    from .models.specs import get_gpu, get_model
    from .workloads.workload import WorkloadConfig, generate_workload

    model, gpu = get_model("opt-13b"), get_gpu("a100-40gb")
    budget = kv_budget(model, gpu, gpu_memory_utilization=1.0, activation_bytes=2 << 30)
    reqs = generate_workload(WorkloadConfig("sharegpt", num_requests=num_requests,
                                            rate_per_s=5.0, seed=0))
    alloc = PagedAllocator(budget.num_blocks, 16)
    t0 = time.perf_counter()
    result = simulate(reqs, alloc, CostModel(model, gpu), scheme="paged", progress=None)
    return time.perf_counter() - t0, len(result.step_rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedsim.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--scale", type=int, default=None, metavar="N",
                        help="requests of the scale figure (default 100,000; 1,000 with "
                             "--quick; 0 skips it)")
    args = parser.parse_args(argv)
    k = 20 if args.quick else 1
    print(f"PagedAllocator.append_slot       {bench_append_slot(2_000_000 // k):>12,.0f} /s"
          "   (target >= 2,000,000)")
    print(f"PagedAllocator allocate+free     {bench_allocate_free(300_000 // k):>12,.0f} /s"
          "   (16-block prompt; target >= 300,000)")
    print(mixed_report(200_000 // k))
    print(prefix_report(100_000 // k))
    for placement, rate in bench_contiguous_allocate_free(100_000 // k).items():
        print(f"Contiguous {placement:<10} alloc+free {rate:>12,.0f} /s")
    n = 1_000 if args.quick else 20_000
    seconds, steps = bench_scheduler(n)
    print(f"paged scheduler, {n:,} ShareGPT-like requests: {seconds:.1f} s "
          f"({steps:,} steps; target < 60 s for 20,000)")
    scale = args.scale if args.scale is not None else (1_000 if args.quick else 100_000)
    if scale > 0:
        print(scale_report(scale))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
