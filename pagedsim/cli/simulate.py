"""The simulator's main job: ``pagedsim compare``, ``pagedsim sweep`` and
``pagedsim figures`` (see :mod:`pagedsim.experiments`), and the options they share.

Heavy imports (pandas, matplotlib, the experiments) happen inside the ``run_*`` functions,
so ``pagedsim --help`` and ``pagedsim budget`` stay fast.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..budget import BUDGET_PRESETS, PAPER_OPT_13B, get_budget_preset
from ..scheduler import POLICIES, PREEMPTION_MODES
from ..specs import GPUS, MODELS
from ..traces import ON_TOO_LONG, TraceError
from ..units import GiB
from .argtypes import csv_list, finite, gib_to_bytes, jobs, nonempty, preset, rate, whole
from .base import PROG, UNITS_NOTE, ArgumentParser, CliError
from .dask import add_dask_option, with_dask

if TYPE_CHECKING:  # pragma: no cover
    from ..experiments import Experiment


@dataclass(frozen=True)
class OptionDefaults:
    """What the options shared by ``compare`` and ``sweep`` default to for one command,
    as its ``--help`` says: ``None`` for "each sweep's own" (the overview of ``pagedsim
    sweep``). ``swept`` names the options a sweep sets itself, per value it sweeps."""

    command: str
    workload: str | None = None
    num_requests: int | None = None
    rate: float | None = None
    preemption: str | None = None
    swept: tuple[str, ...] = ()
    swept_values: str = ""


#: Said in place of a default that differs from sweep to sweep.
_PER_SWEEP = "default: each sweep's own, see 'pagedsim sweep NAME --help'"


def _default(value: object, unit: str = "") -> str:
    """``"default 5 requests/s"``, or the per-sweep note for None."""
    if value is None:
        return _PER_SWEEP
    return f"default {value:g}{unit}" if isinstance(value, float) else f"default {value}{unit}"


def add_experiment_options(p: argparse.ArgumentParser, defaults: OptionDefaults) -> None:
    """Options shared by ``compare`` and ``sweep``: what to simulate and on what. The
    parsed values of the per-sweep options stay None unless given (the command fills in
    its defaults); ``defaults`` only decides what ``--help`` says."""
    from ..experiments.spec import MAX_NUM_REQUESTS

    d = defaults

    def swept(flag: str, text: str) -> str:
        if flag in d.swept:
            return (f"set per run by the {d.command} sweep, so refused here: give its "
                    f"values with --values (default {d.swept_values})")
        return text

    wl = _default(d.workload)
    p.add_argument("--workload", default=None,
                   metavar="{sharegpt,alpaca,system-prompt,multi-turn,few-shot,PATH}",
                   type=nonempty("sharegpt, alpaca, system-prompt, multi-turn, few-shot or "
                                 "the path of a trace file"),
                   help=f"synthetic ShareGPT-/Alpaca-like lengths; system-prompt, "
                        f"multi-turn or few-shot: prompts that share content (shared system "
                        f"prompts, conversation histories, few-shot examples; "
                        f"pagedsim.sharing_workloads); or a trace file (Azure "
                        f"2023 CSV or pagedsim CSV/JSONL; its arrival times are used, "
                        f"rebased to the first row's when they are wall-clock readings) "
                        f"({wl}). With a trace, a one-line report of what loading "
                        f"changed or left out is printed above the table (on stderr with "
                        f"--json, whose stdout stays a list of rows)")
    paper = PAPER_OPT_13B
    p.add_argument("--preset", default=None, metavar="NAME",
                   type=preset("preset", BUDGET_PRESETS),
                   help=f"named memory setting: model, GPUs, memory utilization and "
                        f"activations (default {paper.name}: {paper.source}, "
                        f"{paper.budget().max_tokens:,} KV slots; 'pagedsim budget --preset "
                        f"{paper.name}' shows the arithmetic). The flags below override "
                        f"its parts")
    p.add_argument("--model", default=None, metavar="NAME", type=preset("model", MODELS),
                   help=f"model preset, one of: {', '.join(MODELS)}, any case (default "
                        f"the preset's, {paper.model})")
    p.add_argument("--gpu", default=None, metavar="NAME", type=preset("gpu", GPUS),
                   help=f"GPU preset, one of: {', '.join(GPUS)}, any case (default the "
                        f"preset's, {paper.gpu})")
    p.add_argument("--num-gpus", type=whole, default=None, metavar="N",
                   help=f"GPUs the model is sharded over (default the preset's, "
                        f"{paper.num_gpus})")
    p.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="FRACTION",
                   help=f"fraction of GPU memory the engine claims (default the preset's, "
                        f"{paper.gpu_memory_utilization:g}: the paper's Table 1 arithmetic; "
                        f"vLLM's own default is 0.9)")
    p.add_argument("--activation-gb", type=gib_to_bytes, default=None, metavar="GIB",
                   help=f"activation memory in GiB (default the preset's, "
                        f"{paper.activation_bytes / GiB:g}: with OPT-13B on an A100-40GB "
                        f"this leaves the paper's 12 GiB = {paper.budget().max_tokens:,} KV "
                        f"slots)")
    p.add_argument("--weights-gb", type=gib_to_bytes, default=None, metavar="GIB",
                   help="weights in GiB (default: the model preset's)")
    rate_text = (f"{_default(d.rate, ' requests/s')}"
                 + (", which saturates every scheme; see pagedsim.experiments"
                    if d.command == "compare" else ""))
    p.add_argument("--rate", type=rate, default=None, metavar="REQ_PER_S",
                   help=swept("--rate",
                              f"Poisson arrival rate in requests/s ({rate_text}); for a "
                              "trace: rescale its arrival gaps (all by one factor) to this "
                              "mean rate (default: the recorded times)"))
    nr = _default(None if d.num_requests is None else f"{d.num_requests:,}")
    p.add_argument("--num-requests", type=whole, default=None, metavar="N",
                   help=f"requests to simulate ({nr}; at most {MAX_NUM_REQUESTS:,}); "
                        "for a trace: its first N (default: all)")
    p.add_argument("--on-too-long", default=None, choices=ON_TOO_LONG, metavar="{clip,skip,error}",
                   help="trace rows longer than the model's max_model_len: clip them (the "
                        "prompt to at most max_model_len - 1 tokens, then the output to what "
                        "is left), skip them, or stop with an error naming the line; clipped "
                        "or skipped rows are counted in the report (default clip)")
    p.add_argument("--skip-zero-output", action="store_true",
                   help="skip trace rows with 0 output tokens (the Azure trace has some; "
                        "counted in the report) instead of stopping with an error")
    p.add_argument("--block-size", type=whole, default=16, metavar="TOKENS",
                   help=swept("--block-size", "token slots per KV block (default 16)"))
    p.add_argument("--n", type=whole, default=1, metavar="N",
                   help=swept("--n", "parallel samples per request (default 1)"))
    p.add_argument("--beam-width", type=whole, default=1, metavar="K",
                   help=swept("--beam-width",
                              "beam-search width per request (default 1: no beam search)"))
    pre = _default(d.preemption)
    p.add_argument("--preemption", default=None, metavar="{recompute,swap}",
                   choices=PREEMPTION_MODES,
                   help=swept("--preemption",
                              f"what to do with a preempted request ({pre}). Under "
                              "recompute, a request of several sequences (--n, "
                              "--beam-width) is swapped to the CPU all the same, as vLLM "
                              "v0 does, so that it keeps its sharing"))
    p.add_argument("--policy", default="v0", choices=POLICIES,
                   help="scheduling policy: v0 (default, the paper's vLLM: a step prefills "
                        "or decodes) or chunked (vLLM v1: decodes first, prompts split "
                        "into chunks that fill the token budget)")
    p.add_argument("--swap-gb", type=gib_to_bytes, default=4 * GiB, metavar="GIB",
                   help="CPU swap space in GiB for preemption by swap (default 4, vLLM's)")
    p.add_argument("--seed", type=whole, default=0, metavar="SEED",
                   help="seed of the workload and of beam search (default 0)")
    p.add_argument("--jobs", type=jobs, default=-1, metavar="N",
                   help="worker processes (joblib, or the workers of --dask local); -1 = "
                        "every CPU, 1 = no subprocess (default -1)")
    add_dask_option(p)
    p.add_argument("--quiet", action="store_true",
                   help="no start line, no progress bar and no list of files written")


def memory_setting(args: argparse.Namespace) -> dict[str, object]:
    """The memory fields of an :class:`~pagedsim.experiments.Experiment`: ``--preset``
    (default :data:`pagedsim.budget.PAPER_OPT_13B`), each part overridden by its flag."""
    chosen = get_budget_preset(args.preset) if args.preset else PAPER_OPT_13B

    def pick(value: object, default: object) -> object:
        return default if value is None else value

    return dict(
        model=pick(args.model, chosen.model), gpu=pick(args.gpu, chosen.gpu),
        num_gpus=pick(args.num_gpus, chosen.num_gpus),
        gpu_memory_utilization=pick(args.gpu_memory_utilization,
                                    chosen.gpu_memory_utilization),
        activation_bytes=pick(args.activation_gb, chosen.activation_bytes),
        weights_bytes=pick(args.weights_gb, chosen.weights_bytes),
    )


def experiment(args: argparse.Namespace, workload: str | None = None,
               num_requests: int | None = None, rate: float | None = None,
               preemption: str = "recompute") -> Experiment:
    """Build a :class:`pagedsim.experiments.Experiment` from the shared options.

    ``workload``, ``num_requests``, ``rate`` and ``preemption`` are the command's
    defaults (``num_requests`` and ``rate`` for a synthetic workload only: a trace takes
    only the flags, its first ``--num-requests``, rescaled to ``--rate``). The trace
    file itself is read by :func:`check_trace`.
    """
    from ..experiments import WORKLOAD_NAMES, Experiment

    workload = args.workload or workload or "sharegpt"
    fields = dict(
        **memory_setting(args),
        workload=workload, seed=args.seed, n=args.n, beam_width=args.beam_width,
        block_size=args.block_size, preemption=args.preemption or preemption,
        policy=args.policy,
        swap_bytes=args.swap_gb, on_too_long=args.on_too_long or "clip",
        skip_zero_output=args.skip_zero_output,
    )
    if workload in WORKLOAD_NAMES:
        for flag, given in (("--on-too-long", args.on_too_long is not None),
                            ("--skip-zero-output", args.skip_zero_output)):
            if given:
                raise CliError(f"argument {flag}: applies to a trace file, not the "
                               f"synthetic workload {workload!r}")
        rate = args.rate if args.rate is not None else rate
        num_requests = args.num_requests if args.num_requests is not None else num_requests
    else:
        rate, num_requests = args.rate, args.num_requests
    if rate is not None:
        fields["rate_per_s"] = rate
    if num_requests is not None:
        fields["num_requests"] = num_requests
    return Experiment(**fields)  # first: is --workload a name or a file at all?


#: Library parameter names in trace errors -> the flags a CLI user types.
_TRACE_FLAG_NAMES = (("skip_zero_output=True", "--skip-zero-output"),
                     ("pass on_too_long='clip' or 'skip'", "pass --on-too-long clip or skip"))


def check_trace(exp: Experiment) -> str | None:
    """Read the trace once now, so a bad file (or a ``--rate`` it cannot take) fails
    before any simulation; return its one-line report (None for a synthetic workload).
    The runs read it again in their worker processes, which print nothing."""
    if not exp.is_trace:
        return None
    try:
        return exp.trace_report()
    except (TraceError, OSError, csv.Error) as exc:
        # The trace reader's messages name the file (and the line); OSError's too.
        message = " ".join(str(exc).split()) or type(exc).__name__
        for name, flag in _TRACE_FLAG_NAMES:
            message = message.replace(name, flag)
        raise CliError(f"argument --workload: {message}") from None
    except ValueError as exc:  # a rate the trace cannot take (Experiment.trace)
        raise CliError(f"argument --rate: {exc}") from None


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


def _check_out(args: argparse.Namespace) -> None:
    """``--out`` must be a folder this process can create or write in; checked before the
    run, so a typo does not cost a whole simulation."""
    if getattr(args, "no_write", False):
        return
    # Paths are shown whole (not cut short like other values): a path is what the user
    # needs to see to find the file in the way.
    path = Path(args.out).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        what = "exists" if existing == path else f"is under the file {str(existing)!r}"
        raise CliError(f"argument --out: {args.out!r} {what} and is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CliError(f"argument --out: cannot write in {str(existing)!r}")


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
    from ..schemes import DEFAULT_SCHEMES

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
            f"{PAPER_OPT_13B.budget().max_tokens:,} KV slots), {DEFAULT_NUM_REQUESTS:,} "
            f"ShareGPT-like requests at {DEFAULT_RATE:g} req/s. Writes CSVs and PNGs to "
            "--out. " + UNITS_NOTE + "."
        ),
    )
    add_experiment_options(p, OptionDefaults("compare", "sharegpt", DEFAULT_NUM_REQUESTS,
                                             DEFAULT_RATE, "recompute"))
    p.add_argument("--schemes", type=csv_list(str), default=list(DEFAULT_SCHEMES),
                   metavar="LIST",
                   help=f"comma-separated schemes (default {','.join(DEFAULT_SCHEMES)}); "
                        "'pagedsim schemes' lists them all")
    p.add_argument("--part", choices=("saturated", "all"), default="saturated",
                   help="shares over the saturated steps (requests waiting; the default, as "
                        "the paper's Figure 2) or the whole run")
    p.add_argument("--out", default="figures", metavar="DIR", type=nonempty("a folder"),
                   help="folder for compare_summary.csv, compare_steps.csv and PNGs "
                        "(default figures/)")
    p.add_argument("--no-write", action="store_true", help="write no file")
    p.add_argument("--max-step-rows", type=whole, default=1000, metavar="N",
                   help="per-step CSV: keep every k-th step so at most N rows per scheme "
                        "remain (0 = every step; default 1000)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON list of rows (scheme, the five shares as fractions "
                        "summing to 1, mean_batch_size, throughput_tokens_per_s, "
                        "preemptions, ...) instead of the table")
    p.set_defaults(run=with_dask(run_compare))


def run_compare(args: argparse.Namespace) -> int:
    from ..experiments import compare, compare_table, json_rows, write_compare

    if args.max_step_rows < 0:
        raise ValueError(f"--max-step-rows must be >= 0, got {args.max_step_rows}")
    schemes = _check_schemes(args.schemes)
    exp = experiment(args)
    report = check_trace(exp)
    _check_out(args)
    _say_start(args, "compare", len(schemes), exp, "one per scheme")
    cmp = compare(exp, schemes, jobs=args.jobs, progress=_progress(args),
                  keep_steps=not args.no_write, part=args.part)
    if args.json:
        _say_report(report, to_stderr=True)
        print(json.dumps(json_rows(cmp), indent=1))
    else:
        print(compare_table(cmp, workload_report=report))
    if not args.no_write:
        _report_written(args, write_compare(cmp, args.out, max_step_rows=args.max_step_rows))
    return 0


# --------------------------------------------------------------------------------------
# sweep


#: Experiment fields a sweep sets -> the flag a CLI user would give for them.
_FIELD_FLAGS = {"block_size": "--block-size", "rate_per_s": "--rate", "n": "--n",
                "beam_width": "--beam-width", "preemption": "--preemption"}


def _sweep_defaults(name: str | None) -> OptionDefaults:
    """What the shared options default to in sweep ``name`` (None: the overview)."""
    from ..experiments.sweeps import (
        SWEEP_DEFAULT_WORKLOAD,
        SWEEP_NUM_REQUESTS,
        SWEEP_PREEMPTION,
        SWEEP_RATE,
        SWEPT_FIELDS_OF,
        default_values_text,
    )

    if name is None:
        return OptionDefaults("sweep")
    swept = tuple(_FIELD_FLAGS[f] for f in SWEPT_FIELDS_OF[name])
    return OptionDefaults(
        name, workload=SWEEP_DEFAULT_WORKLOAD[name], num_requests=SWEEP_NUM_REQUESTS[name],
        rate=None if name == "rate" else SWEEP_RATE[name],
        preemption=SWEEP_PREEMPTION[name], swept=swept,
        swept_values=default_values_text(name))


def _sweep_overview() -> str:
    """``pagedsim sweep --help``'s description: every sweep with its own defaults."""
    import textwrap

    from ..experiments.sweeps import SWEEP_ABOUT, SWEEPS, default_values_text

    intro = textwrap.fill(
        "Run one configuration per swept value (in parallel processes, joblib; on a Dask "
        "cluster with --dask ADDRESS) and write a CSV and PNG curves to --out. Each "
        "sweep has its own defaults, listed here; 'pagedsim sweep NAME --help' gives "
        "one sweep's options with its defaults. 'all' runs every sweep. "
        + UNITS_NOTE + ".", 88)
    lines = [intro, "", "sweeps:"]
    for name in SWEEPS:
        d = _sweep_defaults(name)
        at = "" if d.rate is None else f" at {d.rate:g} requests/s"
        text = (f"{SWEEP_ABOUT[name]}. Runs {default_values_text(name)}; each "
                f"{_load(d.workload)} of {d.num_requests:,} requests{at}, preemption by "
                f"{d.preemption}.")
        lines.append(textwrap.fill(text, 88, initial_indent=f"  {name:<12}",
                                   subsequent_indent=" " * 14))
    return "\n".join(lines)


