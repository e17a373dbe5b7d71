"""pagedsim's command line: ``pagedsim <command> [options]`` (or ``python -m pagedsim``).

Commands:

- ``budget``  the KV-cache memory budget of one model on one or more GPUs (vLLM's start-up
  arithmetic): bytes per token, bytes per sequence, the pool, its blocks and token slots.
- ``models``  the model presets (``pagedsim.MODELS``).
- ``gpus``    the GPU presets (``pagedsim.GPUS``).
- ``compare`` one workload through every scheme: shares of the KV pool, batch size,
  throughput, beside the vLLM paper's Figure 2 / Figure 13 (:mod:`pagedsim.experiments`).
- ``sweep``   block size, request rate, n / beam width, swap vs recompute.
- ``figures`` regenerate every committed figure under ``figures/``.

Units: every "GB" in a flag or in the output is a binary gigabyte, 1 GiB = 2**30 bytes
(as ``nvidia-smi`` and the vLLM paper's arithmetic count; see :mod:`pagedsim.units`).

Adding a command (keep this module light: import heavy things inside ``_run_<cmd>``, since
``import pagedsim.cli`` must never pull in torch, triton or matplotlib):

1. write ``_add_<cmd>(subparsers)``: it calls ``subparsers.add_parser("<cmd>", ...)``, adds the
   options, and ends with ``parser.set_defaults(run=_run_<cmd>)``;
2. write ``_run_<cmd>(args) -> int``: it does the work, prints, and returns the exit status;
   bad input raises ``ValueError``/``TypeError`` (or a :class:`pagedsim.PagedSimError`),
   which :func:`main` turns into one line ``pagedsim: error: <message>`` and exit status 2;
3. append ``_add_<cmd>`` to :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict

from . import __version__
from .budget import KVBudget, kv_budget
from .errors import PagedSimError
from .specs import GPUS, MODELS, get_gpu, get_model
from .units import GiB, KiB, MiB

PROG = "pagedsim"
#: Exit status for bad input or usage (argparse's convention).
EXIT_USAGE = 2
UNITS_NOTE = "GB here means GiB: 1 GiB = 2**30 bytes"


class CliError(Exception):
    """A usage error found while parsing the command line (one line, exit status 2)."""


class _ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`CliError` instead of printing usage and
    exiting, so that :func:`main` reports every error the same way: one line, status 2."""

    #: The subcommands' names, filled in by :func:`build_parser`.
    command_names: tuple[str, ...] = ()

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = f"see '{self.prog} --help'"
        raise CliError(f"{message} ({hint})")


# --------------------------------------------------------------------------------------
# Argument types: they turn a flag's text into a value, or raise naming the flag's text.
# Ranges that the library checks (block size >= 1, utilization in (0, 1]) are left to it,
# so each rule lives in one place.


def _gib_to_bytes(text: str) -> int:
    """A size in GiB (``"40"``, ``"12.5"``) -> bytes (int); finite and >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GiB: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite size >= 0 GiB, got {text!r}")
    return round(value * GiB)


# --------------------------------------------------------------------------------------
# Formatting helpers (numbers computed, never typed in).


def _num(x: float, decimals: int = 2) -> str:
    """``32.0 -> '32'``, ``12.5 -> '12.5'``, ``0.333333 -> '0.33'``: at most ``decimals``."""
    text = f"{x:.{decimals}f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _gib(num_bytes: float) -> str:
    """Bytes as GiB with at most two decimals: ``42949672960 -> '40 GiB'`` (two significant
    digits below 0.01 GiB, so a small non-zero size never prints as 0)."""
    value = num_bytes / GiB
    if 0 < abs(value) < 0.01:
        return f"{value:.2g} GiB"
    return f"{_num(value)} GiB"


def _size(num_bytes: float) -> str:
    """Bytes in the largest binary unit (KiB, MiB, GiB) that keeps the value >= 1."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(num_bytes) >= scale:
            return f"{_num(num_bytes / scale)} {unit}"
    return f"{_num(num_bytes)} bytes"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        parts = [row[0].ljust(widths[0]), *rest]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


