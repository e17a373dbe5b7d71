"""``figures/README.md``: the reproduction checks against the vLLM paper and the tables,
filled into the prose of ``figures_readme.md`` (package data beside this module).

Every number in the README comes from the run or from :mod:`pagedsim.paper`; the template
holds only prose and ``${placeholders}`` (:class:`string.Template` syntax).
"""

from __future__ import annotations

from importlib import resources
from string import Template
from typing import TYPE_CHECKING

from ..paper import FIGURE13_RATE
from ..textfmt import format_table
from .runner import Comparison, shares_frame
from .tables import _pct, compare_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: The README's template, a file of this package (``[tool.setuptools.package-data]``).
README_TEMPLATE = "figures_readme.md"


def reproduction_checks(cmp: Comparison, sharing: pd.DataFrame | None = None,
                        block_size: pd.DataFrame | None = None
                        ) -> list[tuple[str, str, str, bool]]:
    """The reproduction targets, checked on our numbers: rows of
    ``(claim, ours, paper, holds)``. ``cmp`` must hold the four default schemes;
    ``sharing`` is :func:`~pagedsim.experiments.sweep_sharing`'s frame (Alpaca-like) and
    ``block_size`` :func:`~pagedsim.experiments.sweep_block_size`'s, if available."""
    df = shares_frame(cmp.summary, cmp.part).set_index("scheme")
    tok = df["token"]
    batch = df["mean_batch_size"]
    rows: list[tuple[str, str, str, bool]] = []
    if "paged" in tok:
        rows.append(("paged token share >= 95%", _pct(tok["paged"]) + "%", "96.3%",
                     bool(tok["paged"] >= 0.95)))
    if "contiguous-pow2" in tok:
        gap = abs(tok["contiguous-pow2"] - 0.268)
        rows.append(("contiguous-pow2 token share within 8 points of the paper's",
                     _pct(tok["contiguous-pow2"]) + "%", "26.8%", bool(gap <= 0.08)))
    if "contiguous-max" in tok:
        rows.append(("contiguous-max token share <= 35%", _pct(tok["contiguous-max"]) + "%",
                     "20.4%", bool(tok["contiguous-max"] <= 0.35)))
    order = [s for s in ("contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged")
             if s in tok]
    if len(order) == 4:
        ours = " < ".join(f"{_pct(tok[s])}" for s in order)
        strict = bool(all(tok[a] < tok[b] for a, b in zip(order[:-1], order[1:], strict=True)))
        rows.append(("token share: max < pow2 < oracle < paged", ours,
                     "20.4 < 26.8 < 38.2 < 96.3", strict))
    if "paged" in batch and "contiguous-oracle" in batch:
        ratio = batch["paged"] / batch["contiguous-oracle"]
        rows.append(("paged mean batch >= 2 x oracle's",
                     f"{batch['paged']:.2f} vs {batch['contiguous-oracle']:.2f} "
                     f"({ratio:.2f}x)", "30.42 vs 13.62 (2.23x)", bool(ratio >= 2.0)))
    if block_size is not None and len(block_size):
        best = int(block_size.loc[block_size["throughput_tokens_per_s"].idxmax(),
                                  "block_size"])
        rows.append(("throughput peaks at a block size in 8..64", f"{best} tokens",
                     "16 tokens", bool(8 <= best <= 64)))
    if sharing is not None:
        for mode, label in (("parallel", "parallel-sampling"), ("beam", "beam-search")):
            g = sharing[sharing["mode"] == mode].sort_values("width")
            if len(g) < 2:
                continue
            vals = g["sharing_saving"].to_numpy()
            widths = "/".join(str(int(w)) for w in g["width"])
            paper = "/".join(_pct(v) for v in g["paper_saving"])
            rows.append((f"{label} savings rise with {'n' if mode == 'parallel' else 'width'}"
                         f" ({widths})", "/".join(_pct(v) for v in vals) + "%", paper + "%",
                         bool((vals[1:] > vals[:-1]).all())))
    return rows


def figures_readme(cmp: Comparison, tables: dict[str, str],
                   sharing: pd.DataFrame | None,
                   block_size: pd.DataFrame | None = None,
                   fig12: pd.DataFrame | None = None) -> str:
    """figures/README.md, written from the numbers just computed (nothing typed in):
    ``cmp`` is the default comparison, ``tables`` each sweep's :func:`sweep_table` text
    by sweep name (in order), ``sharing`` and ``block_size`` those sweeps' frames if they
    ran, ``fig12`` the Figure 12 runs (:mod:`pagedsim.experiments.figure12`) if they ran."""
    checks = reproduction_checks(cmp, sharing, block_size)
    df = shares_frame(cmp.summary, cmp.part).set_index("scheme")
    cost = cmp.experiment.cost_model()
    best_bs = (int(block_size.loc[block_size["throughput_tokens_per_s"].idxmax(),
                                  "block_size"]) if block_size is not None else 16)

    def kv_read_factor(bs: int) -> str:  # the cost model's slowdown of K/V reads
        return f"{1 + cost.kv_block_overhead_tokens / bs:.2f}"
    check_table = format_table(["target", "ours", "paper", "holds"],
                               [(c, o, p, "yes" if ok else "NO") for c, o, p, ok in checks])
    sweeps = "".join(f"\n## pagedsim sweep {name}\n\n```\n{text}\n```\n"
                     for name, text in tables.items())
    template = resources.files(__package__).joinpath(README_TEMPLATE).read_text("utf-8")
    return Template(template).substitute(
        checks=check_table,
        compare=compare_table(cmp),
        sweeps=sweeps,
        figure12=_figure12_section(fig12),
        paper_rate=f"{FIGURE13_RATE['sharegpt']:g}",
        compare_rate=f"{cmp.experiment.rate_per_s:g}",
        beam_decay=f"{cmp.experiment.scheduler_config().beam_decay:g}",
        pow2_token=_pct(df.at["contiguous-pow2", "token"]),
        pow2_internal=_pct(df.at["contiguous-pow2", "internal_frag"]),
        pow2_external=_pct(df.at["contiguous-pow2", "external_frag"]),
        oracle_internal=_pct(df.at["contiguous-oracle", "internal_frag"]),
        oracle_external=_pct(df.at["contiguous-oracle", "external_frag"]),
        block_overhead=f"{cost.kv_block_overhead_tokens:g}",
        kv_1=kv_read_factor(1), kv_4=kv_read_factor(4), kv_16=kv_read_factor(16),
        kv_64=kv_read_factor(64), best_bs=str(best_bs),
        policy=cmp.experiment.policy,
    )


def _figure12_section(fig12: pd.DataFrame | None) -> str:
    """The README's Figure 12 section (empty when its runs did not run)."""
    if fig12 is None:
        return ""
    from .figure12 import FIGURE12_RATES, ratio_lines

    rates = ", ".join(f"{r:g}" for r in FIGURE12_RATES)
    return ("\n## Figure 12: normalized latency against the request rate\n\n"
            "`figure12.csv` (one run per rate and scheme: the rate sweep's setting at "
            f"{rates} req/s), `figure12_normalized_latency.png` (the median normalized "
            "latency of each scheme, its sustained rate marked; "
            "`pagedsim.experiments.figure12` says how that rate is read).\n\n"
            "```\n" + "\n".join(ratio_lines(fig12)) + "\n```\n")