def _load(workload: str | None) -> str:
    """``"sharegpt"`` -> ``"a ShareGPT-like load"``."""
    names = {"sharegpt": "a ShareGPT-like load", "alpaca": "an Alpaca-like load",
             "system-prompt": "a shared-system-prompt load",
             "multi-turn": "a multi-turn conversation load", "few-shot": "a few-shot load"}
    return names.get(str(workload), f"the trace {workload}")


class _SweepHelp(argparse.Action):
    """``-h/--help`` of ``pagedsim sweep``: after a sweep's name (``pagedsim sweep rate
    --help``), that sweep's own help, with its defaults; otherwise the overview."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: object = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from ..experiments.sweeps import SWEEPS

        name = getattr(namespace, "name", None)
        (sweep_parser(name) if name in SWEEPS else parser).print_help()
        parser.exit()


def _add_sweep_options(p: argparse.ArgumentParser, name: str | None) -> None:
    """The options of ``pagedsim sweep`` (``name`` None) or of one sweep's help."""
    from ..experiments.sweeps import default_values_text
    from ..schemes import DEFAULT_SCHEMES

    add_experiment_options(p, _sweep_defaults(name))
    what = {None: "block sizes, rates, or n = beam widths for sharing",
            "block-size": "block sizes (slots)", "rate": "request rates (requests/s)",
            "sharing": "n and beam widths (each value is run as both)",
            "preemption": "block sizes (slots), each run with recompute and with swap"}
    default = ("the sweep's own" if name is None
               else default_values_text(name))
    p.add_argument("--values", type=csv_list(finite), default=None, metavar="LIST",
                   help=f"comma-separated {what[name]} to sweep (default: {default})")
    if name in (None, "rate"):
        p.add_argument("--schemes", type=csv_list(str), default=None, metavar="LIST",
                       help=f"schemes of the rate sweep (default "
                            f"{','.join(DEFAULT_SCHEMES)}, compare's four; 'pagedsim "
                            "schemes' lists them all)")
    p.add_argument("--out", default="figures", metavar="DIR", type=nonempty("a folder"),
                   help="folder for sweep_<name>.csv and PNGs (default figures/)")
    p.add_argument("--no-write", action="store_true", help="write no file")


