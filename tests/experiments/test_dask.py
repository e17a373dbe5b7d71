"""Sweeps and compare on a Dask cluster (``--dask ADDRESS``, :class:`DaskRunner`).

One two-worker :class:`distributed.LocalCluster` (worker processes, one thread each) is
shared by the module: a sweep and a compare through it write the same CSV bytes as the
local run, and a worker killed mid-sweep loses no configuration. Failure reporting runs
on an in-process cluster (threads), where a patched ``run_scheme`` reaches the workers.
Skipped with a reason where ``distributed`` is not installed (``pip install
"pagedsim[dask]"``), except the check of the message that says so.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from pagedsim.cli import main
from pagedsim.experiments import Experiment, compare, run_one, sweep_block_size
from pagedsim.experiments import dask_runner as dask_runner_module
from pagedsim.experiments.dask_runner import DaskError, DaskRunner

HAVE_DISTRIBUTED = importlib.util.find_spec("distributed") is not None
needs_distributed = pytest.mark.skipif(
    not HAVE_DISTRIBUTED, reason='distributed is not installed (pip install "pagedsim[dask]")')

#: A small sweep: three block sizes of a short ShareGPT-like load.
SWEEP = ["sweep", "block-size", "--values", "8,16,32", "--num-requests", "60", "--quiet"]


def _local_cluster(workers: int, processes: bool) -> object:
    from distributed import LocalCluster

    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes,
                        protocol="tcp", dashboard_address=":0", silence_logs=logging.ERROR)


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    """Two single-threaded worker processes behind a scheduler on this machine."""
    if not HAVE_DISTRIBUTED:
        pytest.skip('distributed is not installed (pip install "pagedsim[dask]")')
    with _local_cluster(2, processes=True) as c:
        yield c


@pytest.fixture(scope="module")
def threads_cluster() -> Iterator[object]:
    """One worker thread in this process: a monkeypatched ``run_scheme`` is what it runs."""
    if not HAVE_DISTRIBUTED:
        pytest.skip('distributed is not installed (pip install "pagedsim[dask]")')
    with _local_cluster(1, processes=False) as c:
        yield c


def _pagedsim_tasks_run(cluster: object) -> int:
    """Tasks of pagedsim's runner that finished on the cluster (keys 'pagedsim-...')."""
    return sum(g.state_counts["memory"] for name, g in cluster.scheduler.task_prefixes.items()
               if name.startswith("pagedsim-"))


