"""``--dask ADDRESS`` for ``pagedsim compare`` and ``pagedsim sweep``: run the
configurations on a Dask cluster (:class:`pagedsim.experiments.DaskRunner`).

Light at import: ``distributed`` is imported only when a run starts with ``--dask``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from .argtypes import dask_address
from .base import PROG, CliError

#: Exit status when configurations failed on the cluster (the others were written).
EXIT_FAILED_RUNS = 1


def add_dask_option(p: argparse.ArgumentParser) -> None:
    """The ``--dask ADDRESS`` option."""
    p.add_argument("--dask", type=dask_address, default=None, metavar="ADDRESS",
                   help="run the configurations on the Dask cluster whose scheduler is at "
                        "ADDRESS (tcp://HOST:PORT), or 'local' to start a LocalCluster "
                        "of --jobs single-threaded worker processes for the run; needs "
                        "pip install \"pagedsim[dask]\". Same results as without it; a "
                        "configuration that fails twice is reported and the others are "
                        "still written (exit status 1)")


def with_dask(run: Callable[[argparse.Namespace], int]
              ) -> Callable[[argparse.Namespace], int]:
    """``run`` (a command's ``run_<cmd>``) with ``--dask``: its runs go to the cluster.

    The runner connects at the first run, so every flag is checked before any connection;
    a cluster that cannot be used is one ``argument --dask`` error (exit status 2). Each
    configuration that failed twice is one stderr line after the output, as is a cluster
    lost mid-run, and the exit status is then :data:`EXIT_FAILED_RUNS`.
    """

    @functools.wraps(run)
    def run_with_dask(args: argparse.Namespace) -> int:
        if getattr(args, "dask", None) is None:
            return run(args)
        from ..experiments import dask_runner
        from ..experiments.dask_runner import ClusterLost, DaskError, DaskRunner, RunsFailed

        runner = DaskRunner(args.dask, workers=args.jobs, lazy=True,
                            connect_timeout_s=dask_runner.CONNECT_TIMEOUT_S)
        try:
            with runner:
                status = run(args)
        except RunsFailed:  # nothing to print or write: the failures say why
            status = EXIT_FAILED_RUNS
        except ClusterLost as exc:  # mid-run: what was written before stays
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            status = EXIT_FAILED_RUNS
        except DaskError as exc:
            raise CliError(f"argument --dask: {exc}") from None
        for failure in runner.failures:
            print(f"{PROG}: error: {failure.describe()}", file=sys.stderr)
        return status or (EXIT_FAILED_RUNS if runner.failures else 0)

    return run_with_dask
