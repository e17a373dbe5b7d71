"""``figures/mooncake/``: paged allocation, vLLM's prefix cache and SGLang's radix tree on
the first 2,000 requests of the Mooncake conversation trace (Llama-3.1-8B on one H200),
and the prefix-cache hit rate against the KV pool's size on the same requests::

    python -m pagedsim.experiments.mooncake PATH/conversation_trace.jsonl --out figures/mooncake

It makes the runs of ``pagedsim compare`` (the three schemes) and ``pagedsim sweep
cache-size`` on that trace, writes their CSVs and figures, one figure of the six shares
over time for the three schemes, the runs with a host tier behind the GPU pool
(:mod:`.mooncake_host`: ``mooncake_host_tiers.*``), and ``README.md``, whose every number
is computed here from those results (nothing typed in). The trace is not part of this
repository (12,031 requests, Apache-2.0; ``tests/data`` holds a 300-line sample).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..workloads.traces import load_trace
from .cache_replay import replay
from .mooncake_host import host_runs, host_section, write_host
from .runner import Comparison, compare, shares_frame
from .spec import Experiment
from .sweeps import REPLAY_ROW, sweep_cache_size
from .tables import _pct
from .writers import _pyplot, _savefig, write_compare, write_sweep

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: The model and GPU of the runs (``--model`` / ``--gpu``); the other memory settings are
#: the paper preset's (utilization 1.0 and 2 GiB of activations), which the commands ask
#: for with :data:`PRESET_FLAG` (with ``--model`` or ``--gpu`` alone the CLI takes vLLM's).
MODEL, GPU = "llama-3.1-8b", "h200-141gb"
#: The flag that keeps the paper preset's utilization and activations under --model/--gpu.
PRESET_FLAG = "--preset paper-opt-13b"
#: Requests taken from the head of the trace (``--num-requests``).
NUM_REQUESTS = 2000
SCHEMES = ("paged", "prefix-cache", "radix")
CACHE_SCHEMES = ("prefix-cache", "radix")
#: KV pool sizes of the cache-size sweep (token slots), beside the H200's own pool.
POOL_SIZES = (500_000, 2_000_000, 4_000_000, 8_000_000, 16_000_000)


def mooncake_experiment(trace: str, num_requests: int = NUM_REQUESTS) -> Experiment:
    """What ``pagedsim compare --workload TRACE --num-requests N --preset paper-opt-13b
    --model llama-3.1-8b --gpu h200-141gb`` simulates."""
    return Experiment(model=MODEL, gpu=GPU, workload=trace, num_requests=num_requests)


def pool_sizes(exp: Experiment, sizes: Sequence[int] = POOL_SIZES) -> list[int]:
    """The swept pool sizes (token slots): ``sizes`` and the experiment's own pool."""
    return sorted({*sizes, exp.capacity_slots()})


def commands(trace: str, out: str, exp: Experiment, sizes: Sequence[int]) -> list[str]:
    """The CLI commands whose runs :func:`make_mooncake_figures` makes (``trace`` as it
    should be written in them; ``sizes`` the swept pool sizes)."""
    common = (f"--workload {trace} --num-requests {exp.num_requests} {PRESET_FLAG} "
              f"--model {MODEL} --gpu {GPU}")
    sizes = ",".join(str(c) for c in sizes)
    return [f"pagedsim compare {common} --schemes {','.join(SCHEMES)} --out {out}",
            f"pagedsim sweep cache-size {common} --values {sizes} --out {out}"]


def make_mooncake_figures(trace: str, out: str | os.PathLike[str] = "figures/mooncake",
                          num_requests: int = NUM_REQUESTS, jobs: int | None = None,
                          progress: bool | None = None,
                          sizes: Sequence[int] = POOL_SIZES) -> list[Path]:
    """Run the comparison and the cache-size sweep (pool sizes ``sizes`` and the H200's,
    token slots) on ``trace`` and write everything into ``out``; returns the paths."""
    exp = mooncake_experiment(trace, num_requests)
    cmp = compare(exp, SCHEMES, jobs=jobs, progress=progress)
    shown = replace(cmp, summary=_trace_as_path(cmp.summary, trace))
    paths = write_compare(shown, out, max_step_rows=1000)
    paths.append(write_shares_over_time(cmp, out))
    sweep = sweep_cache_size(exp, pool_sizes(exp, sizes), CACHE_SCHEMES, jobs=jobs,
                             progress=progress)
    paths += write_sweep("cache-size", _trace_as_path(sweep, trace), out, experiment=exp)
    unbounded = replay(exp.requests(), exp.block_size, math.inf)
    host = host_runs(exp, cmp, jobs=jobs, progress=progress)
    paths += write_host(_trace_as_path(host, trace), out)
    path = Path(out) / "README.md"
    path.write_text(mooncake_readme(cmp, sweep, unbounded.hit_rate, out) + "\n"
                    + host_section(host, exp, out), encoding="utf-8")
    paths.append(path)
    return paths