def sweep_parser(name: str) -> ArgumentParser:
    """A parser whose ``--help`` is sweep ``name``'s: what it shows, the values it runs
    and every option with this sweep's own default (``pagedsim sweep NAME --help``)."""
    import textwrap

    from ..experiments.sweeps import SWEEP_ABOUT, default_values_text

    d = _sweep_defaults(name)
    at = "" if d.rate is None else f" at {d.rate:g} requests/s"
    description = textwrap.fill(
        f"pagedsim sweep {name}: {SWEEP_ABOUT[name]}. By default it runs "
        f"{default_values_text(name)} (set them with --values), each on "
        f"{_load(d.workload)} of {d.num_requests:,} requests{at}, preemption by "
        f"{d.preemption}, in the "
        f"{PAPER_OPT_13B.name} memory setting; writes sweep_{name.replace('-', '_')}.csv "
        f"and its figures to --out. " + UNITS_NOTE + ".", 88)
    p = ArgumentParser(prog=f"{PROG} sweep {name}", description=description,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_sweep_options(p, name)
    return p


def add_sweep(subparsers: argparse._SubParsersAction) -> None:
    from ..experiments.sweeps import SWEEPS

    names = ", ".join(SWEEPS)
    p = subparsers.add_parser(
        "sweep", add_help=False,
        help="sweep block size, request rate, n / beam width, or swap vs recompute",
        description=_sweep_overview(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-h", "--help", action=_SweepHelp,
                   help="show this help (after a sweep's name: that sweep's) and exit")
    p.add_argument("name", choices=[*SWEEPS, "all"], metavar="SWEEP", nargs="?",
                   default=None, help=f"which sweep: {names}, or all of them")
    _add_sweep_options(p, None)
    p.set_defaults(run=with_dask(run_sweep))


def run_sweep(args: argparse.Namespace) -> int:
    from ..experiments import (
        SWEEP_RATES,
        SWEEPS,
        check_values,
        run_sweep_on,
        sweep_base,
        sweep_table,
        write_sweep,
    )
    from ..experiments.sweeps import default_values_text, num_runs

    if args.name is None:
        raise CliError(f"missing sweep, choose one of: {', '.join(SWEEPS)}, all "
                       "(see 'pagedsim sweep --help')")
    names = list(SWEEPS) if args.name == "all" else [args.name]
    if args.values is not None and len(names) > 1:
        raise CliError("argument --values: needs one sweep, not all")
    if args.schemes is not None:
        if names != ["rate"]:
            raise CliError(f"argument --schemes: applies to the rate sweep, not {args.name}")
        _check_schemes(args.schemes)
    if len(names) == 1:
        _refuse_swept_flags(args, names[0])
    # Every check before the first run: a sweep that would fail must not cost the others.
    plans = []
    for name in names:
        exp = sweep_base(name, lambda **kw: experiment(args, **kw))
        values = None
        # The rate sweep rescales a trace to each rate: report it as loaded.
        report = check_trace(replace(exp, rate_per_s=None) if name == "rate" else exp)
        if report is not None and name == "rate":
            report += "; arrivals rescaled to each swept rate (every gap by one factor)"
        if args.values is not None:
            try:
                values = check_values(name, args.values, exp)
            except ValueError as exc:
                raise CliError(f"argument --values: {exc}") from None
        if name == "rate" and exp.is_trace:  # can the trace take the swept rates at all?
            first = (values or SWEEP_RATES)[0]
            try:
                replace(exp, rate_per_s=first).trace()
            except ValueError as exc:
                raise CliError(f"argument --values: {exc}") from None
        plans.append((name, exp, values, report))
    _check_out(args)
    for name, exp, values, report in plans:
        runs = num_runs(name, values, args.schemes)
        base = replace(exp, rate_per_s=None) if name == "rate" and exp.is_trace else exp
        _say_start(args, f"sweep {name}", runs, base, f"{default_values_text(name)}"
                   if values is None else "values " + ", ".join(f"{v:g}" for v in values))
        df = run_sweep_on(name, exp, values=values, schemes=args.schemes, jobs=args.jobs,
                          progress=_progress(args))
        print(sweep_table(name, df, workload_report=report))
        print()
        if not args.no_write:
            _report_written(args, write_sweep(name, df, args.out, experiment=exp))
    return 0


def _refuse_swept_flags(args: argparse.Namespace, name: str) -> None:
    """A flag the named sweep sets per run would be silently overridden: refuse it."""
    from ..experiments.sweeps import SWEPT_FIELDS_OF

    given = {"block_size": args.block_size != 16, "rate_per_s": args.rate is not None,
             "n": args.n != 1, "beam_width": args.beam_width != 1,
             "preemption": args.preemption is not None}
    for field in SWEPT_FIELDS_OF[name]:
        if given[field]:
            flag = _FIELD_FLAGS[field]
            raise CliError(f"argument {flag}: the {name} sweep sets it per run; give the "
                           f"values to sweep with --values (see 'pagedsim sweep {name} "
                           "--help')")


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
        description=(
            "Run compare and every sweep with their defaults and write their CSVs and PNGs "
            "(deterministic: same code, same files) to --out."
        ),
    )
    p.add_argument("--out", default="figures", metavar="DIR", type=nonempty("a folder"),
                   help="folder to write (default figures/)")
    p.add_argument("--jobs", type=jobs, default=-1, metavar="N",
                   help="worker processes (joblib); -1 = every CPU (default -1)")
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
