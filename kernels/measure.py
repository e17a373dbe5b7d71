"""Measured versus simulated: one workload, one scheduler and allocator, two executors.

For each scheme the same workload runs twice:

1. through the simulator alone (``pagedsim.simulate`` with a fresh allocator): the
   prediction, step by step, of token / reserved / internal / cached / external / free
   slots;
2. through the real executor (:class:`pagedsim.kernels.executor.RealExecutor`): the scheduler
   drives the small decoder over a real KV cache whose allocator is the one the
   scheduler uses. After every step we *measure* what is in memory:

   - ``meas_token_slots``: slots whose K is not the NaN sentinel, found by scanning
     the cache (released memory is scrubbed back to NaN, so these are exactly the
     slots holding a live token's K/V, or a prefix-cached block's);
   - ``meas_cached_slots`` (``paged`` family): of them, those in blocks that no live
     sequence's block table holds;
   - ``meas_region_bytes`` (contiguous schemes): every live region also gets its own
     ``torch.empty`` buffer of its reserved size, as older engines allocated one
     buffer per request; the bytes those buffers occupy. (The kernel still reads the
     shared arena: the buffers measure the footprint, on CUDA through the caching
     allocator, where ``memory_reserved - memory_allocated`` shows its fragmentation);
   - ``cache_tensor_bytes`` and, on CUDA, ``torch.cuda.memory_allocated/reserved``.

Both runs must make identical plans (checked), so the accounting and the measurement
can be compared at every step. For paged schemes measured token slots must equal
simulated ``token`` slots; for contiguous ones the region buffers' bytes must equal
simulated (token + reserved + internal fragmentation) slots x bytes per slot.

Prefix caching (``prefix-cache``, ``prefix-cache-dedup``, ``radix``): a block whose
requests have all ended keeps its K/V until it is evicted (only then does the allocator
report it for scrubbing), and the account calls its slots ``cached``. Cached blocks are
full blocks, so all their slots hold data, and the scan sees them. So the comparison is

    meas_token_slots == sim_token + sim_cached    (token_gap_slots = the difference)
    meas_cached_slots == sim_cached               (cached_gap_slots = the difference)

at every step, hits and evictions included: the first says no live token and no cached
block lost its K/V and no released memory kept any; the second that the account splits
them right (a block counted cached while a request holds it, or the reverse, shows
there). For schemes without a cache ``sim_cached`` is 0 and the first is the plain
comparison above. The per-step frame also carries the simulator's ``prefix_hit_tokens``,
``prefill_tokens_cached`` and ``evictions``, which must agree between the two runs.

``python -m pagedsim.kernels.measure --help`` lists the options; ``--out`` receives the per-step
CSV and a figure of both utilization curves per scheme.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import pagedsim
from pagedsim.cli.base import ArgumentParser, CliError, name_the_flag
from pagedsim.cli.outdir import prepare_out
from pagedsim.memory.schemes import get_scheme

from .budget_check import budget_check
from .executor import RealExecutor
from .hybrid_cache import held_blocks, windows_arg
from .measure_config import (
    WORKLOADS,
    MeasureConfig,
    model_spec,
    requests_for,
    simulator_allocator,
)
from .model import Decoder, ModelConfig

SLOT_COLUMNS = ("token", "reserved", "internal_frag", "cached", "external_frag", "free")
#: Step columns both runs must agree on (the same plans), the prefix cache's included.
PLAN_COLUMNS = ("step", "running", "waiting", "prefill_tokens", "decode_seqs", "preemptions",
                "cow_copies", "finished", "prefill_tokens_cached", "prefix_hit_tokens",
                "evictions")


@dataclass(slots=True)
class SchemeMeasurement:
    scheme: str
    frame: object  # pandas DataFrame, one row per step
    bytes_per_slot: int
    max_token_gap_slots: int
    max_bytes_gap: int  # contiguous: |region buffers - simulated allocated| bytes; paged: token
    max_cached_gap_slots: int | None = None  # paged family; None where not measured
    prefix_hit_tokens: int = 0  # prompt tokens served from a prefix cache, whole run
    prefill_tokens_cached: int = 0  # of them, the ones not computed (as the plans say)
    evictions: int = 0  # cached blocks evicted, whole run
    cuda_max_allocated_bytes: int | None = None
    cuda_max_reserved_bytes: int | None = None
    #: Requests the scheduler rejected, ``(request_id, reason)``: reported, never dropped.
    rejections: list[tuple[int, str]] = field(default_factory=list)
    num_requests: int = 0  # requests in the workload
    window_freed_blocks: int = 0  # hybrid: blocks sliding groups gave back behind windows



def measure_scheme(cfg: MeasureConfig, scheme: str, progress: bool | None = None,
                   corrupt_accounting=None) -> SchemeMeasurement:
    """Run ``scheme`` through the simulator and through the real executor; compare.

    ``corrupt_accounting(allocator)`` may patch the simulator's allocator (tests use it
    to show that a broken accounting is caught by the measurement).
    """
    import pandas as pd

    requests = requests_for(cfg)
    spec = model_spec(cfg.model, cfg.max_model_len)
    gpu = pagedsim.get_gpu("h200-141gb") if torch.cuda.is_available() else pagedsim.get_gpu(
        "a100-40gb")
    cost = pagedsim.CostModel(spec, gpu)
    sched_cfg = cfg.scheduler_config()

    # 1. The simulator alone.
    sim_allocator = simulator_allocator(cfg, scheme)
    if corrupt_accounting is not None:
        corrupt_accounting(sim_allocator)
    sim_result = pagedsim.simulate(requests, sim_allocator, cost, sched_cfg, scheme=scheme,
                                   progress=False)
    predicted = sim_result.steps()

    # 2. The real executor, on a cache whose allocator the scheduler drives.
    # Regions are measured as buffers for the schemes drawn as an arena of regions.
    regions = get_scheme(scheme).view == "arena" and cfg.region_buffers
    paged = get_scheme(scheme).family in ("paged", "hybrid")
    decoder = Decoder(cfg.model)
    cache = decoder.make_cache(cfg.num_blocks, cfg.block_size, scheme, cfg.max_model_len)
    cache.backend = cfg.backend
    executor = RealExecutor(decoder, cache, seed=cfg.seed)
    bytes_per_slot = cache.config.bytes_per_slot
    cache_bytes = sum(t.numel() * t.element_size() for t in cache.k_caches + cache.v_caches)
    on_cuda = cache.config.device == "cuda"
    buffers: dict[object, tuple[int, int, torch.Tensor]] = {}
    rows: list[tuple] = []

    def on_step(sched, plan) -> None:
        executor.execute(sched, plan)
        region_bytes = None
        if regions:
            live = {s: cache.allocator.region(s) for s in cache.allocator.seq_ids()}
            for s in [s for s in buffers if s not in live or buffers[s][:2] != live[s]]:
                del buffers[s]
            for s, (start, size) in live.items():
                if s not in buffers:
                    buf = torch.empty(size * bytes_per_slot, dtype=torch.uint8,
                                      device=cache.config.device)
                    buffers[s] = (start, size, buf)
            region_bytes = sum(b.numel() * b.element_size() for _, _, b in buffers.values())
        per_block = cache.written_per_block()
        cached_slots = None
        if paged:  # written slots outside every live sequence's blocks (any group's)
            live = held_blocks(cache)
            cached_slots = int(per_block.sum()) - int(per_block[sorted(live)].sum())
        rows.append((
            plan.step, int(per_block.sum()), cached_slots, region_bytes, cache_bytes,
            torch.cuda.memory_allocated() if on_cuda else None,
            torch.cuda.memory_reserved() if on_cuda else None,
        ))

    if on_cuda:
        torch.cuda.synchronize()
    real = pagedsim.simulate(requests, cache.allocator, cost, sched_cfg, scheme=scheme,
                             progress=progress, on_step=on_step).steps()
    measured = pd.DataFrame.from_records(rows, columns=[
        "step", "meas_token_slots", "meas_cached_slots", "meas_region_bytes",
        "cache_tensor_bytes",
        "cuda_allocated_bytes", "cuda_reserved_bytes"])

    same_plans = list(PLAN_COLUMNS)
    if not predicted[same_plans].equals(real[same_plans]):
        raise AssertionError(f"{scheme}: the simulator and the real executor made different "
                             "plans for the same workload")
    frame = predicted[["step", "time_s", "running", "waiting", "capacity", *SLOT_COLUMNS,
                       "preemptions", "cow_copies", "prefix_hit_tokens",
                       "prefill_tokens_cached", "evictions"]].rename(
        columns={c: f"sim_{c}" for c in SLOT_COLUMNS})
    frame = frame.merge(measured, on="step", how="left")
    frame.insert(0, "scheme", scheme)
    # Cached blocks keep their K/V (see the module docstring): the scan sees them too.
    frame["token_gap_slots"] = frame["meas_token_slots"] - frame["sim_token"] \
        - frame["sim_cached"]
    if paged:
        frame["cached_gap_slots"] = frame["meas_cached_slots"] - frame["sim_cached"]
    if regions:
        allocated = frame[["sim_token", "sim_reserved", "sim_internal_frag"]].sum(axis=1)
        frame["bytes_gap"] = frame["meas_region_bytes"] - allocated * bytes_per_slot
    else:
        frame["bytes_gap"] = frame["token_gap_slots"] * bytes_per_slot
    return SchemeMeasurement(
        scheme=scheme, frame=frame, bytes_per_slot=bytes_per_slot,
        max_token_gap_slots=largest_abs(frame["token_gap_slots"]),
        max_bytes_gap=largest_abs(frame["bytes_gap"]),
        max_cached_gap_slots=largest_abs(frame["cached_gap_slots"]) if paged else None,
        prefix_hit_tokens=int(frame["prefix_hit_tokens"].sum()),
        prefill_tokens_cached=int(frame["prefill_tokens_cached"].sum()),
        evictions=int(frame["evictions"].sum()),
        cuda_max_allocated_bytes=largest_abs(frame["cuda_allocated_bytes"]) if on_cuda else None,
        cuda_max_reserved_bytes=largest_abs(frame["cuda_reserved_bytes"]) if on_cuda else None,
        rejections=sim_result.rejections, num_requests=len(requests),
        window_freed_blocks=sum(getattr(cache.allocator, "window_freed_blocks", ())),
    )


def largest_abs(column) -> int:
    """The largest absolute value of a step column; 0 for a run with no step (every
    request rejected), whose max is NaN."""
    value = column.abs().max()
    return 0 if value != value else int(value)



def run(cfg: MeasureConfig, out: Path | None = None, progress: bool | None = None,
        quiet: bool = False) -> list[SchemeMeasurement]:
    """Measure every scheme; write ``measured_vs_simulated.csv`` and a figure to ``out``."""
    import pandas as pd

    results = []
    for scheme in cfg.schemes:
        t0 = time.perf_counter()
        m = measure_scheme(cfg, scheme, progress=progress)
        results.append(m)
        if not quiet:
            line = (f"{scheme:<22} steps {len(m.frame):>4}  largest gap: "
                    f"{m.max_token_gap_slots} token slots, {m.max_bytes_gap} bytes  "
                    f"({time.perf_counter() - t0:.1f} s)")
            if m.window_freed_blocks:
                line += f"  {m.window_freed_blocks} blocks given back behind the window"
            if m.prefix_hit_tokens or m.evictions:
                line += (f"  prefix hits {m.prefix_hit_tokens} tokens, cached-slot gap "
                         f"{m.max_cached_gap_slots}, {m.evictions} evictions")
            if m.rejections:
                rid, reason = m.rejections[0]
                line += (f"  {len(m.rejections)} of {m.num_requests} requests rejected, "
                         f"e.g. request {rid}: {reason}")
            if m.cuda_max_allocated_bytes is not None:
                line += (f"  cuda allocated/reserved peak {m.cuda_max_allocated_bytes:,} / "
                         f"{m.cuda_max_reserved_bytes:,} bytes")
            print(line)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        pd.concat([m.frame for m in results]).to_csv(out / "measured_vs_simulated.csv",
                                                     index=False)
        plot(results, out / "measured_vs_simulated.png")
        if not quiet:
            print(f"wrote {out / 'measured_vs_simulated.csv'} and .png")
    return results


def plot(results: list[SchemeMeasurement], path: Path | None = None):
    """Simulated and measured utilization (token slots / capacity) per scheme."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pagedsim.plots.palette import CATEGORY_COLORS

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.4), squeeze=False)
    for ax, m in zip(axes[0], results, strict=True):
        f = m.frame
        ax.plot(f["step"], (f["sim_token"] + f["sim_cached"]) / f["capacity"],
                color=CATEGORY_COLORS["token"], lw=2.5,
                label="simulated token + cached slots" if f["sim_cached"].any()
                else "simulated token slots")
        ax.plot(f["step"], f["meas_token_slots"] / f["capacity"], color="black", lw=1,
                ls="--", label="measured (non-sentinel slots)")
        ax.set_title(f"{m.scheme}: largest gap {m.max_token_gap_slots} slots")
        ax.set_xlabel("step")
        ax.set_ylabel("utilization (token slots / capacity)")
        ax.set_ylim(0, 1.05)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
    return fig