def _trace_as_path(df: pd.DataFrame, trace: str) -> pd.DataFrame:
    """``df`` with its ``workload`` column naming the trace ``PATH/<its file name>``, as
    the README's commands do: the CSVs are then the same wherever the trace lies, and name
    no folder of the machine that made them."""
    if "workload" not in df.columns:
        return df
    return df.assign(workload=f"PATH/{os.path.basename(trace)}")


def write_shares_over_time(cmp: Comparison, out: str | os.PathLike[str]) -> Path:
    """``mooncake_shares_over_time.png``: for each scheme, the six shares of the pool
    (percent of its slots) against simulated time, one panel per scheme, one time axis."""
    from ..plots.timeline import memory_timeline

    plt = _pyplot()
    fig, axes = plt.subplots(len(cmp.steps), 1, figsize=(10, 2.6 * len(cmp.steps) + 0.6),
                             sharex=True, squeeze=False)
    for ax, (name, steps) in zip(axes[:, 0], cmp.steps.items(), strict=True):
        memory_timeline(steps, ax=ax, fractions=True, queue=False, title=name)
        if ax is not axes[-1, 0]:
            ax.set_xlabel("")
        legend = ax.get_legend()
        if legend is not None:  # one key for the figure, under it
            legend.remove()
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    path = Path(out) / "mooncake_shares_over_time.png"
    _savefig(fig, path)
    return path


def _row(df: pd.DataFrame, scheme: str, capacity: int) -> dict[str, Any]:
    """The sweep's row of ``scheme`` at pool size ``capacity`` (token slots)."""
    g = df[(df["scheme"] == scheme) & (df["capacity_slots"] == capacity)]
    return g.iloc[0].to_dict()


