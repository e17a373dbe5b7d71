"""Blocks used by nano-vllm's BlockManager and by pagedsim's allocators on one request
stream: a shared-system-prompt load (``pagedsim.workloads.sharing_workloads``), the same token ids
for both (:func:`pagedsim.workloads.prompts.prompt_tokens`).

Usage::

    git clone https://github.com/GeeeekExplorer/nano-vllm ../nano-vllm
    python scripts/nanovllm_blocks.py ../nano-vllm [--requests 2000] [--concurrency 64]

The first argument is a nano-vllm checkout (the folder holding ``nanovllm/``); nothing of
it is copied here. Only ``nanovllm/engine/block_manager.py`` and the two small modules
it imports (``sequence.py``, ``sampling_params.py``) are loaded: the package's
``__init__`` (which imports torch) is bypassed by registering bare package modules, and
``xxhash``, if it is not installed, is replaced by a stand-in with the same two methods
(an 8-byte BLAKE2b digest). Which 64-bit hash names a block does not change which blocks
match: nano-vllm also compares a hit block's token ids.

How the two are driven (the same events, in the same order, for each):

* a step prefills or decodes, as nano-vllm's scheduler (and vLLM v0) does. While a
  request waits and fewer than ``--concurrency`` run, the step admits waiting requests in
  arrival order up to that limit: for nano-vllm ``can_allocate`` + ``allocate`` of each,
  then, after the step's model run (its scheduler's ``postprocess``), ``hash_blocks`` of
  the prefilled tokens and the first output token appended; for pagedsim
  ``lookup_prefix`` + ``allocate_group`` of each prompt. Otherwise every running request
  decodes one token: nano-vllm's ``may_append``, then ``hash_blocks`` and
  ``append_token``; pagedsim's ``append_slot``;
* a request that has generated its output length is freed (``deallocate`` / ``free``);
* after each step the blocks held by running requests are counted: nano-vllm's
  ``used_block_ids``, pagedsim's ``num_used_blocks`` (blocks with a reference; cached
  blocks that nobody holds count in neither).

The pool is large enough that no allocation fails, so both see every event. Generated
tokens get ids no prompt uses and no other request repeats (pagedsim's generated tokens
are a sequence's own). One difference is built in: nano-vllm hashes a prompt's blocks
after the step that computes them, so two requests admitted in the same step do not
share; pagedsim (as vLLM v1) names full blocks at allocation, so they do.

Result of ``python scripts/nanovllm_blocks.py ../nano-vllm`` (nano-vllm commit
bb823b3, 2,000 requests of the default system-prompt shape, 64 running at most, blocks
of 16 tokens), printed by this script::

    2,000 system-prompt requests, at most 64 running, blocks of 16 tokens, 12,781 steps
    allocator      peak blocks  mean blocks
    nano-vllm            1,507      1,228.5
    prefix-cache         1,507      1,218.7
    paged                1,831      1,531.7
    steps at which prefix-cache uses more blocks than nano-vllm: 0 of 12,781
    prefix-cache / nano-vllm: peak 1.000x, mean 0.992x
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import sys
import types
from pathlib import Path

#: Token ids of generated tokens start here, above any vocabulary's prompt ids.
OUTPUT_ID_BASE = 1 << 40


def load_block_manager(checkout: Path) -> tuple[type, type]:
    """nano-vllm's ``BlockManager`` and ``Sequence`` from the checkout at ``checkout``,
    without running ``nanovllm/__init__.py`` (torch) or needing ``xxhash``."""
    root = checkout / "nanovllm"
    if not (root / "engine" / "block_manager.py").is_file():
        raise SystemExit(f"error: {checkout} holds no nanovllm/engine/block_manager.py "
                         "(give the folder of a nano-vllm checkout)")
    for name, path in (("nanovllm", root), ("nanovllm.engine", root / "engine")):
        package = types.ModuleType(name)
        package.__path__ = [str(path)]  # submodules load from here; __init__ is skipped
        sys.modules[name] = package
    try:
        import xxhash  # noqa: F401
    except ImportError:
        sys.modules["xxhash"] = _xxhash_stand_in()
    block_manager = importlib.import_module("nanovllm.engine.block_manager")
    sequence = importlib.import_module("nanovllm.engine.sequence")
    return block_manager.BlockManager, sequence.Sequence


def _xxhash_stand_in() -> types.ModuleType:
    """A module with ``xxh64()`` objects offering ``update`` and ``intdigest``."""
    class Xxh64:
        def __init__(self) -> None:
            self._h = hashlib.blake2b(digest_size=8)

        def update(self, data: bytes) -> None:
            self._h.update(data)

        def intdigest(self) -> int:
            return int.from_bytes(self._h.digest(), "little")

    module = types.ModuleType("xxhash")
    module.xxh64 = Xxh64  # type: ignore[attr-defined]
    return module


def run(checkout: Path, num_requests: int, concurrency: int, block_size: int,
        seed: int) -> dict[str, list[int]]:
    """Blocks in use after every step, per allocator: ``nano-vllm``, ``prefix-cache``
    and ``paged`` (pagedsim's allocator without a prefix cache, for scale)."""
    from pagedsim.memory import PagedAllocator, PrefixCachingAllocator
    from pagedsim.workloads.block_hashes import BlockHashes
    from pagedsim.workloads.prompts import prompt_tokens
    from pagedsim.workloads.sharing_workloads import sharing_workload

    BlockManager, Sequence = load_block_manager(checkout)
    Sequence.block_size = block_size  # a class attribute (256 by default)
    requests = sharing_workload("system-prompt", num_requests, seed=seed)
    longest = max(r.prompt_len + r.output_len for r in requests)
    num_blocks = concurrency * (-(-longest // block_size) + 1)  # nothing ever waits for room
    nano = BlockManager(num_blocks, block_size)
    ours = {"prefix-cache": PrefixCachingAllocator(num_blocks, block_size),
            "paged": PagedAllocator(num_blocks, block_size)}
    used: dict[str, list[int]] = {"nano-vllm": [], "prefix-cache": [], "paged": []}
    waiting = list(reversed(requests))
    running: dict[int, tuple[object, int]] = {}  # request id -> (nano-vllm seq, generated)
    by_id = {r.request_id: r for r in requests}

    def sampled(rid: int, k: int) -> int:  # the k-th generated token of request rid
        return OUTPUT_ID_BASE + rid * 1_000_000 + k

    while waiting or running:
        if waiting and len(running) < concurrency:  # a prefill step: admit, as nano-vllm
            admitted = []
            while waiting and len(running) + len(admitted) < concurrency:
                r = waiting.pop()
                seq = Sequence([int(t) for t in prompt_tokens(r)])
                cached = nano.can_allocate(seq)
                assert cached >= 0, "the pool is sized so that nothing waits"
                nano.allocate(seq, cached)
                seq.num_scheduled_tokens = seq.num_tokens - seq.num_cached_tokens
                hashes = BlockHashes(r, block_size)  # once per request, as the scheduler
                ours["prefix-cache"].lookup_prefix(hashes, r.prompt_len, r.request_id)
                for alloc in ours.values():
                    assert alloc.allocate_group([r.request_id], r.prompt_len,
                                                r.prompt_len + r.output_len, block_hashes=hashes)
                admitted.append((r.request_id, seq))
            for rid, seq in admitted:  # after the step's model run: its postprocess
                nano.hash_blocks(seq)
                seq.num_cached_tokens += seq.num_scheduled_tokens
                seq.append_token(sampled(rid, 0))
                running[rid] = (seq, 1)
        else:  # a decode step: every running request decodes one token
            for rid, (seq, _) in list(running.items()):
                assert nano.can_append(seq)
                nano.may_append(seq)
                seq.num_scheduled_tokens = 1
                for alloc in ours.values():
                    alloc.append_slot(rid)
            for rid, (seq, generated) in list(running.items()):
                nano.hash_blocks(seq)
                seq.num_cached_tokens += 1
                seq.append_token(sampled(rid, generated))
                running[rid] = (seq, generated + 1)
        for name, value in (("nano-vllm", len(nano.used_block_ids)),
                            *((n, a.num_used_blocks) for n, a in ours.items())):
            used[name].append(value)
        for rid, (seq, generated) in list(running.items()):  # finished: freed
            if generated >= by_id[rid].output_len:
                nano.deallocate(seq)
                for alloc in ours.values():
                    alloc.free(rid)
                del running[rid]
    return used


def report(used: dict[str, list[int]], num_requests: int, concurrency: int,
           block_size: int) -> str:
    """The printed result: peak and mean blocks in use per allocator over the steps."""
    lines = [f"{num_requests:,} system-prompt requests, at most {concurrency} running, "
             f"blocks of {block_size} tokens, {len(used['paged']):,} steps",
             f"{'allocator':<14}{'peak blocks':>12}{'mean blocks':>13}"]
    for name, values in used.items():
        lines.append(f"{name:<14}{max(values):>12,}{sum(values) / len(values):>13,.1f}")
    nano, ours = used["nano-vllm"], used["prefix-cache"]
    worse = sum(o > n for o, n in zip(ours, nano, strict=True))
    lines.append(f"steps at which prefix-cache uses more blocks than nano-vllm: {worse} of "
                 f"{len(ours):,}")
    lines.append(f"prefix-cache / nano-vllm: peak {max(ours) / max(nano):.3f}x, mean "
                 f"{sum(ours) / sum(nano):.3f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkout", type=Path, help="a nano-vllm checkout (holds nanovllm/)")
    p.add_argument("--requests", type=int, default=2000, help="requests (default 2000)")
    p.add_argument("--concurrency", type=int, default=64,
                   help="most requests running at once (default 64)")
    p.add_argument("--block-size", type=int, default=16, help="tokens per block (16)")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    args = p.parse_args(argv)
    # Upper bounds keep one run's token ids and per-step counts in memory and its time
    # in minutes.
    for flag, value, most in (("--requests", args.requests, 100_000),
                              ("--concurrency", args.concurrency, 4096),
                              ("--block-size", args.block_size, 4096)):
        if not 1 <= value <= most:
            p.error(f"argument {flag}: must be in [1, {most}], got {value}")
    used = run(args.checkout, args.requests, args.concurrency, args.block_size, args.seed)
    print(report(used, args.requests, args.concurrency, args.block_size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