def main(argv: list[str] | None = None) -> int:
    # pagedsim's parser: a usage error is one line (CliError), not usage text and exit.
    parser = ArgumentParser(prog="python -m pagedsim.kernels.measure", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    d = MeasureConfig()
    parser.add_argument("--schemes", default=",".join(d.schemes),
                        help="comma-separated pagedsim schemes (default: %(default)s)")
    parser.add_argument("--workload", default=d.workload,
                        help=f"one of {', '.join(WORKLOADS)} (default: %(default)s)")
    parser.add_argument("--shared-tokens", type=int, default=d.shared_tokens,
                        help="sharing workloads: tokens of the shared system prompt / shots")
    parser.add_argument("--prefix-groups", type=int, default=d.prefix_groups,
                        help="sharing workloads: system prompts, shot sets or conversations")
    parser.add_argument("--policy", choices=["v0", "chunked"], default=d.policy)
    parser.add_argument("--max-batched-tokens", dest="max_num_batched_tokens", type=int,
                        default=d.max_num_batched_tokens,
                        help="tokens one step may run (chunked: prompts split to fit)")
    parser.add_argument("--num-requests", type=int, default=d.num_requests)
    parser.add_argument("--rate", type=float, default=d.rate_per_s, help="requests per second")
    parser.add_argument("--n", type=int, default=d.n, help="parallel samples per request")
    parser.add_argument("--beam-width", type=int, default=d.beam_width)
    parser.add_argument("--max-model-len", type=int, default=d.max_model_len)
    parser.add_argument("--num-blocks", type=int, default=d.num_blocks)
    parser.add_argument("--block-size", type=int, default=d.block_size)
    parser.add_argument("--preemption", choices=["recompute", "swap"], default=d.preemption)
    parser.add_argument("--layers", dest="num_layers", type=int, default=d.model.num_layers)
    parser.add_argument("--windows", type=windows_arg, default=(), metavar="W,W,...",
                        help="each layer's sliding window in tokens, 0 = full attention, one "
                        "per layer (e.g. 8,0 with --layers 2; schemes hybrid, all-full)")
    parser.add_argument("--hidden", dest="hidden_size", type=int, default=d.model.hidden_size)
    parser.add_argument("--heads", dest="num_heads", type=int, default=d.model.num_heads)
    parser.add_argument("--kv-heads", dest="num_kv_heads", type=int,
                        default=d.model.num_kv_heads)
    parser.add_argument("--head-dim", type=int, default=d.model.head_dim)
    parser.add_argument("--intermediate", dest="intermediate_size", type=int,
                        default=d.model.intermediate_size)
    parser.add_argument("--vocab", dest="vocab_size", type=int, default=d.model.vocab_size)
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=["triton", "torch"], default=None,
                        help="kernel backend (default: kernels.BACKEND; the Triton "
                             "interpreter on a CPU is slow, torch is fast)")
    parser.add_argument("--budget", action="store_true",
                        help="on CUDA, also hold kv_budget's prediction against the GPU")
    parser.add_argument("--out", type=Path, default=Path("out/measure"))
    parser.add_argument("--quiet", action="store_true")
    try:
        args = parser.parse_args(argv)
        if args.windows and len(args.windows) != args.num_layers:
            raise CliError(f"argument --windows: {len(args.windows)} windows for --layers "
                           f"{args.num_layers}; give one per layer")
        model = ModelConfig(vocab_size=args.vocab_size, hidden_size=args.hidden_size,
                            num_layers=args.num_layers, num_heads=args.num_heads,
                            num_kv_heads=args.num_kv_heads, head_dim=args.head_dim,
                            intermediate_size=args.intermediate_size,
                            dtype=getattr(torch, args.dtype), seed=args.seed,
                            layer_windows=args.windows)
        cfg = MeasureConfig(
            schemes=tuple(s.strip() for s in args.schemes.split(",") if s.strip()),
            workload=args.workload, num_requests=args.num_requests, rate_per_s=args.rate,
            n=args.n, beam_width=args.beam_width, max_model_len=args.max_model_len,
            num_blocks=args.num_blocks, block_size=args.block_size,
            preemption=args.preemption, seed=args.seed, model=model, backend=args.backend,
            policy=args.policy, max_num_batched_tokens=args.max_num_batched_tokens,
            shared_tokens=args.shared_tokens,
            prefix_groups=args.prefix_groups)
        from . import INFO

        if args.out is not None:  # checked and created before the runs, not after
            prepare_out(str(args.out), ("measured_vs_simulated.*",))
        if not args.quiet:
            print(f"backend: {args.backend or INFO.name} on {INFO.device}")
        run(cfg, args.out, progress=None if not args.quiet else False, quiet=args.quiet)
        if args.budget:
            report = budget_check(model)
            print("budget:", report if report is not None else "no CUDA GPU: skipped")
    except (ValueError, TypeError, pagedsim.PagedSimError, OSError, CliError) as e:
        message = " ".join(str(e).split())
        if not isinstance(e, CliError):  # the library names parameters: name the flags
            message = name_the_flag(message, parser)
        print(f"python -m pagedsim.kernels.measure: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
