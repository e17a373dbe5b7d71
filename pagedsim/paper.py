"""The vLLM paper's reference numbers, as data, to print beside our own.

Source: W. Kwon, Z. Li, S. Zhuang, Y. Sheng, L. Zheng, C. H. Yu, J. E. Gonzalez, H. Zhang,
I. Stoica, "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv 2309.06180). Numbers transcribed from the paper via
``../shared/DESIGN.md``; each constant names the figure, table or section it comes from.
Nothing here is computed; these are the targets the simulator is compared with.

The paper's systems map to our schemes: Orca (Max / Pow2 / Oracle) are contiguous
reservations of ``max_model_len``, the next power of two of the true length, and exactly
the true length (buddy-placed, as the paper assumes); vLLM is ``paged`` with blocks of 16.
"""

from __future__ import annotations

import math

#: Our scheme name -> the paper's system name.
PAPER_NAMES: dict[str, str] = {
    "contiguous-max": "Orca (Max)",
    "contiguous-pow2": "Orca (Pow2)",
    "contiguous-oracle": "Orca (Oracle)",
    "paged": "vLLM",
}

#: Figure 2: share of KV-cache memory (OPT-13B, one A100-40GB, ShareGPT-like load), as
#: fractions. The paper's four bars are token states / reservation / internal
#: fragmentation / "external fragmentation & others"; we file the last under
#: ``external_frag``. Orca (Oracle) has no internal fragmentation (the figure prints "-";
#: its three parts sum to 100%). For vLLM the figure gives only the token share (96.3%);
#: the other parts are NaN (not given). Shares of the Orca rows sum to 0.999-1.000
#: (rounding in the paper).
FIGURE2_SHARES: dict[str, dict[str, float]] = {
    "contiguous-max": {"token": 0.204, "reserved": 0.133, "internal_frag": 0.573,
                       "external_frag": 0.089},
    "contiguous-pow2": {"token": 0.268, "reserved": 0.179, "internal_frag": 0.136,
                        "external_frag": 0.416},
    "contiguous-oracle": {"token": 0.382, "reserved": 0.252, "internal_frag": 0.0,
                          "external_frag": 0.366},
    "paged": {"token": 0.963, "reserved": math.nan, "internal_frag": math.nan,
              "external_frag": math.nan},
}
FIGURE2_SOURCE = "vLLM paper Fig. 2 (OPT-13B, A100-40GB, ShareGPT)"

#: Figure 13: mean batch size (requests per iteration), OPT-13B on one A100-40GB.
#: ``sharegpt`` at 2 requests/s, ``alpaca`` at 30 requests/s.
FIGURE13_BATCH: dict[str, dict[str, float]] = {
    "sharegpt": {"contiguous-max": 7.00, "contiguous-pow2": 9.81,
                 "contiguous-oracle": 13.62, "paged": 30.42},
    "alpaca": {"contiguous-max": 7.00, "contiguous-pow2": 43.24,
               "contiguous-oracle": 72.75, "paged": 132.44},
}
#: The request rate (requests/s) at which each Figure 13 panel was measured.
FIGURE13_RATE: dict[str, float] = {"sharegpt": 2.0, "alpaca": 30.0}
FIGURE13_SOURCE = "vLLM paper Fig. 13 (OPT-13B; ShareGPT 2 req/s, Alpaca 30 req/s)"

#: Section 6.2 and Figure 12 (OPT-13B, ShareGPT): the request rate vLLM sustains before its
#: normalized latency rises sharply, over Orca's, as (low, high) ranges across the paper's
#: models: 1.7-2.7x Orca (Oracle) and 2.7-8x Orca (Max).
FIGURE12_RATIOS: dict[str, tuple[float, float]] = {
    "contiguous-oracle": (1.7, 2.7),
    "contiguous-max": (2.7, 8.0),
}
FIGURE12_SOURCE = "vLLM paper section 6.2, Fig. 12 (ShareGPT)"

#: Section 6.3: memory saved by sharing, ``1 - physical / logical`` blocks, as fractions.
#: Alpaca-like load: parallel sampling at n = 2, 4, 6 and beam search at width 2, 4, 6.
SHARING_SAVINGS_ALPACA: dict[str, dict[int, float]] = {
    "parallel": {2: 0.0609, 4: 0.0853, 6: 0.0979},
    "beam": {2: 0.3756, 4: 0.5313, 6: 0.5516},
}
#: Section 6.3, ShareGPT-like load: only ranges over the same n / widths are given.
SHARING_SAVINGS_SHAREGPT_RANGE: dict[str, tuple[float, float]] = {
    "parallel": (0.162, 0.305),
    "beam": (0.443, 0.663),
}
SHARING_SOURCE = "vLLM paper section 6.3 (OPT-13B, Alpaca)"

#: Table 1: model sizes and KV capacity (slots = tokens the KV cache holds).
TABLE1: dict[str, dict[str, float | int | str]] = {
    "opt-13b": {"gpus": "1 x A100-40GB", "weights_gb": 26, "kv_gb": 12, "kv_slots": 15_700},
    "opt-66b": {"gpus": "4 x A100-40GB", "weights_gb": 132, "kv_gb": 21, "kv_slots": 9_700},
    "opt-175b": {"gpus": "8 x A100-80GB", "weights_gb": 346, "kv_gb": 264, "kv_slots": 60_100},
}
TABLE1_SOURCE = "vLLM paper Table 1 (KV slots rounded to 0.1K in the paper)"

#: Workload means (tokens), Figure 11.
WORKLOAD_MEAN_LENS: dict[str, tuple[float, float]] = {
    "sharegpt": (161.31, 337.99),
    "alpaca": (19.31, 58.45),
}

#: Section 7.2 (qualitative): block size 16 is the default; too small under-uses the GPU,
#: too large raises internal fragmentation. Section 7.3: recomputation's overhead stays
#: within 20% of swapping's latency; swapping is slow with small blocks.
DEFAULT_BLOCK_SIZE = 16


def paper_key(scheme: str) -> str:
    """The paper's row for one of our schemes: contiguous schemes by their reservation
    (``contiguous-oracle-first-fit`` -> ``contiguous-oracle``: the paper's numbers are
    for buddy placement, so other placements are compared with the same reservation);
    ``paged`` with any block size -> ``paged``."""
    parts = scheme.split("-")
    if parts[0] == "contiguous" and len(parts) >= 2:
        return f"contiguous-{parts[1]}"
    return scheme


def figure2_share(scheme: str, category: str) -> float:
    """The paper's Figure 2 share (fraction) of ``category`` for our ``scheme``, NaN if the
    paper gives none (unknown scheme, or a part of vLLM's bar the paper does not print).
    ``free`` is never printed by the paper (its bars have no free part): NaN."""
    return FIGURE2_SHARES.get(paper_key(scheme), {}).get(category, math.nan)


def figure13_batch(scheme: str, workload: str = "sharegpt") -> float:
    """The paper's Figure 13 mean batch size for our ``scheme`` (NaN if none)."""
    return FIGURE13_BATCH.get(workload, {}).get(paper_key(scheme), math.nan)