def mooncake_readme(cmp: Comparison, sweep: pd.DataFrame, unbounded_hit_rate: float,
                    out: str | os.PathLike[str] = "figures/mooncake") -> str:
    """``README.md`` of the Mooncake figures, from the comparison ``cmp``, the cache-size
    sweep's frame and the scheduler-free hit rate of an unbounded cache."""
    exp = cmp.experiment
    df = shares_frame(cmp.summary, cmp.part).set_index("scheme")
    requests = exp.requests()
    mean_prompt = sum(r.prompt_len for r in requests) / len(requests)
    longest = max(r.prompt_len for r in requests)
    pool = exp.capacity_slots()
    paged, pc, rx = df.loc["paged"], df.loc["prefix-cache"], df.loc["radix"]
    trace = os.path.basename(exp.workload)
    sizes = sorted(int(c) for c in sweep["capacity_slots"].unique())
    cmds = "\n".join(commands(f"PATH/{trace}", str(out), exp, sizes))
    batched = exp.scheduler_config().max_num_batched_tokens
    part = "saturated part" if cmp.part == "saturated" else "whole run"

    def tokens(x: float) -> str:
        return f"{int(x):,}"

    saved = 1 - pc["prefill_tokens_computed"] / paged["prefill_tokens_computed"]
    realized = pc["prefix_hit_rate"] / unbounded_hit_rate if unbounded_hit_rate else math.nan
    same = pc["prefix_hits"] == rx["prefix_hits"]
    both = (f"Both caching schemes served the same {tokens(pc['prefix_hits'])} prompt "
            "tokens from the cache" if same else
            f"prefix-cache served {tokens(pc['prefix_hits'])} prompt tokens from the cache "
            f"and radix {tokens(rx['prefix_hits'])}")
    big = sizes[-1]
    big_hit = _pct(_row(sweep, "prefix-cache", big)["prefix_hit_rate"])
    gap = 100 * max(abs(_row(sweep, "prefix-cache", c)["prefix_hit_rate"]
                        - _row(sweep, "radix", c)["prefix_hit_rate"]) for c in sizes)
    curve = "; ".join(
        f"{c:,} slots: prefix-cache {_pct(_row(sweep, 'prefix-cache', c)['prefix_hit_rate'])}%"
        f", radix {_pct(_row(sweep, 'radix', c)['prefix_hit_rate'])}%, no scheduler "
        f"{_pct(_row(sweep, REPLAY_ROW, c)['prefix_hit_rate'])}%" for c in sizes)
    table = ["| scheme | " + " | ".join(("token", "reserved", "internal frag", "cached",
                                           "external frag", "free")) +
             " | prefix hit rate | prefill computed (tokens) | prefill from cache (tokens) "
             "| evictions (blocks) | mean batch | preemptions | rejected |",
             "|---" * 14 + "|"]
    for name in df.index:
        r = df.loc[name]
        table.append(
            f"| {name} | " + " | ".join(f"{_pct(r[c])}%" for c in (
                "token", "reserved", "internal_frag", "cached", "external_frag", "free"))
            + f" | {_pct(r['prefix_hit_rate'])}% | {tokens(r['prefill_tokens_computed'])} | "
            f"{tokens(r['prefill_tokens_cached'])} | {tokens(r['evictions'])} | "
            f"{r['mean_batch_size']:.1f} | {int(r['preemptions'])} | {int(r['rejected'])} |")
    return f"""# Prefix caching on the Mooncake conversation trace

Made by `python -m pagedsim.experiments.mooncake PATH/{trace} --out {out}`
(`pagedsim.experiments.mooncake`; PATH is where the trace is, outside this repository),
which makes the runs of

```
{cmds}
```

and writes this file from their results. Setting: {exp.label()}. The
{len(requests):,} requests have prompts of {mean_prompt:,.0f} tokens on average (the longest
{longest:,}); the default `v0` policy prefills a whole prompt in one step, since
`max_num_batched_tokens` defaults to the model's context ({batched:,} tokens), so no
request is rejected for its length.

## Where the pool goes ({part}, time-weighted)

{chr(10).join(table)}

The six shares over time, one panel per scheme: `mooncake_shares_over_time.png`; each
scheme alone with its running and waiting requests: `compare_timeline_<scheme>.png`; the
bars: `compare_shares.png`; every number: `compare_summary.csv` and `compare_steps.csv`.

{both}: {_pct(pc['prefix_hit_rate'])}% of the {tokens(pc['prefix_queries'])} prompt tokens
looked up (recomputations included). The prefill computed {tokens(pc['prefill_tokens_computed'])}
tokens instead of paged's {tokens(paged['prefill_tokens_computed'])}, {_pct(saved)}% fewer.

How much reuse the trace offers at all: the same prompts in arrival order, with no
scheduler and a cache that never evicts, hit {_pct(unbounded_hit_rate)}% (`pagedsim
cache-replay` at block size {exp.block_size}); prefix-cache's {_pct(pc['prefix_hit_rate'])}%
is {_pct(realized)}% of that. The pool holds {pool:,} slots; over the {part} its token
share is {_pct(pc['token'])}% with prefix-cache, at a mean batch of
{pc['mean_batch_size']:.1f} requests, and cached blocks keep {_pct(pc['cached'])}% of it
({_pct(rx['cached'])}% with radix): what running requests do not hold is all a cache has.

## Hit rate against the pool's size

`sweep_cache_size_prefix_hit_rate.png`, `sweep_cache_size.csv`: the same requests with pools
of {", ".join(f"{c:,}" for c in sizes)} token slots ({pool:,} is the H200's). {curve}.
At {big:,} slots prefix-cache hits {big_hit}% of the prompt tokens. prefix-cache and radix
differ by at most {gap:.2f} points of hit rate at any of these sizes, so their curves lie on
each other. The no-scheduler curve inserts
prompt blocks only; the simulated caches also keep the blocks that decoding fills, and part
of their pool holds running requests.
"""


def main(argv: Sequence[str] | None = None) -> int:
    from ..cli.base import ArgumentParser, CliError
    from ..cli.outdir import prepare_out
    from ..workloads.workload import MAX_NUM_REQUESTS

    prog = "python -m pagedsim.experiments.mooncake"
    p = ArgumentParser(prog=prog, description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("trace", help="the Mooncake conversation trace (conversation_trace.jsonl)")
    p.add_argument("--out", default="figures/mooncake", help="folder to write "
                   "(default figures/mooncake)")
    p.add_argument("--num-requests", type=int, default=NUM_REQUESTS,
                   help=f"requests from the head of the trace (default {NUM_REQUESTS})")
    p.add_argument("--jobs", type=int, default=-1, help="worker processes (-1: every CPU)")
    try:  # every error one line, exit 2; the trace and --out checked before the runs
        args = p.parse_args(argv)
        if not 1 <= args.num_requests <= MAX_NUM_REQUESTS:
            raise CliError(f"argument --num-requests: must be from 1 to "
                           f"{MAX_NUM_REQUESTS:,}, got {args.num_requests:,}")
        try:
            load_trace(args.trace, max_requests=args.num_requests)
        except (ValueError, OSError) as exc:
            raise CliError(f"argument trace: {' '.join(str(exc).split())}") from None
        prepare_out(args.out, ("compare_*", "sweep_*", "mooncake_*", "README.md"))
    except CliError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    for path in make_mooncake_figures(args.trace, args.out, args.num_requests, args.jobs,
                                      progress=sys.stderr.isatty()):
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
