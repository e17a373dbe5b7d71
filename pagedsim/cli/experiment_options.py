"""The options ``pagedsim compare`` and ``pagedsim sweep`` share, and the
:class:`~pagedsim.experiments.Experiment` they make: what to simulate (workload, rate,
requests, scheduler), on what (a memory setting: preset, model, GPU, pool); the
Experiment's errors come back in the flags' words (:mod:`.flag_errors`).
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.scheduler import POLICIES, PREEMPTION_MODES
from ..engine.scheduler_config import ORDERS
from ..models.budget import BUDGET_PRESETS, PAPER_OPT_13B, BudgetPreset, get_budget_preset
from ..models.specs import GPUS
from ..units import GiB
from ..workloads.traces import ON_TOO_LONG, TraceError
from .argtypes import gib_to_bytes, jobs, nonempty, preset, rate, whole
from .base import CliError
from .dask import add_dask_option
from .engine_options import add_engine_options, engine_fields
from .flag_errors import error_naming_flags
from .host_options import add_host_options, host_fields
from .presets import BUDGET_ACTIVATION_BYTES, BUDGET_UTILIZATION, MODEL_HELP, model_arg

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
                   metavar="{sharegpt,alpaca,random,system-prompt,multi-turn,few-shot,PATH}",
                   type=nonempty("sharegpt, alpaca, random, system-prompt, multi-turn, "
                                 "few-shot or the path of a trace file"),
                   help=f"synthetic ShareGPT-/Alpaca-like lengths; random: "
                        f"benchmark_serving's fixed lengths (--random-input-len, "
                        f"--random-output-len); system-prompt, "
                        f"multi-turn or few-shot: prompts that share content (shared system "
                        f"prompts, conversation histories, few-shot examples; "
                        f"pagedsim.workloads.sharing_workloads); or a trace file (Azure "
                        f"2023 CSV or pagedsim CSV/JSONL; its arrival times are used, "
                        f"rebased to the first row's when they are wall-clock readings) "
                        f"({wl}). With a trace, a one-line report of what loading "
                        f"changed or left out is printed above the table (on stderr with "
                        f"--json, whose stdout stays a list of rows)")
    paper = PAPER_OPT_13B
    p.add_argument("--preset", default=None, metavar="NAME",
                   type=preset("preset", BUDGET_PRESETS),
                   help=f"named memory setting: model, GPUs, memory utilization and "
                        f"activations (default, when neither --model nor --gpu is given: "
                        f"{paper.name}, {paper.source}, {paper.budget().max_tokens:,} KV "
                        f"slots; 'pagedsim budget --preset {paper.name}' shows the "
                        f"arithmetic). With --model or --gpu and no --preset: vLLM's "
                        f"defaults, utilization {BUDGET_UTILIZATION:g} and "
                        f"{BUDGET_ACTIVATION_BYTES} GiB of activations, as 'pagedsim "
                        f"budget' (the same pool for the same flags). The flags below "
                        f"override its parts")
    p.add_argument("--model", default=None, metavar="NAME|CONFIG", type=model_arg,
                   help=f"{MODEL_HELP} (default the preset's, {paper.model}); MLA models "
                        "by their latent; a model with sliding-window layers runs, by "
                        "default, as all full attention and under vLLM v1's hybrid "
                        "manager (schemes all-full and hybrid)")
    p.add_argument("--gpu", default=None, metavar="NAME", type=preset("gpu", GPUS),
                   help=f"GPU preset, one of: {', '.join(GPUS)}, any case (default the "
                        f"preset's, {paper.gpu})")
    p.add_argument("--num-gpus", type=whole, default=None, metavar="N",
                   help=f"GPUs the model is sharded over (default the preset's, "
                        f"{paper.num_gpus})")
    p.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="FRACTION",
                   help=f"fraction of GPU memory the engine claims (default the preset's: "
                        f"{paper.gpu_memory_utilization:g} in the paper's setting, its Table 1 "
                        f"arithmetic; {BUDGET_UTILIZATION:g}, vLLM's, with --model or --gpu "
                        f"and no --preset)")
    p.add_argument("--activation-gb", type=gib_to_bytes, default=None, metavar="GIB",
                   help=f"activation memory in GiB (default the preset's: "
                        f"{paper.activation_bytes / GiB:g} in the paper's setting, which with "
                        f"OPT-13B on an A100-40GB leaves its 12 GiB = "
                        f"{paper.budget().max_tokens:,} KV slots; {BUDGET_ACTIVATION_BYTES}, "
                        f"vLLM's, with --model or --gpu and no --preset)")
    p.add_argument("--weights-gb", type=gib_to_bytes, default=None, metavar="GIB",
                   help="weights in GiB, which size the pool and what each step streams "
                        "(default: the model preset's; a config.json's safetensors index, "
                        "else its architecture's parameter count x dtype bytes)")
    rate_text = (f"{_default(d.rate, ' requests/s')}"
                 + (", which saturates every scheme; see pagedsim.experiments"
                    if d.command == "compare" else ""))
    p.add_argument("--rate", type=rate, default=None, metavar="REQ_PER_S",
                   help=swept("--rate",
                              f"Poisson arrival rate in requests/s ({rate_text}); inf: "
                              "every request at t = 0 (benchmark_serving's default); for a "
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
    p.add_argument("--cost-profile", default=None, metavar="NAME|FILE",
                   help="step-time constants: paper (the roofline at peak with 2 ms a "
                        "step, as the paper's figures are reproduced; the default in the "
                        "paper's setting and with --preset), vllm (fitted to public vLLM "
                        "runs, python -m pagedsim.experiments.validate shows how well; "
                        "the default with --model or --gpu and no --preset, as vLLM's "
                        "memory defaults are) or a profile .json file that pagedsim "
                        "calibrate wrote")
    p.add_argument("--order", default="fcfs", choices=ORDERS,
                   help="order of the waiting queue: fcfs (default, arrival order) or lpm "
                        "(SGLang's longest prefix match: the request whose prompt the prefix "
                        "cache holds most of first; FCFS when more than 128 wait)")
    p.add_argument("--swap-gb", type=gib_to_bytes, default=4 * GiB, metavar="GIB",
                   help="CPU swap space in GiB for preemption by swap (default 4, vLLM's)")
    p.add_argument("--seed", type=whole, default=0, metavar="SEED",
                   help="seed of the workload and of beam search (default 0)")
    p.add_argument("--jobs", type=jobs, default=-1, metavar="N",
                   help="worker processes (joblib, or the workers of --dask local), at "
                        "most one per CPU; -1 = every CPU, 1 = no subprocess (default -1)")
    add_dask_option(p)
    add_host_options(p, d.swept)
    add_engine_options(p)
    p.add_argument("--quiet", action="store_true",
                   help="no start line, no progress bar and no list of files written")


#: The memory setting of ``compare`` and ``sweep`` given ``--model`` or ``--gpu`` and no
#: ``--preset``: vLLM's start-up defaults, as ``pagedsim budget`` uses them (one GPU,
#: the model's weights); the paper's model and GPU where only one of the two is given.
VLLM_DEFAULTS = BudgetPreset(
    name="vllm-defaults", model=PAPER_OPT_13B.model, gpu=PAPER_OPT_13B.gpu, num_gpus=1,
    gpu_memory_utilization=BUDGET_UTILIZATION, activation_bytes=BUDGET_ACTIVATION_BYTES,
    weights_bytes=None, source="vLLM's defaults: gpu_memory_utilization 0.9, no "
                               "activation memory (as 'pagedsim budget')")


def cost_profile(args: argparse.Namespace) -> str:
    """``--cost-profile``, else the profile of the setting :func:`memory_setting` chooses:
    ``paper`` for the paper's setting and a ``--preset``, ``vllm`` (fitted to public
    vLLM runs) once ``--model`` or ``--gpu`` names a deployment of today's vLLM."""
    if args.cost_profile is not None:
        return args.cost_profile
    return "paper" if args.preset or (args.model is None and args.gpu is None) else "vllm"


