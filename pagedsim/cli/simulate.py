"""The simulator's main job: ``pagedsim compare`` and ``pagedsim figures`` (see
:mod:`pagedsim.experiments`), and what running one shares with ``pagedsim sweep`` (the
start line, ``--out``, progress); the options they share are
:mod:`~pagedsim.cli.experiment_options`.

Heavy imports (pandas, matplotlib, the experiments) happen inside the ``run_*`` functions,
so ``pagedsim --help`` and ``pagedsim budget`` stay fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..metrics.step_keep import DEFAULT_KEEP_STEPS, KeepSteps
from ..models.budget import PAPER_OPT_13B
from .argtypes import csv_list, jobs, keep_steps, nonempty, whole
from .base import PROG, UNITS_NOTE, CliError
from .dask import with_dask
from .engine_options import prefix_caching_schemes
from .experiment_options import (
    OptionDefaults,
    add_experiment_options,
    check_trace,
    experiment,
    say_model_notes,
)
from .host_options import warn_ignored_host_tier
from .outdir import prepare_out

if TYPE_CHECKING:  # pragma: no cover
    from ..experiments import Experiment


def _say_report(report: str | None, to_stderr: bool) -> str | None:
    """The trace report as a line for the text output, or printed on stderr (``--json``)."""
    if report is None:
        return None
    if to_stderr:
        print(f"workload: {report}", file=sys.stderr)
        return None
    return report


def _check_schemes(names: Sequence[str]) -> tuple[str, ...]:
    """``--schemes`` checked before any work, so a typo fails at once and is named."""
    from ..experiments import check_schemes

    try:
        return check_schemes(names)
    except ValueError as exc:
        raise CliError(f"argument --schemes: {exc}") from None


#: What each command writes in ``--out`` (glob patterns), checked before the run.
OUTPUTS = {
    "compare": ("compare_summary.csv", "compare_steps.csv", "compare_shares.png",
                "compare_timeline_*.png", "compare_hybrid_groups*"),
    "sweep": ("sweep_*.csv", "sweep_*.png"),
    "figures": ("compare_*.csv", "compare_*.png", "sweep_*.csv", "sweep_*.png", "README.md"),
}


def _check_out(args: argparse.Namespace) -> None:
    """``--out`` checked, created and tested for writing before the run
    (:func:`pagedsim.cli.outdir.prepare_out`), so a typo does not cost a whole
    simulation."""
    if getattr(args, "no_write", False):
        return
    prepare_out(args.out, OUTPUTS[args.command])


def _progress(args: argparse.Namespace) -> bool:
    """A progress bar only on a terminal and without --quiet."""
    return not args.quiet and sys.stderr.isatty()


def _report_written(args: argparse.Namespace, paths: Sequence[object]) -> None:
    if not args.quiet:
        for path in paths:
            print(f"wrote {path}", file=sys.stderr)


# --------------------------------------------------------------------------------------
# compare


def add_compare(subparsers: argparse._SubParsersAction) -> None:
    from ..experiments.spec import DEFAULT_NUM_REQUESTS, DEFAULT_RATE
    from ..memory.schemes import DEFAULT_SCHEMES, HYBRID_DEFAULT_SCHEMES

    p = subparsers.add_parser(
        "compare",
        help="replay one workload through every scheme: where the KV pool goes (Fig. 2)",
        description=(
            "Replay one workload through contiguous and paged allocation and report, per "
            "scheme, the time-weighted shares of the KV pool (token, reserved, internal "
            "and external fragmentation, free), the mean batch size, throughput and "
            "preemptions, beside the vLLM paper's Figure 2 and Figure 13 numbers where "
            "the setting is the paper's. Defaults: the paper's setting (--preset "
            f"{PAPER_OPT_13B.name}: OPT-13B, one A100-40GB, "
            f"{PAPER_OPT_13B.budget().max_tokens:,} KV slots; with --model or --gpu and no "
            "--preset, vLLM's memory defaults instead, as 'pagedsim budget'), "
            f"{DEFAULT_NUM_REQUESTS:,} "
            f"ShareGPT-like requests at {DEFAULT_RATE:g} req/s. Writes CSVs and PNGs to "
            "--out. " + UNITS_NOTE + "."
        ),
    )
    add_experiment_options(p, OptionDefaults("compare", "sharegpt", DEFAULT_NUM_REQUESTS,
                                             DEFAULT_RATE, "recompute"))
    p.add_argument("--schemes", type=csv_list(str), default=None, metavar="LIST",
                   help=f"comma-separated schemes (default {','.join(DEFAULT_SCHEMES)}; for "
                        f"a model with sliding-window layers {','.join(HYBRID_DEFAULT_SCHEMES)}"
                        ", which also writes compare_hybrid_groups*: the blocks of each "
                        "KV-cache group and those given up behind the window); "
                        "'pagedsim schemes' lists them all")
    p.add_argument("--part", choices=("saturated", "all"), default="saturated",
                   help="shares over the saturated steps (requests waiting; the default, as "
                        "the paper's Figure 2) or the whole run")
    p.add_argument("--out", default="figures", metavar="DIR", type=nonempty("a folder"),
                   help="folder for compare_summary.csv, compare_steps.csv and PNGs "
                        "(default figures/)")
    p.add_argument("--no-write", action="store_true", help="write no file")
    p.add_argument("--keep-steps", type=keep_steps, default=None, metavar="all|none|N|SECONDSs",
                   help="per-step rows kept for compare_steps.csv and the timelines: all, "
                        "none, a uniform sample of at most N (every k-th step) or one per "
                        "SECONDS of simulated time (e.g. 10s); a timeline of a sample says "
                        "so, and summaries never depend on it (default "
                        f"{DEFAULT_KEEP_STEPS:,}: every step of a run up to that long, "
                        "a sample of a longer one)")
    p.add_argument("--max-step-rows", type=whole, default=1000, metavar="N",
                   help="per-step CSV: of the kept steps, every k-th so at most N rows "
                        "per scheme remain (0 = every kept step; default 1000)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON list of rows (scheme, the six shares as fractions "
                        "summing to 1, mean_batch_size, throughput_tokens_per_s, "
                        "preemptions, ..., and benchmark_serving: every field of vLLM's "
                        "benchmark_serving result under its names) instead of the table")
    p.add_argument("--latency", action="store_true",
                   help="after the table, per scheme the block vLLM's benchmark_serving "
                        "prints: successful requests, duration, request and token "
                        "throughput, mean / median / P99 TTFT, TPOT, ITL and E2EL in ms "
                        "(with --json: the rows' benchmark_serving fields instead)")
    p.set_defaults(run=with_dask(run_compare))


def run_compare(args: argparse.Namespace) -> int:
    from ..experiments import compare, compare_table, json_rows, write_compare
    from ..experiments.hybrid_report import write_hybrid_groups
    from ..memory.schemes import default_schemes

    if args.max_step_rows < 0:
        raise CliError(f"argument --max-step-rows: must be >= 0 (0 = every step), "
                       f"got {args.max_step_rows}")
    if args.keep_steps is not None and args.no_write:
        raise CliError("argument --keep-steps: --no-write writes no file, so no step is "
                       "kept; drop --keep-steps or --no-write")
    keep = (KeepSteps.none() if args.no_write else
            args.keep_steps or KeepSteps.sample(DEFAULT_KEEP_STEPS))
    named = None if args.schemes is None else _check_schemes(args.schemes)
    exp = experiment(args)
    schemes = prefix_caching_schemes(named or default_schemes(exp.model),
                                     bool(args.enable_prefix_caching))
    report = check_trace(exp)
    _check_out(args)
    warn_ignored_host_tier(args, schemes, exp.model)
    say_model_notes(exp)
    _say_start(args, "compare", len(schemes), exp, "one per scheme")
    cmp = compare(exp, schemes, jobs=args.jobs, progress=_progress(args),
                  keep_steps=keep, part=args.part)
    if args.json:
        _say_report(report, to_stderr=True)
        print(json.dumps(json_rows(cmp), indent=1))
    else:
        print(compare_table(cmp, workload_report=report))
        if args.latency:
            _print_serving_blocks(cmp)
    if not args.no_write:
        _report_written(args, write_compare(cmp, args.out, max_step_rows=args.max_step_rows))
        paths, lines = write_hybrid_groups(exp, schemes, args.out)
        for line in lines:
            print(line, file=sys.stderr if args.json else sys.stdout)
        _report_written(args, paths)
    return 0


def _print_serving_blocks(cmp: object) -> None:
    """``compare --latency``: benchmark_serving's block for each scheme, in order."""
    from ..metrics.serving_report import serving_block, serving_fields

    exp = cmp.experiment  # type: ignore[attr-defined]
    for rec in cmp.summary.to_dict("records"):  # type: ignore[attr-defined]
        print()
        print(serving_block(serving_fields(rec), rec["scheme"], exp.max_concurrency,
                            exp.rate_per_s))


