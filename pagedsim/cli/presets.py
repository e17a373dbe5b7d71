"""``pagedsim budget`` (vLLM's KV-cache budget arithmetic, step by step) and the preset
listings ``pagedsim models`` and ``pagedsim gpus``. Sizes in binary units (GiB = 2**30)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from ..budget import KVBudget, kv_budget
from ..specs import GPUS, MODELS, get_gpu, get_model
from ..textfmt import format_table
from ..units import GiB, KiB, MiB
from .argtypes import gib_to_bytes, preset, whole
from .base import UNITS_NOTE

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
# budget


def add_budget(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "budget",
        help="KV-cache budget: bytes per token, pool size, blocks and token slots",
        description=(
            "How much KV cache a model gets on a GPU, as vLLM computes it at start-up: "
            "kv = total GPU memory x utilization - weights - activations; "
            "num_blocks = kv // (block_size x bytes per token). " + UNITS_NOTE + "."
        ),
    )
    p.add_argument("--model", required=True, metavar="NAME", type=preset("model", MODELS),
                   help=f"model preset, one of: {', '.join(MODELS)} (any case)")
    p.add_argument("--gpu", required=True, metavar="NAME", type=preset("gpu", GPUS),
                   help=f"GPU preset, one of: {', '.join(GPUS)} (any case)")
    p.add_argument("--weights-gb", type=gib_to_bytes, default=None, metavar="GIB",
                   help="weights across all GPUs, in GiB (2**30 bytes); "
                        "default: the model preset's")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="FRACTION",
                   help="fraction of GPU memory the engine claims, in (0, 1] (default 0.9)")
    p.add_argument("--activation-gb", type=gib_to_bytes, default=0, metavar="GIB",
                   help="peak activation and other non-KV memory across all GPUs, in GiB "
                        "(default 0)")
    p.add_argument("--block-size", type=whole, default=16, metavar="TOKENS",
                   help="token slots per KV block (default 16, as in vLLM)")
    p.add_argument("--num-gpus", type=whole, default=1, metavar="N",
                   help="GPUs the model is sharded over; memory and KV cache add up (default 1)")
    p.add_argument("--seq-len", type=whole, default=1024, metavar="TOKENS",
                   help="sequence length for the per-sequence example line (default 1024)")
    p.add_argument("--json", action="store_true",
                   help="print the budget's fields as one JSON object (sizes in bytes)")
    p.set_defaults(run=run_budget)


def budget_text(b: KVBudget, seq_len: int) -> str:
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


def run_budget(args: argparse.Namespace) -> int:
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
               "weights (GiB)", "KV per token", "max_model_len"]
    rows = [[m.name, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim, m.dtype_bytes,
             _num(m.weights_bytes / GiB), _size(m.bytes_per_token), m.max_model_len]
            for m in MODELS.values()]
    print(format_table(headers, rows))
    return 0


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