# --------------------------------------------------------------------------------------
# budget


def _add_budget(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "budget",
        help="KV-cache budget: bytes per token, pool size, blocks and token slots",
        description=(
            "How much KV cache a model gets on a GPU, as vLLM computes it at start-up: "
            "kv = total GPU memory x utilization - weights - activations; "
            "num_blocks = kv // (block_size x bytes per token). " + UNITS_NOTE + "."
        ),
    )
    p.add_argument("--model", required=True, metavar="NAME",
                   help=f"model preset, one of: {', '.join(MODELS)}")
    p.add_argument("--gpu", required=True, metavar="NAME",
                   help=f"GPU preset, one of: {', '.join(GPUS)}")
    p.add_argument("--weights-gb", type=_gib_to_bytes, default=None, metavar="GIB",
                   help="weights across all GPUs, in GiB (2**30 bytes); "
                        "default: the model preset's")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="FRACTION",
                   help="fraction of GPU memory the engine claims, in (0, 1] (default 0.9)")
    p.add_argument("--activation-gb", type=_gib_to_bytes, default=0, metavar="GIB",
                   help="peak activation and other non-KV memory across all GPUs, in GiB "
                        "(default 0)")
    p.add_argument("--block-size", type=int, default=16, metavar="TOKENS",
                   help="token slots per KV block (default 16, as in vLLM)")
    p.add_argument("--num-gpus", type=int, default=1, metavar="N",
                   help="GPUs the model is sharded over; memory and KV cache add up (default 1)")
    p.add_argument("--seq-len", type=int, default=1024, metavar="TOKENS",
                   help="sequence length for the per-sequence example line (default 1024)")
    p.add_argument("--json", action="store_true",
                   help="print the budget's fields as one JSON object (sizes in bytes)")
    p.set_defaults(run=_run_budget)


def _budget_text(b: KVBudget, seq_len: int) -> str:
    """The budget, one computed step per line, in binary units."""
    model = get_model(b.model)
    gpu = get_gpu(b.gpu)
    gpus = f"{b.num_gpus} x {gpu.name}"
    total = _gib(gpu.memory_bytes) if b.num_gpus == 1 else (
        f"{b.num_gpus} x {_gib(gpu.memory_bytes)}"
    )
    seq_bytes = seq_len * b.bytes_per_token
    full_len = model.max_model_len
    lines = [
        f"KV-cache budget: {b.model} on {gpus} (1 GiB = 2**30 bytes, 1 KiB = 1024 bytes)",
        "",
        f"bytes per token = 2 (K and V) x {model.num_layers} layers x {model.num_kv_heads} "
        f"kv heads x {model.head_dim} head_dim x {model.dtype_bytes} bytes "
        f"= {b.bytes_per_token} bytes = {_size(b.bytes_per_token)} per token",
        f"one {seq_len}-token sequence = {seq_len} x {_size(b.bytes_per_token)} "
        f"= {_size(seq_bytes)}",
        f"KV cache = {total} x {b.gpu_memory_utilization:g} - {_gib(b.weights_bytes)} weights "
        f"- {_gib(b.activation_bytes)} activations = {_gib(b.kv_cache_bytes)} of KV cache",
        f"block = {b.block_size} tokens x {_size(b.bytes_per_token)} "
        f"= {_size(b.bytes_per_block)}",
        f"num_blocks = {_gib(b.kv_cache_bytes)} // {_size(b.bytes_per_block)} "
        f"= {b.num_blocks} blocks of {b.block_size} = {b.max_tokens} token slots",
        f"that is {b.max_tokens // seq_len} sequences of {seq_len} tokens, or "
        f"{b.max_tokens // full_len} of max_model_len {full_len} tokens",
    ]
    unused = b.kv_cache_bytes - b.num_blocks * b.bytes_per_block
    if unused:
        lines.append(f"left over (less than one block): {_size(unused)} ({unused} bytes)")
    if b.num_blocks == 0:
        lines.append("warning: the KV cache is smaller than one block; nothing can be served")
    return "\n".join(lines)


