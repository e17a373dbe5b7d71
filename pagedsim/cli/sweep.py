"""``pagedsim sweep NAME``: one experiment swept over block size, request rate, sharing
width, preemption mode, the KV pool's size (prefix-cache hit rate) or a host tier's size
(:mod:`pagedsim.experiments.sweeps`), each sweep with its own defaults and ``--help``.
The options shared with ``compare`` come from :mod:`pagedsim.cli.experiment_options`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from ..models.budget import PAPER_OPT_13B
from .argtypes import csv_list, finite, nonempty
from .base import PROG, UNITS_NOTE, ArgumentParser, CliError
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
from .simulate import _check_out, _check_schemes, _progress, _report_written, _say_start

# --------------------------------------------------------------------------------------
# sweep


#: Experiment fields a sweep sets -> the flag a CLI user would give for them.
_FIELD_FLAGS = {"block_size": "--block-size", "rate_per_s": "--rate", "n": "--n",
                "beam_width": "--beam-width", "preemption": "--preemption",
                "capacity_tokens": "--values", "host_cache_gb": "--host-cache-gb"}
#: Flags that only size the KV pool, which the cache-size sweep sets per run.
_POOL_FLAGS = (("gpu_memory_utilization", "--gpu-memory-utilization"),
               ("activation_gb", "--activation-gb"), ("weights_gb", "--weights-gb"))


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
    from ..experiments.sweeps import CACHE_SCHEMES, default_values_text
    from ..memory.schemes import DEFAULT_SCHEMES

    add_experiment_options(p, _sweep_defaults(name))
    what = {None: "block sizes, rates, n = beam widths for sharing, or KV pool sizes",
            "block-size": "block sizes (slots)", "rate": "request rates (requests/s)",
            "sharing": "n and beam widths (each value is run as both)",
            "preemption": "block sizes (slots), each run with recompute and with swap",
            "cache-size": "KV pool sizes in token slots (the whole pool: running requests "
                          "and cached blocks)",
            "host-cache": "host tier sizes in GiB (0: none), behind the GPU pool"}
    default = ("the sweep's own" if name is None
               else default_values_text(name))
    p.add_argument("--values", type=csv_list(finite, "values"), default=None, metavar="LIST",
                   help=f"comma-separated {what[name]} to sweep (default: {default})")
    if name in (None, "rate"):
        p.add_argument("--schemes", type=csv_list(str), default=None, metavar="LIST",
                       help=f"schemes of the rate sweep (default "
                            f"{','.join(DEFAULT_SCHEMES)}, compare's four; 'pagedsim "
                            "schemes' lists them all)"
                            + ("; of the cache-size sweep (default "
                               f"{','.join(CACHE_SCHEMES)})" if name is None else ""))
    elif name in ("cache-size", "host-cache"):
        p.add_argument("--schemes", type=csv_list(str), default=None, metavar="LIST",
                       help=f"schemes to run (default {','.join(CACHE_SCHEMES)}, the two "
                            "that cache across requests; 'pagedsim schemes' lists them all)")
    p.add_argument("--out", default="figures", metavar="DIR", type=nonempty("a folder"),
                   help="folder for sweep_<name>.csv and PNGs (default figures/)")
    p.add_argument("--no-write", action="store_true", help="write no file")


#: A sweep's extra sentence in its help, where it sets the KV pool itself.
_POOL_NOTE = {"cache-size": "--values sets the whole KV pool (running requests and "
                            "cached blocks) of each run, so the flags that only size it ("
                            + ", ".join(flag for _, flag in _POOL_FLAGS) + ") are refused; "
                            "--model and --gpu still set the context and step times. "}


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
        f"{PAPER_OPT_13B.name} memory setting (with --model or --gpu and no --preset, "
        f"vLLM's defaults, as 'pagedsim budget'); writes sweep_{name.replace('-', '_')}.csv "
        f"and its figures to --out. " + _POOL_NOTE.get(name, "") + UNITS_NOTE + ".", 88)
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
    from ..experiments.sweeps import (
        SWEEP_BEAM_WIDTHS,
        SWEEP_CACHE_TOKENS,
        SWEEP_NS,
        default_values_text,
        num_runs,
    )

    sharing_widths = sorted({*SWEEP_NS, *SWEEP_BEAM_WIDTHS})

    if args.name is None:
        raise CliError(f"missing sweep, choose one of: {', '.join(SWEEPS)}, all "
                       "(see 'pagedsim sweep --help')")
    names = list(SWEEPS) if args.name == "all" else [args.name]
    if args.values is not None and len(names) > 1:
        raise CliError("argument --values: needs one sweep, not all")
    if args.enable_prefix_caching:
        if names != ["rate"]:
            raise CliError(f"argument --enable-prefix-caching: applies to the rate sweep "
                           f"(its schemes run with prefix caching), not {args.name}; the "
                           "cache-size and host-cache sweeps run prefix caches already")
        from ..memory.schemes import DEFAULT_SCHEMES as RATE_SCHEMES

        args.schemes = list(prefix_caching_schemes(args.schemes or RATE_SCHEMES, True))
    if args.schemes is not None:
        if names not in (["rate"], ["cache-size"], ["host-cache"]):
            raise CliError(f"argument --schemes: applies to the rate, cache-size and "
                           f"host-cache sweeps, not {args.name}")
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
        if report is not None and name == "sharing":  # each run sets n or beam_width
            own = sum(1 for r in exp.trace().requests if (r.n, r.beam_width) != (1, 1))
            report += ("; each swept n / beam width given to every request"
                       + (f", replacing the trace's own in {own:,} rows" if own else ""))
        if args.values is not None:
            try:
                values = check_values(name, args.values, exp)
            except ValueError as exc:
                raise CliError(f"argument --values: {exc}") from None
        elif name == "cache-size":  # its default pool sizes must each hold one block
            try:
                check_values(name, SWEEP_CACHE_TOKENS, exp)
            except ValueError:
                raise CliError(
                    f"argument --block-size: a block of {exp.block_size:,} token slots is "
                    "larger than the cache-size sweep's smallest default pool "
                    f"({min(SWEEP_CACHE_TOKENS):,} slots); give pool sizes of one block or "
                    "more with --values") from None
        elif name == "sharing" and args.max_num_seqs is not None:  # n up to 6 by default
            try:
                check_values(name, sharing_widths, exp)
            except ValueError as exc:
                raise CliError(f"argument --max-num-seqs: {exc}; give smaller widths with "
                               "--values") from None
        if name == "rate" and exp.is_trace:  # can the trace take the swept rates at all?
            first = (values or SWEEP_RATES)[0]
            try:
                replace(exp, rate_per_s=first).trace()
            except ValueError as exc:  # the swept rates given, or the trace's own fault
                flag = "--values" if values else "--workload"
                raise CliError(f"argument {flag}: {exc}") from None
        if name in ("cache-size", "host-cache"):  # its replay rows, checked before the runs
            from ..experiments.cache_replay import check_replay_size

            try:
                check_replay_size(exp.requests(), exp.block_size)
            except ValueError as exc:
                source = "--workload" if exp.is_trace else "--num-requests"
                raise CliError(f"argument {source} / --block-size: {exc}") from None
        plans.append((name, exp, values, report))
    _check_out(args)
    from ..experiments.host_sweep import HOST_SCHEMES
    from ..experiments.sweeps import CACHE_SCHEMES
    from ..memory.schemes import DEFAULT_SCHEMES

    # The schemes each sweep runs (--schemes replaces the first three's; the others run
    # paged, their functions' default), so that those without a host tier are named.
    schemes_of = {"rate": DEFAULT_SCHEMES, "cache-size": CACHE_SCHEMES,
                  "host-cache": HOST_SCHEMES}
    say_model_notes(plans[0][1])  # one model for every sweep
    fixed = [s for name, _, _, _ in plans if name != "host-cache"
             for s in args.schemes or schemes_of.get(name, ("paged",))]
    model = plans[0][1].model
    warn_ignored_host_tier(args, list(dict.fromkeys(fixed)), model)  # one line for them all
    if any(name == "host-cache" for name, _, _, _ in plans):
        warn_ignored_host_tier(args, args.schemes or HOST_SCHEMES, model, swept=True)
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
             "preemption": args.preemption is not None, "capacity_tokens": False,
             "host_cache_gb": getattr(args, "host_cache_gb", None) not in (None, 0.0)}
    if name == "cache-size":
        for dest, flag in _POOL_FLAGS:
            if getattr(args, dest) is not None:
                raise CliError(f"argument {flag}: the cache-size sweep sets the KV pool's "
                               "size per run; give the sizes in token slots with --values "
                               "(see 'pagedsim sweep cache-size --help')")
    for field in SWEPT_FIELDS_OF[name]:
        if given[field]:
            flag = _FIELD_FLAGS[field]
            raise CliError(f"argument {flag}: the {name} sweep sets it per run; give the "
                           f"values to sweep with --values (see 'pagedsim sweep {name} "
                           "--help')")