def memory_setting(args: argparse.Namespace) -> dict[str, object]:
    """The memory fields of an :class:`~pagedsim.experiments.Experiment`, each part
    overridden by its flag: ``--preset``'s; without it, the paper's setting
    (:data:`pagedsim.models.budget.PAPER_OPT_13B`) in the default run (neither ``--model``
    nor ``--gpu``), and :data:`VLLM_DEFAULTS` (utilization 0.9, no activations, as
    ``pagedsim budget``) once ``--model`` or ``--gpu`` names another setting, so that
    ``budget`` and ``compare`` give the same pool for the same flags."""
    if args.preset:
        chosen = get_budget_preset(args.preset)
    elif args.model is None and args.gpu is None:
        chosen = PAPER_OPT_13B
    else:
        chosen = VLLM_DEFAULTS

    def pick(value: object, default: object) -> object:
        return default if value is None else value

    return dict(
        model=pick(args.model, chosen.model), gpu=pick(args.gpu, chosen.gpu),
        num_gpus=pick(args.num_gpus, chosen.num_gpus),
        gpu_memory_utilization=pick(args.gpu_memory_utilization,
                                    chosen.gpu_memory_utilization),
        activation_bytes=pick(args.activation_gb, chosen.activation_bytes),
        weights_bytes=pick(args.weights_gb, chosen.weights_bytes), **host_fields(args),
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
        policy=args.policy, order=args.order, cost_profile=cost_profile(args),
        swap_bytes=args.swap_gb, on_too_long=args.on_too_long or "clip",
        skip_zero_output=args.skip_zero_output,
    )
    fields.update(engine_fields(args, str(fields["gpu"]), workload))
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
    try:
        return Experiment(**fields)  # first: is --workload a name or a file at all?
    except ValueError as exc:
        raise error_naming_flags(exc, args) from None


#: Library parameter names in trace errors -> the flags a CLI user types.
TRACE_FLAG_NAMES = (("skip_zero_output=True", "--skip-zero-output"),
                     ("with max_requests", "with --num-requests"),
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
        for name, flag in TRACE_FLAG_NAMES:
            message = message.replace(name, flag)
        raise CliError(f"argument --workload: {message}") from None
    except ValueError as exc:  # a rate the trace cannot take (Experiment.trace)
        raise CliError(f"argument --rate: {exc}") from None


def say_model_notes(exp: Experiment) -> None:
    """One stderr line when the model is a config.json whose ``max_model_len`` came from a
    key other than ``max_position_embeddings``, or from vLLM's 2,048 fallback: the runs
    reject or clip requests by it, so where it came from is said, not left to guess; and
    one saying where a config's weights came from (its index beside the architecture's
    count, or that count), unless ``--weights-gb`` gave them."""
    import sys

    from ..models.hf_config import max_model_len_note, weights_note
    from ..models.specs import get_model

    model = get_model(exp.model)
    notes = [max_model_len_note(model)]
    if exp.weights_bytes is None or exp.weights_bytes == model.weights_bytes:
        notes.append(weights_note(model))  # not when --weights-gb set them
    for note in notes:
        if note:
            print(f"note: {exp.model}: {note}", file=sys.stderr, flush=True)
