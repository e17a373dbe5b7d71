"""Speed of nano-vllm's BlockManager, pagedsim's paged manager and the lean baseline on one
mixed allocate / append / free stream (:func:`pagedsim.bench_mixed.mixed_stream`: 200,000
operations, 8,192 blocks of 16 slots, prompts of 1,024 to 2,048 tokens).

Usage::

    git clone https://github.com/GeeeekExplorer/nano-vllm ../nano-vllm
    python scripts/nanovllm_speed.py ../nano-vllm [--ops 200000] [--repeats 3]

nano-vllm is loaded as ``scripts/nanovllm_blocks.py`` loads it (its ``BlockManager`` and
``Sequence`` only; ``xxhash`` is used if installed, else a stand-in). Each operation is
what nano-vllm's scheduler asks of its BlockManager for that event:

* allocate: ``can_allocate`` (which hashes the prompt's full blocks to look them up: its
  prefix cache is always on) then ``allocate``; the prompt's token ids are the request's
  own, so nothing hits;
* append: ``can_append``, ``may_append``, then ``Sequence.append_token`` (the decode step's
  new token; nano-vllm hashes decoded blocks only after prefills, in ``hash_blocks``);
* free: ``deallocate``.

pagedsim's paged manager does ``allocate`` / ``append_slot`` / ``free`` (no prefix cache:
its cache is a pool of its own, ``prefix-cache``), and the lean list-and-dict baseline the
same. Each is the best of ``--repeats`` replays, interleaved. The figures are for the
machine they ran on; the ratios are what to compare.

``--free-rates`` replays streams of other turnovers (the chance that an operation frees a
sequence; admissions follow). The ratio to nano-vllm grows with the turnover, since its
allocate and free cost tens of microseconds (it hashes every full block of a prompt) and
an append a few hundred nanoseconds; the ratio to the lean baseline falls, since the
manager writes a reference count per block at allocate and at free and the lean
allocator writes none.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

from pagedsim.bench_mixed import LeanAllocator, Op, gc_paused, mixed_stream, replay
from pagedsim.memory import PagedAllocator

_BLOCKS = Path(__file__).resolve().parent / "nanovllm_blocks.py"


def _loader():
    spec = importlib.util.spec_from_file_location("nanovllm_blocks", _BLOCKS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_block_manager


def replay_nanovllm(BlockManager, Sequence, ops: list[Op], num_blocks: int = 8192,
                    block_size: int = 16) -> float:
    """Seconds nano-vllm's BlockManager takes to replay ``ops`` (the module docstring
    says which calls each operation makes), garbage collection paused. Sequences are
    built before the clock starts."""
    Sequence.block_size = block_size
    bm = BlockManager(num_blocks, block_size)
    seqs = {s: Sequence(list(range(s << 12, (s << 12) + n))) for op, s, n in ops if op == 0}
    can_allocate, allocate = bm.can_allocate, bm.allocate
    can_append, may_append, deallocate = bm.can_append, bm.may_append, bm.deallocate
    with gc_paused():
        t0 = time.perf_counter()
        for op, s, _ in ops:
            seq = seqs[s]
            if op == 1:
                if not can_append(seq):
                    raise RuntimeError("nano-vllm ran out of blocks on a stream built to fit")
                may_append(seq)
                seq.append_token(-1 - s)
            elif op == 0:
                cached = can_allocate(seq)
                if cached < 0:
                    raise RuntimeError("nano-vllm ran out of blocks on a stream built to fit")
                allocate(seq, cached)
            else:
                deallocate(seq)
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/nanovllm_speed.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a nano-vllm checkout")
    parser.add_argument("--ops", type=int, default=200_000, help="operations (200000)")
    parser.add_argument("--repeats", type=int, default=3, help="replays each, best kept")
    parser.add_argument("--free-rates", default="0.0033",
                        help="comma-separated chances that an operation frees a sequence, "
                             "one stream each (0.0033: the benchmark's stream)")
    args = parser.parse_args(argv)
    # Bounds keep the streams in memory (about 100 bytes an operation) and the run short.
    if not 1000 <= args.ops <= 5_000_000:
        parser.error(f"--ops must be in [1000, 5000000], got {args.ops}")
    if not 1 <= args.repeats <= 100:
        parser.error(f"--repeats must be in [1, 100], got {args.repeats}")
    try:
        rates = [float(r) for r in args.free_rates.split(",")]
    except ValueError:
        parser.error(f"--free-rates must be numbers separated by commas, got "
                     f"{args.free_rates!r}")
    bad = [r for r in rates if not 0.0 < r < 0.5]
    if bad:
        parser.error(f"--free-rates must each be in (0, 0.5), got {bad[0]!r}")
    if len(rates) > 20:
        parser.error(f"--free-rates takes at most 20 rates, got {len(rates)}")
    BlockManager, Sequence = _loader()(args.checkout)
    xxhash = "xxhash" if "xxhash" in sys.modules and hasattr(sys.modules["xxhash"],
                                                              "VERSION") else "a stand-in"
    print(f"{args.ops:,} mixed operations a stream (8,192 blocks of 16; nano-vllm hashing "
          f"with {xxhash}), best of {args.repeats}, ops/s")
    print(f"{'free rate':>9} {'allocates':>9} {'appends/alloc':>13} {'nano-vllm':>11} "
          f"{'paged':>11} {'lean':>11} {'paged/nano':>10} {'paged/lean':>10}")
    for rate in rates:
        ops = mixed_stream(args.ops, free_rate=rate)
        num_allocates = sum(op == 0 for op, _, _ in ops)
        num_appends = sum(op == 1 for op, _, _ in ops)
        best = {"nano-vllm": float("inf"), "paged": float("inf"), "lean": float("inf")}
        for _ in range(args.repeats):
            best["nano-vllm"] = min(best["nano-vllm"],
                                    replay_nanovllm(BlockManager, Sequence, ops))
            best["paged"] = min(best["paged"], replay(PagedAllocator(8192, 16), ops))
            best["lean"] = min(best["lean"], replay(LeanAllocator(8192, 16), ops))
        speed = {name: len(ops) / seconds for name, seconds in best.items()}
        print(f"{rate:>9g} {num_allocates:>9,} {num_appends / num_allocates:>13,.0f} "
              f"{speed['nano-vllm']:>11,.0f} {speed['paged']:>11,.0f} {speed['lean']:>11,.0f} "
              f"{best['nano-vllm'] / best['paged']:>9.2f}x {best['lean'] / best['paged']:>9.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