def _run_budget(args: argparse.Namespace) -> int:
    if args.seq_len < 1:
        raise ValueError(f"--seq-len must be >= 1, got {args.seq_len!r}")
    b = kv_budget(
        args.model,
        args.gpu,
        weights_bytes=args.weights_gb,
        gpu_memory_utilization=args.gpu_memory_utilization,
        activation_bytes=args.activation_gb,
        block_size=args.block_size,
        num_gpus=args.num_gpus,
    )
    if args.json:
        print(json.dumps(b.to_dict(), indent=2))
    else:
        print(_budget_text(b, args.seq_len))
    return 0


# --------------------------------------------------------------------------------------
# models, gpus


def _add_models(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("models", help="list the model presets",
                              description="The model presets. " + UNITS_NOTE + ".")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per preset name (sizes in bytes)")
    p.set_defaults(run=_run_models)


def _run_models(args: argparse.Namespace) -> int:
    if args.json:
        out = {name: {**asdict(m), "bytes_per_token": m.bytes_per_token}
               for name, m in MODELS.items()}
        print(json.dumps(out, indent=2))
        return 0
    headers = ["model", "layers", "heads", "kv heads", "head_dim", "dtype bytes",
               "weights (GiB)", "KV per token", "max_model_len"]
    rows = [[m.name, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim, m.dtype_bytes,
             _num(m.weights_bytes / GiB), _size(m.bytes_per_token), m.max_model_len]
            for m in MODELS.values()]
    print(_table(headers, rows))
    return 0


def _add_gpus(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("gpus", help="list the GPU presets",
                              description="The GPU presets. " + UNITS_NOTE + ".")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per preset name (bytes, bytes/s, flop/s)")
    p.set_defaults(run=_run_gpus)


def _run_gpus(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({name: asdict(g) for name, g in GPUS.items()}, indent=2))
        return 0
    headers = ["gpu", "memory (GiB)", "HBM (TB/s)", "fp16 dense (TFLOP/s)"]
    rows = [[g.name, _num(g.memory_bytes / GiB), _num(g.hbm_bytes_per_s / 1e12, 3),
             _num(g.peak_flops_per_s / 1e12)] for g in GPUS.values()]
    print(_table(headers, rows))
    print("\nmemory as nvidia-smi reports it; bandwidth (1 TB/s = 10**12 bytes/s) and "
          "peak flop/s from NVIDIA's datasheets")
    return 0


# --------------------------------------------------------------------------------------
# compare, sweep, figures: the simulator's main job (see pagedsim.experiments)


def _rate(text: str) -> float:
    """A request rate in requests/s: a number > 0, or ``inf`` (all at t = 0)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a rate in requests/s: {text!r}") from None
    if math.isnan(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 requests/s (or inf), got {text!r}")
    return value


def _csv_list(kind: Callable[[str], object]) -> Callable[[str], list]:
    """An argument type for comma-separated values, each converted by ``kind``."""

    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        try:
            return [kind(t) for t in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad value in list {text!r}") from None

    return parse


def _add_experiment_options(p: argparse.ArgumentParser, workload_default: str | None,
                            num_requests_default: int | None) -> None:
    """Options shared by ``compare`` and ``sweep``: what to simulate and on what."""
    from .experiments import DEFAULT_NUM_REQUESTS, DEFAULT_RATE

    wl = workload_default or "per sweep"
    p.add_argument("--workload", default=workload_default, metavar="{sharegpt,alpaca,PATH}",
                   help=f"synthetic ShareGPT-/Alpaca-like lengths, or a trace file (Azure "
                        f"2023 CSV or pagedsim CSV/JSONL; its arrival times are used) "
                        f"(default {wl})")
    p.add_argument("--model", default="opt-13b", metavar="NAME",
                   help=f"model preset, one of: {', '.join(MODELS)} (default opt-13b)")
    p.add_argument("--gpu", default="a100-40gb", metavar="NAME",
                   help=f"GPU preset, one of: {', '.join(GPUS)} (default a100-40gb)")
    p.add_argument("--num-gpus", type=int, default=1, metavar="N",
                   help="GPUs the model is sharded over (default 1)")
    p.add_argument("--gpu-memory-utilization", type=float, default=1.0, metavar="FRACTION",
                   help="fraction of GPU memory the engine claims (default 1.0, the paper's "
                        "Table 1 arithmetic)")
    p.add_argument("--activation-gb", type=_gib_to_bytes, default=2 * GiB, metavar="GIB",
                   help="activation memory in GiB (default 2: with OPT-13B on an A100-40GB "
                        "this leaves the paper's 12 GiB = 15,728 KV slots)")
    p.add_argument("--weights-gb", type=_gib_to_bytes, default=None, metavar="GIB",
                   help="weights in GiB (default: the model preset's)")
    p.add_argument("--rate", type=_rate, default=None, metavar="REQ_PER_S",
                   help=f"Poisson arrival rate in requests/s (default {DEFAULT_RATE:g} for "
                        "compare, which saturates every scheme; see pagedsim.experiments); "
                        "not for traces")
    nr = num_requests_default or DEFAULT_NUM_REQUESTS
    p.add_argument("--num-requests", type=int, default=None, metavar="N",
                   help=f"requests to simulate (default {nr}); not for traces")
    p.add_argument("--block-size", type=int, default=16, metavar="TOKENS",
                   help="token slots per KV block (default 16)")
    p.add_argument("--n", type=int, default=1, metavar="N",
                   help="parallel samples per request (default 1)")
    p.add_argument("--beam-width", type=int, default=1, metavar="K",
                   help="beam-search width per request (default 1: no beam search)")
    p.add_argument("--preemption", default=None, metavar="{recompute,swap}",
                   help="what to do with a preempted request (default recompute; the "
                        "sharing sweep swaps, as vLLM does for multi-sequence groups)")
    p.add_argument("--swap-gb", type=_gib_to_bytes, default=4 * GiB, metavar="GIB",
                   help="CPU swap space in GiB for --preemption swap (default 4, vLLM's)")
    p.add_argument("--seed", type=int, default=0, metavar="SEED",
                   help="seed of the workload and of beam search (default 0)")
    p.add_argument("--jobs", type=int, default=-1, metavar="N",
                   help="worker processes (joblib); -1 = every CPU, 1 = no subprocess "
                        "(default -1)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar and no list of files written")


def _experiment(args: argparse.Namespace, workload: str | None = None,
                num_requests: int | None = None, rate: float | None = None,
                preemption: str = "recompute"):
    """Build a :class:`pagedsim.experiments.Experiment` from the shared options."""
    from .experiments import WORKLOAD_NAMES, Experiment

    workload = args.workload or workload or "sharegpt"
    fields = dict(
        model=args.model, gpu=args.gpu, num_gpus=args.num_gpus,
        gpu_memory_utilization=args.gpu_memory_utilization,
        activation_bytes=args.activation_gb, weights_bytes=args.weights_gb,
        workload=workload, seed=args.seed, n=args.n, beam_width=args.beam_width,
        block_size=args.block_size, preemption=args.preemption or preemption,
        swap_bytes=args.swap_gb,
    )
    if workload not in WORKLOAD_NAMES:
        for flag, value in (("--rate", args.rate), ("--num-requests", args.num_requests)):
            if value is not None:
                raise ValueError(f"{flag} does not apply to a trace ({workload}): its rows "
                                 "give the requests and their arrival times")
    if args.rate is not None or rate is not None:
        fields["rate_per_s"] = args.rate if args.rate is not None else rate
    if args.num_requests is not None or num_requests is not None:
        fields["num_requests"] = (args.num_requests if args.num_requests is not None
                                  else num_requests)
    return Experiment(**fields)


def _progress(args: argparse.Namespace) -> bool:
    """A progress bar only on a terminal and without --quiet."""
    return not args.quiet and sys.stderr.isatty()


def _report_written(args: argparse.Namespace, paths: Sequence[object]) -> None:
    if not args.quiet:
        for path in paths:
            print(f"wrote {path}", file=sys.stderr)


def _add_compare(subparsers: argparse._SubParsersAction) -> None:
    from .schemes import DEFAULT_SCHEMES

    p = subparsers.add_parser(
        "compare",
        help="replay one workload through every scheme: where the KV pool goes (Fig. 2)",
        description=(
            "Replay one workload through contiguous and paged allocation and report, per "
            "scheme, the time-weighted shares of the KV pool (token, reserved, internal "
            "and external fragmentation, free), the mean batch size, throughput and "
            "preemptions, beside the vLLM paper's Figure 2 and Figure 13 numbers. Defaults: "
            "the paper's setting (OPT-13B, one A100-40GB, 15,728 KV slots), ShareGPT-like "
            "load at 5 req/s. Writes CSVs and PNGs to --out. " + UNITS_NOTE + "."
        ),
    )
    _add_experiment_options(p, "sharegpt", None)
    p.add_argument("--schemes", type=_csv_list(str), default=list(DEFAULT_SCHEMES),
                   metavar="LIST",
                   help=f"comma-separated schemes (default {','.join(DEFAULT_SCHEMES)}); "
                        "contiguous-<max|pow2|oracle>[-first-fit|-best-fit|-buddy] or paged")
    p.add_argument("--part", choices=("saturated", "all"), default="saturated",
                   help="shares over the saturated steps (requests waiting; the default, as "
                        "the paper's Figure 2) or the whole run")
    p.add_argument("--out", default="figures", metavar="DIR",
                   help="folder for compare_summary.csv, compare_steps.csv and PNGs "
                        "(default figures/)")
    p.add_argument("--no-write", action="store_true", help="write no file")
    p.add_argument("--max-step-rows", type=int, default=1000, metavar="N",
                   help="per-step CSV: keep every k-th step so at most N rows per scheme "
                        "remain (0 = every step; default 1000)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON list of rows (scheme, the five shares as fractions "
                        "summing to 1, mean_batch_size, throughput_tokens_per_s, "
                        "preemptions, ...) instead of the table")
    p.set_defaults(run=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from .experiments import check_schemes, compare, compare_table, json_rows, write_compare

    if args.max_step_rows < 0:
        raise ValueError(f"--max-step-rows must be >= 0, got {args.max_step_rows}")
    schemes = check_schemes(args.schemes)  # before any work, so a typo fails at once
    exp = _experiment(args)
    cmp = compare(exp, schemes, jobs=args.jobs, progress=_progress(args),
                  keep_steps=not args.no_write, part=args.part)
    if args.json:
        print(json.dumps(json_rows(cmp), indent=1))
    else:
        print(compare_table(cmp))
    if not args.no_write:
        _report_written(args, write_compare(cmp, args.out, max_step_rows=args.max_step_rows))
    return 0


def _add_sweep(subparsers: argparse._SubParsersAction) -> None:
    from .experiments import SWEEPS

    names = ", ".join(SWEEPS)
    p = subparsers.add_parser(
        "sweep",
        help="sweep block size, request rate, n / beam width, or swap vs recompute",
        description=(
            "Run one configuration per swept value (in parallel processes, joblib) and "
            "write a CSV and PNG curves to --out. block-size: internal fragmentation and "
            "throughput of paged allocation for block sizes 1..256; rate: mean batch size "
            "per scheme against the request rate (the paper's Fig. 13); sharing: memory "
            "saved by sharing for parallel sampling (n) and beam search (width) on an "
            "Alpaca-like load (paper section 6.3); preemption: swap versus recompute across "
            "block sizes. all: every sweep. For a Dask cluster see pagedsim.experiments."
        ),
    )
    p.add_argument("name", choices=[*SWEEPS, "all"], metavar="SWEEP", nargs="?",
                   default="all", help=f"which sweep: {names} or all (the default)")
    _add_experiment_options(p, None, None)
    p.add_argument("--values", type=_csv_list(float), default=None, metavar="LIST",
                   help="comma-separated values to sweep (block sizes, rates, or n = beam "
                        "widths for sharing); default: the sweep's own")
    p.add_argument("--schemes", type=_csv_list(str), default=None, metavar="LIST",
                   help="schemes of the rate sweep (default the four of compare)")
    p.add_argument("--out", default="figures", metavar="DIR",
                   help="folder for sweep_<name>.csv and PNGs (default figures/)")
    p.add_argument("--no-write", action="store_true", help="write no file")
    p.set_defaults(run=_run_sweep)


def _run_sweep(args: argparse.Namespace) -> int:
    from .experiments import SWEEPS, run_sweep, sweep_table, write_sweep

    names = list(SWEEPS) if args.name == "all" else [args.name]
    if args.values is not None and len(names) > 1:
        raise ValueError("--values needs one sweep, not all")
    for name in names:
        df = run_sweep(name, lambda **kw: _experiment(args, **kw), values=args.values,
                       schemes=args.schemes, jobs=args.jobs, progress=_progress(args))
        print(sweep_table(name, df))
        print()
        if not args.no_write:
            _report_written(args, write_sweep(name, df, args.out))
    return 0


def _add_figures(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "figures",
        help="regenerate every committed figure and CSV under figures/",
        description=(
            "Run compare and every sweep with their defaults and write their CSVs and PNGs "
            "(deterministic: same code, same files) to --out."
        ),
    )
    p.add_argument("--out", default="figures", metavar="DIR",
                   help="folder to write (default figures/)")
    p.add_argument("--jobs", type=int, default=-1, metavar="N",
                   help="worker processes (joblib); -1 = every CPU (default -1)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar and no list of files written")
    p.set_defaults(run=_run_figures)


def _run_figures(args: argparse.Namespace) -> int:
    from .experiments import make_figures

    paths = make_figures(args.out, jobs=args.jobs, progress=_progress(args),
                         log=None if args.quiet else sys.stderr)
    _report_written(args, paths)
    return 0


# --------------------------------------------------------------------------------------
# The registry and the entry point.

#: One ``_add_<cmd>`` per command, in the order ``--help`` lists them.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_budget,
    _add_models,
    _add_gpus,
    _add_compare,
    _add_sweep,
    _add_figures,
]


def build_parser() -> _ArgumentParser:
    """The top-level parser with every command in :data:`COMMANDS`."""
    parser = _ArgumentParser(
        prog=PROG,
        description="KV-cache memory in LLM serving: contiguous versus paged (PagedAttention). "
                    + UNITS_NOTE + ".",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(subparsers)
    parser.command_names = tuple(subparsers.choices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status (0 ok, 2 bad input or usage).

    Every error a user can cause (bad flags, bad values, unknown presets, a model that does
    not fit, an unreadable file) is reported as exactly one line ``pagedsim: error: ...``
    on stderr, without a traceback.
    """
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version print and exit 0
            return exc.code if isinstance(exc.code, int) else 0
        if args.command is None:
            choices = ", ".join(parser.command_names)
            raise CliError(f"missing command, choose one of: {choices} (see '{PROG} --help')")
        return int(args.run(args))
    except (CliError, ValueError, TypeError, PagedSimError, OSError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
