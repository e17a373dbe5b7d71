"""``pagedsim cache-replay``: the Mooncake paper's Figure 9 experiment on a trace
(:mod:`pagedsim.experiments.cache_replay`): prefix-cache hit rate against cache capacity."""

from __future__ import annotations

import argparse
import json
import math
import os

from .argtypes import csv_list, shown, whole
from .base import CliError
from .experiment_options import TRACE_FLAG_NAMES


def capacity(text: str) -> float:
    """A cache capacity in tokens: a number >= 0 (``3e6`` works), or ``inf``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of tokens (or inf): {shown(text)}"
                                         ) from None
    if math.isnan(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 tokens (or inf), got {shown(text)}")
    return value


def add_cache_replay(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cache-replay", help="prefix-cache hit rate of a trace against cache capacity",
        description="Replay a trace's prompts in arrival order through an LRU prefix cache "
                    "(no scheduler): look up each prompt's cached prefix (whole blocks, at "
                    "most prompt_len - 1 tokens), then insert its blocks, evicting least "
                    "recently used blocks while over capacity. Prompts share content only "
                    "where the trace says so (Mooncake's hash_ids); other traces hit 0%.")
    p.add_argument("trace", metavar="TRACE",
                   help="a trace file (Mooncake JSONL, Azure CSV, pagedsim CSV/JSONL), or "
                        "a synthetic workload whose prompts share content: system-prompt, "
                        "multi-turn or few-shot (pagedsim.workloads.sharing_workloads, "
                        "default shapes)")
    p.add_argument("--block-size", type=whole, default=None, metavar="TOKENS",
                   help="tokens per cached block (default 512, Mooncake's, for a trace; 16, "
                        "vLLM's, for a synthetic workload)")
    p.add_argument("--capacity-tokens", type=csv_list(capacity, "capacities"),
                   default=[math.inf],
                   metavar="C[,C...]",
                   help="cache capacity in tokens, or inf (default); several, comma-separated, "
                        "print one row each")
    p.add_argument("--num-requests", type=whole, default=None, metavar="N",
                   help="replay only the trace's first N requests (a synthetic "
                        "workload: N requests, default 2000)")
    p.add_argument("--skip-zero-output", action="store_true",
                   help="skip trace rows with 0 output tokens (the Azure trace has some; "
                        "counted in the report) instead of stopping with an error; their "
                        "prompts are then not replayed")
    p.add_argument("--seed", type=whole, default=0, metavar="SEED",
                   help="seed of a synthetic workload (default 0; a trace ignores it)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object (a list of objects for several capacities) with "
                        "hit_rate, queries, hits (tokens), evictions, peak_blocks")
    p.set_defaults(run=run_cache_replay)


#: Requests drawn to estimate a synthetic workload's blocks per request.
_SAMPLE_REQUESTS = 2000


def _check_estimated_size(name: str, count: int, seed: int, block_size: int) -> None:
    """Refuse a synthetic replay whose blocks, estimated from its first requests, are
    well past :data:`~pagedsim.experiments.cache_replay.MAX_REPLAY_BLOCKS`, before generating them
    all
    (4 million few-shot requests take about 2 GB). The exact count is checked after."""
    from ..experiments.cache_replay import MAX_REPLAY_BLOCKS
    from ..experiments.spec import DEFAULT_RATE
    from ..workloads.sharing_workloads import sharing_workload

    if count <= _SAMPLE_REQUESTS:
        return
    sample = sharing_workload(name, _SAMPLE_REQUESTS, DEFAULT_RATE, seed)
    per_request = sum(-(-r.prompt_len // block_size) for r in sample) / len(sample)
    if per_request * count > 1.05 * MAX_REPLAY_BLOCKS:
        raise CliError(
            f"argument --num-requests / --block-size: {count:,} {name} requests make about "
            f"{per_request * count:,.0f} blocks of {block_size} tokens (estimated from the "
            f"first {_SAMPLE_REQUESTS:,}), more than the {MAX_REPLAY_BLOCKS:,} a replay keeps "
            "in memory: replay fewer requests or larger blocks")


def run_cache_replay(args: argparse.Namespace) -> int:
    from ..experiments.cache_replay import MAX_REPLAY_BLOCKS, check_replay_size, replay
    from ..experiments.spec import DEFAULT_NUM_REQUESTS, DEFAULT_RATE
    from ..user_files import NotRegularFileError
    from ..workloads.sharing_workloads import SHARING_WORKLOAD_NAMES, sharing_workload
    from ..workloads.traces import TraceError, load_trace, more_lines_than
    from ..workloads.workload import MAX_NUM_REQUESTS

    if args.num_requests is not None and not 1 <= args.num_requests <= MAX_NUM_REQUESTS:
        raise CliError(f"argument --num-requests: must be from 1 to {MAX_NUM_REQUESTS:,}, "
                       f"got {args.num_requests:,}")
    if args.block_size is not None and args.block_size < 1:
        raise CliError(f"argument --block-size: must be >= 1 token, got {args.block_size}")
    if args.trace in SHARING_WORKLOAD_NAMES:
        if args.skip_zero_output:
            raise CliError(f"argument --skip-zero-output: applies to a trace file, not the "
                           f"synthetic workload {args.trace!r}")
        if args.seed < 0:
            raise CliError(f"argument --seed: must be >= 0, got {args.seed}")
        count = DEFAULT_NUM_REQUESTS if args.num_requests is None else args.num_requests
        block_size = 16 if args.block_size is None else args.block_size
        _check_estimated_size(args.trace, count, args.seed, block_size)
        requests = sharing_workload(args.trace, count, DEFAULT_RATE, args.seed)
        report = (f"{args.trace}: {len(requests):,} synthetic requests (seed {args.seed}), "
                  f"{sum(r.prompt_len for r in requests):,} prompt tokens")
    else:
        if not os.path.lexists(args.trace):
            raise CliError(f"argument TRACE: {args.trace!r} is neither a trace file nor one "
                           f"of the synthetic workloads {', '.join(SHARING_WORKLOAD_NAMES)} "
                           "(sharegpt and alpaca prompts share nothing: their hit rate is 0)")
        try:
            # Every prompt takes a block at least: a trace of more rows than the block
            # limit is refused on a count of its lines, before any request is built.
            most = args.num_requests or MAX_REPLAY_BLOCKS + 1
            if args.num_requests is None and more_lines_than(args.trace, most) is not None:
                raise CliError(f"argument TRACE: more than {MAX_REPLAY_BLOCKS:,} rows, hence "
                               f"blocks, the most a replay keeps in memory; replay the first "
                               "N with --num-requests")
            trace = load_trace(args.trace, max_requests=most,
                               skip_zero_output=args.skip_zero_output)
        except NotRegularFileError as exc:  # from the count, before load_trace says it
            raise CliError(f"argument TRACE: {exc.path}: is {exc.kind}, not a trace file (a "
                           "regular .csv or .jsonl file)") from None
        except (TraceError, OSError) as exc:
            # The reader names its own parameters; say the flags this command has.
            message = " ".join(str(exc).split())
            for name, flag in TRACE_FLAG_NAMES:
                message = message.replace(name, flag)
            raise CliError(f"argument TRACE: {message}") from None
        if len(trace.requests) > MAX_REPLAY_BLOCKS:
            raise CliError(f"argument TRACE: more than {MAX_REPLAY_BLOCKS:,} requests, hence "
                           f"blocks, the most a replay keeps in memory; replay the first N "
                           "with --num-requests")
        requests, report = trace.requests, trace.report()
        block_size = 512 if args.block_size is None else args.block_size
    try:
        check_replay_size(requests, block_size)
    except ValueError as exc:
        source = "--num-requests" if args.trace in SHARING_WORKLOAD_NAMES else "TRACE"
        raise CliError(f"argument {source} / --block-size: {exc}") from None
    results = [replay(requests, block_size, c) for c in args.capacity_tokens]
    if args.json:
        rows = [r.to_dict() for r in results]
        print(json.dumps(rows[0] if len(rows) == 1 else rows, indent=1))
        return 0
    print(report)
    print(f"{'capacity (tokens)':>18}  {'hit rate':>8}  {'hit tokens':>14}  "
          f"{'prompt tokens':>14}  {'evicted blocks':>14}")
    for r in results:
        cap = "inf" if math.isinf(r.capacity_tokens) else f"{r.capacity_tokens:,.0f}"
        print(f"{cap:>18}  {r.hit_rate:>8.1%}  {r.hits:>14,}  {r.queries:>14,}  "
              f"{r.evictions:>14,}")
    return 0
