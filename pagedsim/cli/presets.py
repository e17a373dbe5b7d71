"""``pagedsim budget`` (vLLM's KV-cache budget arithmetic, step by step) and the preset
listings ``pagedsim models`` and ``pagedsim gpus``. Sizes in binary units (GiB = 2**30)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from ..models.budget import (
    BUDGET_PRESETS,
    PAPER_OPT_13B,
    KVBudget,
    get_budget_preset,
    kv_budget,
    preset_of,
)
from ..models.hf_config import looks_like_config_path, max_model_len_note, weights_note
from ..models.kv_spec import KV_CACHE_DTYPE_BYTES
from ..models.specs import GPUS, MODELS, ModelSpec, get_gpu, get_model
from ..textfmt import format_table
from ..units import GiB, KiB, MiB
from ..wording import count
from .argtypes import csv_list, gib_to_bytes, preset, shown, whole
from .base import UNITS_NOTE, CliError
from .flag_errors import error_naming_flags
from .vllm_budget import run_vllm_budget, wants_vllm_report

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


# --------------------------------------------------------------------------------------
# --model: a preset or a config.json


def model_arg(text: str) -> str:
    """A ``--model`` value: a preset name (any case) or a path to a Hugging Face
    config.json (or its folder), read at once so a bad file fails before any work."""
    if looks_like_config_path(text.strip()):
        try:
            get_model(text.strip())
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text.strip()
    try:
        return preset("model", MODELS)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"unknown model {shown(text)}; valid: {', '.join(MODELS)}, or a path to a "
            "Hugging Face config.json") from None


#: ``--model``'s help, shared by the commands that take it.
MODEL_HELP = (f"model preset, one of: {', '.join(MODELS)} (any case), or PATH/config.json "
              "of a Hugging Face model (read locally, never downloaded)")


# --------------------------------------------------------------------------------------
# budget


#: ``pagedsim budget``'s defaults without ``--preset``: vLLM's own start-up defaults.
BUDGET_UTILIZATION = 0.9
BUDGET_ACTIVATION_BYTES = 0


def add_budget(subparsers: argparse._SubParsersAction) -> None:
    paper = PAPER_OPT_13B
    p = subparsers.add_parser(
        "budget",
        help="KV-cache budget: bytes per token, pool size, blocks and token slots",
        description=(
            "How much KV cache a model gets on a GPU, as vLLM computes it at start-up: "
            "kv = total GPU memory x utilization - weights - activations; "
            "num_blocks = kv // (block_size x bytes per token). Without --preset the "
            f"utilization and activations default to vLLM's {BUDGET_UTILIZATION:g} and "
            f"{BUDGET_ACTIVATION_BYTES}; --preset {paper.name} is {paper.source}, which "
            f"'pagedsim compare' uses ({paper.budget().max_tokens:,} slots). "
            + UNITS_NOTE + "."
        ),
    )
    p.add_argument("--preset", default=None, metavar="NAME",
                   type=preset("preset", BUDGET_PRESETS),
                   help="named memory setting, one of: "
                        + "; ".join(f"{b.name} ({b.model} on {b.num_gpus} x {b.gpu}, "
                                    f"utilization {b.gpu_memory_utilization:g}, "
                                    f"{b.activation_bytes / GiB:g} GiB of activations: "
                                    f"{b.source})" for b in BUDGET_PRESETS.values())
                        + ". The other flags override its parts")
    p.add_argument("--model", default=None, metavar="NAME|CONFIG", type=model_arg,
                   help=MODEL_HELP + "; required without --preset")
    p.add_argument("--gpu", default=None, metavar="NAME", type=preset("gpu", GPUS),
                   help=f"GPU preset, one of: {', '.join(GPUS)} (any case); required "
                        "without --preset")
    p.add_argument("--weights-gb", type=gib_to_bytes, default=None, metavar="GIB",
                   help="weights across all GPUs, in GiB (2**30 bytes); "
                        "default: the model preset's")
    p.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="FRACTION",
                   help="fraction of GPU memory the engine claims, in (0, 1] (default "
                        f"{BUDGET_UTILIZATION:g}, vLLM's; with --preset, the preset's)")
    p.add_argument("--activation-gb", type=gib_to_bytes, default=None, metavar="GIB",
                   help="peak activation and other non-KV memory across all GPUs, in GiB "
                        f"(default {BUDGET_ACTIVATION_BYTES}; with --preset, the preset's)")
    p.add_argument("--block-size", type=whole, default=None, metavar="TOKENS",
                   help="token slots per KV block (default 16, as in vLLM; 64 for MLA "
                        "models in vLLM's sizing, as its FlashMLA backend sets)")
    p.add_argument("--num-gpus", type=whole, default=None, metavar="N",
                   help="GPUs the model is sharded over; memory and KV cache add up "
                        "(default 1; with --preset, the preset's)")
    p.add_argument("--seq-len", type=whole, default=1024, metavar="TOKENS",
                   help="sequence length for the per-sequence example line (default 1024)")
    g = p.add_argument_group(
        "vLLM's sizing", "With any of these, or a sliding-window, hybrid or MLA model, the "
        "budget is computed as vLLM v1 computes it (pagedsim.models.vllm_kv: per-layer KV specs, "
        "KV-cache groups of the hybrid allocator, TP and PP per GPU) and ends with the two "
        "lines vLLM logs, 'GPU KV cache size' and 'Maximum concurrency'")
    # Not unique: each pipeline stage logs its own figure, and stages with the same
    # layers log the same one (10,10 with --pipeline-parallel-size 2).
    g.add_argument("--kv-cache-memory-gb", type=csv_list(gib_to_bytes, "stage figures",
                                                         unique=False), default=None,
                   metavar="GIB[,GIB...]",
                   help="KV memory of one GPU in GiB: vLLM's kv_cache_memory_bytes, or the "
                        "'Available KV cache memory' a vLLM log printed (instead of --gpu "
                        "and utilization); with pipeline parallelism one figure per stage "
                        "may be given, as each stage logs its own")
    g.add_argument("--tensor-parallel-size", type=whole, default=None, metavar="N",
                   help="GPUs per stage; each holds kv_heads // N KV heads (at least one, "
                        "replicated past the KV heads; an MLA latent whole on each)")
    g.add_argument("--pipeline-parallel-size", type=whole, default=None, metavar="N",
                   help="pipeline stages, each with its own layers (vLLM's split)")
    g.add_argument("--kv-cache-dtype", default=None, choices=list(KV_CACHE_DTYPE_BYTES),
                   help="KV element type (default auto: the model's dtype); fp8 variants "
                        "take 1 byte")
    g.add_argument("--max-model-len", type=whole, default=None, metavar="TOKENS",
                   help="longest request (default: the model's max_position_embeddings)")
    g.add_argument("--max-num-batched-tokens", type=whole, default=None, metavar="TOKENS",
                   help="tokens per step (default 8192, vLLM serve's on large GPUs); only "
                        "sliding-window concurrency depends on it")
    g.add_argument("--disable-hybrid-kv-cache-manager", action="store_true",
                   help="as vLLM's flag: sliding-window layers keep every token, one group")
    p.add_argument("--json", action="store_true",
                   help="print the budget's fields as one JSON object (sizes in bytes), "
                        "with 'preset': the named setting it is, or null; in vLLM's "
                        "sizing, with gpu_kv_cache_size_tokens and max_concurrency")
    p.set_defaults(run=run_budget)


def budget_text(b: KVBudget, seq_len: int) -> str:
    """The budget, one computed step per line, in binary units; then the named setting
    it is (:func:`pagedsim.models.budget.preset_of`), or the one for the same model and GPUs."""
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
        f"= {count(b.num_blocks, 'block', digits='')} of {b.block_size} = "
        f"{count(b.max_tokens, 'token slot', digits='')}",
        f"that is {count(b.max_tokens // seq_len, 'sequence', digits='')} of {seq_len} tokens, or "
        f"{b.max_tokens // full_len} of max_model_len {full_len} tokens",
    ]
    note = max_model_len_note(model)
    if note:
        lines.append(note)
    weights = weights_note(model)
    if weights and b.weights_bytes == model.weights_bytes:  # not when --weights-gb set them
        lines.append(weights)
    unused = b.kv_cache_bytes - b.num_blocks * b.bytes_per_block
    if unused:
        lines.append(f"left over (less than one block): {_size(unused)} ({unused} bytes)")
    if b.num_blocks == 0:
        lines.append("warning: the KV cache is smaller than one block; nothing can be served")
    lines.extend(_preset_lines(b))
    return "\n".join(lines)


def _preset_lines(b: KVBudget) -> list[str]:
    """The named setting ``b`` is, with what its source reports; or, for the same model
    and GPUs in another setting, a pointer to the named one."""
    named = preset_of(b.model, b.gpu, b.num_gpus, b.gpu_memory_utilization,
                      b.activation_bytes, b.weights_bytes)
    if named is not None:
        reported = (f"; it reports {named.reported_slots / 1000:.1f}K slots"
                    if named.reported_slots else "")
        return ["", f"this is preset {named.name}: {named.source}{reported}; "
                    "'pagedsim compare' runs it by default"]
    for other in BUDGET_PRESETS.values():
        if (other.model, other.gpu, other.num_gpus) == (b.model, b.gpu, b.num_gpus):
            ob = other.budget(b.block_size)
            reported = (f" ({other.reported_slots / 1000:.1f}K in the source)"
                        if other.reported_slots else "")
            return ["", f"note: {other.source} is --preset {other.name}: utilization "
                        f"{other.gpu_memory_utilization:g} and "
                        f"{_gib(other.activation_bytes)} of activations give "
                        f"{_gib(ob.kv_cache_bytes)} of KV cache = {ob.max_tokens:,} token "
                        f"slots{reported}; 'pagedsim compare' uses it"]
    return []


def run_budget(args: argparse.Namespace) -> int:
    if args.seq_len < 1:
        raise CliError(f"argument --seq-len: must be >= 1 token, got {args.seq_len!r}")
    chosen = get_budget_preset(args.preset) if args.preset else None
    for flag, value in (("--model", args.model), ("--gpu", args.gpu)):
        if flag == "--gpu" and args.kv_cache_memory_gb is not None:
            continue
        if value is None and chosen is None:
            raise CliError(f"argument {flag}: required without --preset (one of: "
                           f"{', '.join(BUDGET_PRESETS)})")

    def pick(value: object, from_preset: object, default: object) -> object:
        if value is not None:
            return value
        return from_preset if chosen is not None else default

    spec = get_model(pick(args.model, chosen and chosen.model, None))
    if wants_vllm_report(args, spec):
        return run_vllm_budget(args, spec, chosen)
    try:
        b = kv_budget(
            pick(args.model, chosen and chosen.model, None),
            pick(args.gpu, chosen and chosen.gpu, None),
            weights_bytes=pick(args.weights_gb, chosen and chosen.weights_bytes, None),
            gpu_memory_utilization=pick(args.gpu_memory_utilization,
                                        chosen and chosen.gpu_memory_utilization,
                                        BUDGET_UTILIZATION),
            activation_bytes=pick(args.activation_gb, chosen and chosen.activation_bytes,
                                  BUDGET_ACTIVATION_BYTES),
            block_size=16 if args.block_size is None else args.block_size,
            num_gpus=pick(args.num_gpus, chosen and chosen.num_gpus, 1),
        )
    except ValueError as exc:  # no room for a KV cache, a block larger than it, ...
        raise error_naming_flags(exc, args) from None  # named by the flags that set them
    if args.json:
        named = preset_of(b.model, b.gpu, b.num_gpus, b.gpu_memory_utilization,
                          b.activation_bytes, b.weights_bytes)
        print(json.dumps({**b.to_dict(), "preset": named and named.name}, indent=2))
    else:
        print(budget_text(b, args.seq_len))
    return 0


# --------------------------------------------------------------------------------------
# models, gpus


def add_models(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("models", help="list the model presets",
                              description="The model presets. " + UNITS_NOTE + ".")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per preset name (sizes in bytes)")
    p.set_defaults(run=run_models)


def run_models(args: argparse.Namespace) -> int:
    if args.json:
        out = {name: {**asdict(m), "bytes_per_token": m.bytes_per_token}
               for name, m in MODELS.items()}
        print(json.dumps(out, indent=2))
        return 0
    headers = ["model", "layers", "heads", "kv heads", "head_dim", "dtype bytes",
               "weights (GiB)", "KV per token", "max_model_len", "layer kinds"]
    rows = [[m.name, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim, m.dtype_bytes,
             _num(m.weights_bytes / GiB), _size(m.bytes_per_token), m.max_model_len,
             _layer_kinds(m)] for m in MODELS.values()]
    print(format_table(headers, rows))
    print("\nKV per token counts every token of every layer (a sliding-window layer as a full "
          "one, as the simulator sizes it; an MLA layer its latent); 'pagedsim budget --model "
          "NAME --kv-cache-memory-gb GIB' sizes the cache as vLLM does, windows included. "
          "Sources: 'pagedsim models --json'")
    return 0


def _layer_kinds(m: ModelSpec) -> str:
    """``"12 sliding (128) + 12 full"``: the layer kinds of ``m`` with their counts."""
    counts: dict[tuple[str, int], int] = {}
    for layer in m.kv_layers:
        key = (layer.kind, layer.window_tokens)
        counts[key] = counts.get(key, 0) + 1
    return " + ".join(f"{n} {kind}" + (f" ({w})" if w else "") for (kind, w), n in counts.items())


def add_gpus(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("gpus", help="list the GPU presets",
                              description="The GPU presets. " + UNITS_NOTE + ".")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per preset name (bytes, bytes/s, flop/s)")
    p.set_defaults(run=run_gpus)


def run_gpus(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({name: asdict(g) for name, g in GPUS.items()}, indent=2))
        return 0
    headers = ["gpu", "memory (GiB)", "HBM (TB/s)", "fp16 dense (TFLOP/s)"]
    rows = [[g.name, _num(g.memory_bytes / GiB), _num(g.hbm_bytes_per_s / 1e12, 3),
             _num(g.peak_flops_per_s / 1e12)] for g in GPUS.values()]
    print(format_table(headers, rows))
    print("\nmemory as nvidia-smi reports it; bandwidth (1 TB/s = 10**12 bytes/s) and "
          "peak flop/s from NVIDIA's datasheets")
    return 0