def _say_start(args: argparse.Namespace, what: str, runs: int, exp: Experiment,
               detail: str) -> None:
    """One line on stderr as a run starts (unless --quiet), terminal or not: how many
    runs of how many requests, on how many processes. A progress bar in requests
    follows on a terminal."""
    if args.quiet:
        return
    from ..experiments.dask_runner import active_runner
    from ..experiments.runner import _n_jobs, task_requests

    per_run = task_requests([(exp, "")])[0]
    runner = active_runner()
    if runner is not None:
        where = ("on a local Dask cluster" if runner.address == "local"
                 else f"on the Dask cluster at {runner.address}")
    else:
        n = _n_jobs(args.jobs, runs)
        where = "in this process" if n == 1 else f"on {n} worker processes"
    print(f"{PROG} {what}: {runs} run{'s' if runs != 1 else ''} ({detail}) of "
          f"{per_run:,} requests each, {runs * per_run:,} in all, {where}",
          file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# figures


def add_figures(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "figures",
        help="regenerate every committed figure and CSV under figures/",
        description=("Run compare and every sweep with their defaults and write their CSVs "
                     "and PNGs (deterministic: same code, same files) to --out."),
    )
    p.add_argument("--out", default="figures", metavar="DIR", type=nonempty("a folder"),
                   help="folder to write (default figures/)")
    p.add_argument("--jobs", type=jobs, default=-1, metavar="N",
                   help="worker processes (joblib), at most one per CPU; -1 = every CPU "
                        "(default -1)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar and no list of files written")
    p.set_defaults(run=run_figures)


def run_figures(args: argparse.Namespace) -> int:
    from ..experiments import make_figures

    _check_out(args)
    paths = make_figures(args.out, jobs=args.jobs, progress=_progress(args),
                         log=None if args.quiet else sys.stderr)
    _report_written(args, paths)
    return 0
