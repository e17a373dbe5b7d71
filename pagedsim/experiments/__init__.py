"""Experiments: replay one workload through several schemes (``compare``) or sweep a knob.

Everything here is plain functions over an :class:`Experiment` (what to simulate) so the
CLI (``pagedsim compare``, ``pagedsim sweep``, ``pagedsim figures``), notebooks and tests
share one code path. The package is split by concern; every name is importable from
``pagedsim.experiments`` itself:

- :mod:`~pagedsim.experiments.spec`: :class:`Experiment`, its defaults and checks;
- :mod:`~pagedsim.experiments.runner`: :func:`run_scheme`, :func:`run_many`,
  :func:`compare` and the frames built from their results;
- :mod:`~pagedsim.experiments.dask_runner`: :class:`DaskRunner`, runs on a Dask cluster;
- :mod:`~pagedsim.experiments.sweeps`: the sweeps and :func:`run_sweep`;
- :mod:`~pagedsim.experiments.tables`: the plain-text tables the CLI prints;
- :mod:`~pagedsim.experiments.writers`: CSVs, PNGs and :func:`make_figures`;
- :mod:`~pagedsim.experiments.report`: ``figures/README.md`` from ``figures_readme.md``.

The default experiment is the vLLM paper's Figure 2 setting: OPT-13B on one A100-40GB
with ``gpu_memory_utilization = 1.0`` and 2 GiB of activations, which leaves 12 GiB of
KV cache = 15,728 token slots of 800 KiB (the paper's Table 1 says 15.7K), a
ShareGPT-like workload of 2,000 Poisson requests, seed 0.

Why 5 requests/s by default
---------------------------
Figure 2 shows the pool of a server under load, so the comparison is taken over the
*saturated* steps (requests waiting; see :mod:`pagedsim.metrics.summary`), and the load must
saturate every scheme. The paper measured its batch sizes at 2 req/s, but our roofline
cost model makes steps shorter than the paper's real system, so at 2 req/s the paged
scheme keeps up with arrivals and its pool is not full (mean batch ~16, not the paper's
30.42). Measured (2,000 requests, seed 0): at 5 req/s requests wait during >= 93% of the
simulated time for all four default schemes (contiguous-max 99%, pow2/oracle 98%, paged
93%), and the contiguous schemes' numbers are the same as at 2 req/s (they saturate at
any rate above ~1 req/s). Hence 5.

Parallel runs and clusters
--------------------------
Schemes (and sweep configurations) are independent, so they run in separate processes
through joblib (``jobs``: -1 = every CPU; 1 = in this process). Every run is seeded, so
the results do not depend on ``jobs`` (``tests/experiments/test_compare.py`` checks it). To spread a
large sweep over a Dask cluster (``pip install "pagedsim[dask]"``), run it inside a
:class:`~pagedsim.experiments.dask_runner.DaskRunner` (``pagedsim sweep NAME --dask
ADDRESS`` does); the runs then go to the cluster's workers and the results are the same::

    from pagedsim.experiments import DaskRunner, Experiment, sweep_block_size

    with DaskRunner("tcp://scheduler:8786") as dask:  # or DaskRunner("local")
        df = sweep_block_size(Experiment(num_requests=20_000))
    for failure in dask.failures:  # configurations that failed twice (no row in df)
        print(failure.describe())
"""

from __future__ import annotations

from .dask_runner import DaskRunner
from .report import reproduction_checks
from .runner import Comparison, compare, json_rows, run_many, run_scheme, shares_frame
from .spec import (
    DEFAULT_NUM_REQUESTS,
    DEFAULT_RATE,
    JSON_KEYS,
    MAX_NUM_REQUESTS,
    MAX_POOL_BLOCKS,
    PARTS,
    WORKLOAD_NAMES,
    Experiment,
    check_schemes,
    experiment_dict,
)
from .sweeps import (
    MAX_SWEEP_BLOCK_SIZE,
    SWEEP_BEAM_WIDTHS,
    SWEEP_BLOCK_SIZES,
    SWEEP_DEFAULT_WORKLOAD,
    SWEEP_NS,
    SWEEP_NUM_REQUESTS,
    SWEEP_PREEMPTION,
    SWEEP_PREEMPTION_BLOCK_SIZES,
    SWEEP_RATE,
    SWEEP_RATES,
    SWEEPS,
    check_values,
    run_sweep,
    run_sweep_on,
    sweep_base,
    sweep_block_size,
    sweep_preemption,
    sweep_rate,
    sweep_sharing,
)
from .tables import compare_table, sweep_table
from .writers import make_figures, thin_steps, write_compare, write_sweep

__all__ = [
    "DEFAULT_NUM_REQUESTS",
    "DEFAULT_RATE",
    "JSON_KEYS",
    "MAX_NUM_REQUESTS",
    "MAX_POOL_BLOCKS",
    "MAX_SWEEP_BLOCK_SIZE",
    "PARTS",
    "SWEEPS",
    "SWEEP_BEAM_WIDTHS",
    "SWEEP_BLOCK_SIZES",
    "SWEEP_DEFAULT_WORKLOAD",
    "SWEEP_NS",
    "SWEEP_NUM_REQUESTS",
    "SWEEP_PREEMPTION",
    "SWEEP_PREEMPTION_BLOCK_SIZES",
    "SWEEP_RATE",
    "SWEEP_RATES",
    "WORKLOAD_NAMES",
    "Comparison",
    "DaskRunner",
    "Experiment",
    "check_schemes",
    "check_values",
    "compare",
    "compare_table",
    "experiment_dict",
    "json_rows",
    "make_figures",
    "reproduction_checks",
    "run_many",
    "run_scheme",
    "run_sweep",
    "run_sweep_on",
    "shares_frame",
    "sweep_base",
    "sweep_block_size",
    "sweep_preemption",
    "sweep_rate",
    "sweep_sharing",
    "sweep_table",
    "thin_steps",
    "write_compare",
    "write_sweep",
]