@needs_distributed
def test_sweep_on_cluster_writes_the_local_csv(cluster: object, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    before = _pagedsim_tasks_run(cluster)
    assert main([*SWEEP, "--dask", cluster.scheduler_address, "--out",
                 str(tmp_path / "A")]) == 0
    assert _pagedsim_tasks_run(cluster) - before == 3  # the runs went to the cluster
    assert main([*SWEEP, "--jobs", "1", "--out", str(tmp_path / "B")]) == 0
    a = (tmp_path / "A" / "sweep_block_size.csv").read_bytes()
    b = (tmp_path / "B" / "sweep_block_size.csv").read_bytes()
    assert a == b
    assert len(a.splitlines()) == 4  # header + three block sizes
    assert capsys.readouterr().err == ""


@needs_distributed
def test_compare_on_cluster_gives_the_local_csvs(cluster: object) -> None:
    """compare's frames, as written to compare_summary.csv and compare_steps.csv (the
    writing is the same code either way; the sweep test above goes through the files)."""
    exp = Experiment(num_requests=40)
    schemes = ("contiguous-max", "paged")
    with DaskRunner(cluster.scheduler_address) as dask:
        on_cluster = compare(exp, schemes, progress=False)
    assert dask.failures == []
    local = compare(exp, schemes, jobs=1, progress=False)
    assert on_cluster.summary.to_csv(index=False) == local.summary.to_csv(index=False)
    assert list(on_cluster.steps) == list(schemes)
    for s in schemes:
        assert on_cluster.steps[s].to_csv(index=False) == local.steps[s].to_csv(index=False)


@needs_distributed
def test_progress_advances_once_per_finished_future(threads_cluster: object) -> None:
    exp = Experiment(num_requests=20)
    tasks = [(replace(exp, block_size=b), "paged") for b in (8, 16)]
    done: list[int] = []
    with DaskRunner(threads_cluster.scheduler_address) as dask:
        out = dask.run(tasks, on_done=lambda: done.append(1))
    assert len(done) == 2 and all(r is not None for r in out)
    assert [r[0]["block_size"] for r in out] == [8, 16]  # task order


@needs_distributed
def test_failed_configuration_is_reported_and_the_others_written(
        threads_cluster: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    real = run_one.run_scheme
    tries: list[int] = []

    def flaky(exp: Experiment, scheme: str, **kw: object) -> object:
        if exp.block_size == 16:
            tries.append(16)
            raise RuntimeError("boom at block 16")
        return real(exp, scheme, **kw)

    monkeypatch.setattr(run_one, "run_scheme", flaky)
    status = main([*SWEEP, "--dask", threads_cluster.scheduler_address,
                   "--out", str(tmp_path)])
    err = capsys.readouterr().err.splitlines()
    assert status == 1
    assert tries == [16, 16]  # tried twice
    assert len(err) == 1, err
    assert err[0].startswith("pagedsim: error: configuration failed 2 times (scheme=paged, "
                             "block_size=16, ")
    assert err[0].endswith("RuntimeError: boom at block 16")
    rows = (tmp_path / "sweep_block_size.csv").read_text().splitlines()
    block_sizes = [line.split(",")[rows[0].split(",").index("block_size")]
                   for line in rows[1:]]
    assert block_sizes == ["8", "32"]


@needs_distributed
def test_every_configuration_failed(threads_cluster: object, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    def broken(exp: Experiment, scheme: str, **kw: object) -> object:
        raise ValueError(f"no {scheme}")

    monkeypatch.setattr(run_one, "run_scheme", broken)
    status = main(["compare", "--schemes", "contiguous-max,paged", "--num-requests", "20",
                   "--quiet", "--dask", threads_cluster.scheduler_address,
                   "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 1 and captured.out == ""
    err = captured.err.splitlines()
    assert len(err) == 2 and "Traceback" not in captured.err
    assert "scheme=contiguous-max" in err[0] and err[0].endswith("ValueError: no "
                                                                  "contiguous-max")
    assert "scheme=paged" in err[1] and err[1].endswith("ValueError: no paged")
    assert list(tmp_path.iterdir()) == []


@needs_distributed
def test_unreachable_scheduler_is_one_line_naming_the_flag(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(dask_runner_module, "CONNECT_TIMEOUT_S", 1.0)
    start = time.monotonic()
    status = main([*SWEEP, "--no-write", "--dask", "tcp://127.0.0.1:9"])  # discard port
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith("pagedsim: error: argument --dask: cannot reach the Dask "
                             "scheduler at 'tcp://127.0.0.1:9' within 1 s")
    assert time.monotonic() - start < 15


@needs_distributed
def test_scheduler_without_workers(capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dask_runner_module, "CONNECT_TIMEOUT_S", 1.0)
    with _local_cluster(0, processes=False) as empty:
        status = main([*SWEEP, "--no-write", "--dask", empty.scheduler_address])
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and len(err) == 1, err
    assert "argument --dask:" in err[0] and "has no worker after 1 s" in err[0]


@needs_distributed
def test_cluster_with_other_pagedsim_code_is_refused(
        threads_cluster: object, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """This process's fingerprint differs from the cluster's (the patched function is
    sent to the cluster by value and runs there in other threads)."""
    real = dask_runner_module.code_fingerprint

    def fingerprint() -> str:
        return "0.0.0 edited" if threading.current_thread().name == "MainThread" else real()

    monkeypatch.setattr(dask_runner_module, "code_fingerprint", fingerprint)
    status = main([*SWEEP, "--no-write", "--dask", threads_cluster.scheduler_address])
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"pagedsim: error: argument --dask: the scheduler runs pagedsim "
                             f"{real()}, this process 0.0.0 edited")


def test_code_fingerprint_names_version_and_source() -> None:
    from pagedsim import __version__

    version, digest = dask_runner_module.code_fingerprint().split()
    assert version == __version__ and len(digest) == 12
    assert dask_runner_module.code_fingerprint() == f"{version} {digest}"


class _FakeClient:
    """Stands in for a ``distributed.Client`` in the liveness checks."""

    def __init__(self, workers: dict[str, int] | Exception) -> None:
        self.workers = workers

    def nthreads(self) -> dict[str, int]:
        if isinstance(self.workers, Exception):
            raise self.workers
        return self.workers


def test_cluster_lost_mid_run() -> None:
    from pagedsim.experiments.dask_runner import NO_WORKER_GRACE_S, ClusterLost

    runner = DaskRunner("tcp://127.0.0.1:8786")
    runner.client = _FakeClient({"tcp://w:1": 1})
    assert runner._check_alive(None) is None
    assert runner._check_alive(time.monotonic() - 1e6) is None  # workers came back
    runner.client = _FakeClient({})
    since = runner._check_alive(None)
    assert since is not None and runner._check_alive(since) == since  # within the grace
    with pytest.raises(ClusterLost, match="no worker for"):
        runner._check_alive(time.monotonic() - NO_WORKER_GRACE_S - 1)
    runner.client = _FakeClient(OSError("Timed out trying to connect"))
    with pytest.raises(ClusterLost, match="lost the Dask scheduler .* Timed out"):
        runner._check_alive(None)


def test_missing_distributed_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    with pytest.raises(DaskError, match=r'pip install "pagedsim\[dask\]"'):
        with DaskRunner("local"):
            pass


@pytest.mark.parametrize("text, value", [("local", "local"), (" LOCAL ", "local"),
                                         ("tcp://127.0.0.1:8786", "tcp://127.0.0.1:8786"),
                                         ("scheduler:8786", "scheduler:8786"),
                                         ("tls://[::1]:8786", "tls://[::1]:8786")])
def test_dask_address_accepts(text: str, value: str) -> None:
    from pagedsim.cli.argtypes import dask_address

    assert dask_address(text) == value


@pytest.mark.parametrize("text", ["abc", "tcp://host", "host:0", "host:65536", "http://h:1",
                                  "inproc://x", "-h:1", "h:1:2", ""])
def test_dask_address_refuses(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SWEEP, "--no-write", "--dask", text]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pagedsim: error: argument --dask: "), err


@needs_distributed
def test_killed_worker_loses_no_configuration(cluster: object) -> None:
    """Kill a worker process while it runs one of the sweep's configurations: the
    scheduler gives that configuration to another worker and the sweep comes back whole,
    equal to the local run. (Last in the module: the cluster's nanny restarts the worker.)"""
    from distributed import Client

    exp = Experiment(num_requests=100)
    block_sizes = [8, 16, 32, 64]
    result: dict[str, object] = {}

    def sweep() -> None:
        with DaskRunner(cluster.scheduler_address) as dask:
            result["df"] = sweep_block_size(exp, block_sizes, progress=False)
        result["failures"] = dask.failures

    thread = threading.Thread(target=sweep)
    thread.start()
    killed = None
    deadline = time.monotonic() + 30
    while killed is None and time.monotonic() < deadline and thread.is_alive():
        for ws in list(cluster.scheduler.workers.values()):
            running = [ts.key for ts in ws.processing if str(ts.key).startswith("pagedsim-")]
            if running:
                os.kill(ws.pid, signal.SIGKILL)
                killed = (ws.address, running)
                break
        time.sleep(0.01)
    thread.join(timeout=120)
    assert killed is not None, "the sweep finished before a worker could be killed"
    assert not thread.is_alive()
    assert result["failures"] == []
    df = result["df"]
    assert list(df["block_size"]) == block_sizes  # every configuration, in order
    local = sweep_block_size(exp, block_sizes, jobs=1, progress=False)
    assert df.equals(local)
    with Client(cluster.scheduler_address, timeout=10) as client:
        client.wait_for_workers(2, timeout=30)  # leave the cluster as found
