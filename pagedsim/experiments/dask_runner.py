"""Runs on a Dask cluster: ``pagedsim sweep NAME --dask ADDRESS`` (and ``compare``).

Inside ``with DaskRunner(address):`` every :func:`~pagedsim.experiments.run_many` call
(hence every sweep and :func:`~pagedsim.experiments.compare`) sends its configurations to
the workers of the ``distributed`` scheduler at ``address`` instead of joblib's local
processes. ``address`` ``"local"`` starts a :class:`distributed.LocalCluster` (one
single-threaded worker process per CPU, or ``workers``) for the block and closes it after.

Results are the same as a local run's, byte for byte once written: each configuration is
the same seeded :func:`~pagedsim.experiments.run_scheme` call, and the results come back
in task order whatever order the workers finish in. What the cluster adds:

- progress: the outer bar advances as each configuration's future finishes;
- a worker that dies loses nothing: the scheduler gives its configurations to another
  worker (distributed's own rescheduling);
- a configuration that fails twice (its run raised, or killed the workers it ran on
  ``distributed.scheduler.allowed-failures`` times) is left out of the results (its entry
  is ``None``) and recorded in :attr:`DaskRunner.failures` with its parameters and its
  error, while the other configurations still finish. If every configuration of a call
  failed there is nothing to return, and :class:`RunsFailed` is raised.

The scheduler (which unpickles the tasks) and every worker must import the same pagedsim
code: when connecting, a fingerprint of its source files is compared with this process's,
so a worker on another version fails at once instead of giving other numbers. A trace file
given as the workload must be readable at the same path on every worker. A cluster that
goes away mid-run (the scheduler unreachable, or no worker for :data:`NO_WORKER_GRACE_S`)
raises :class:`ClusterLost` instead of waiting forever.
``distributed`` is an optional dependency (``pip install "pagedsim[dask]"``); this module
imports it only when a runner starts.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import PagedSimError
from . import run_one

if TYPE_CHECKING:  # pragma: no cover
    from .spec import Experiment

#: Seconds to wait for the scheduler to answer, and then for its first worker, before
#: giving up: an unreachable address fails in seconds instead of distributed's 30 s.
CONNECT_TIMEOUT_S = 10.0
#: Times a configuration is tried before it is reported as failed.
ATTEMPTS = 2
#: Seconds a run waits with no worker in the cluster (all died, none came back) before
#: it gives up with :class:`ClusterLost`.
NO_WORKER_GRACE_S = 60.0
#: Seconds between checks that the cluster is still there while no run finishes.
POLL_S = 2.0
#: The address that means "start a LocalCluster on this machine for the run".
LOCAL = "local"

_ACTIVE: contextvars.ContextVar[DaskRunner | None] = contextvars.ContextVar(
    "pagedsim_dask_runner", default=None)


class DaskError(PagedSimError):
    """The Dask cluster cannot be used: ``distributed`` is missing, the scheduler does not
    answer, it has no worker, or its workers run another pagedsim."""


class ClusterLost(DaskError):
    """The cluster went away during a run: the scheduler stopped answering, or it had no
    worker for :data:`NO_WORKER_GRACE_S` seconds."""


class RunsFailed(PagedSimError):
    """Every configuration of one :meth:`DaskRunner.run` failed (each is listed in the
    runner's :attr:`~DaskRunner.failures`): there is no result to return."""


@dataclass(frozen=True)
class Failure:
    """One configuration that failed :data:`ATTEMPTS` times: its parameters (scheme and
    the experiment's fields), the last error as ``"Type: message"``, and the tries."""

    params: dict[str, Any]
    error: str
    attempts: int

    def describe(self) -> str:
        """One line: the parameters as ``key=value`` pairs, then the error."""
        pairs = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"configuration failed {self.attempts} times ({pairs}): {self.error}"


def active_runner() -> DaskRunner | None:
    """The :class:`DaskRunner` whose ``with`` block this code runs in, or None."""
    return _ACTIVE.get()


def task_params(exp: Experiment, scheme: str) -> dict[str, Any]:
    """What distinguishes one configuration, for a failure report: the scheme and the
    experiment fields that sweeps vary, then the rest of the workload."""
    return {"scheme": scheme, "block_size": exp.block_size,
            "rate_per_s": exp.rate_per_s, "n": exp.n, "beam_width": exp.beam_width,
            "preemption": exp.preemption, "workload": exp.workload,
            "num_requests": exp.num_requests, "seed": exp.seed, "model": exp.model,
            "gpu": exp.gpu, "num_gpus": exp.num_gpus}


def _run_task(exp: Experiment, scheme: str, keep_steps: bool) -> Any:
    """What a worker runs for one configuration. ``run_scheme`` is looked up when called,
    so the worker runs the function of its own pagedsim import."""
    return run_one.run_scheme(exp, scheme, progress=False, keep_steps=keep_steps)


def code_fingerprint() -> str:
    """``"<version> <hash>"``: pagedsim's version and a SHA-256 (first 12 hex digits) of
    the simulator's source files (``pagedsim/**/*.py`` and package data, without the
    kernels, by relative path), the same wherever and however pagedsim is installed.
    Run on the scheduler and on each worker when connecting."""
    from .. import __version__

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    files = [p for p in root.rglob("*") if p.suffix in (".py", ".md") and p.is_file()]
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("kernels/") or "__pycache__" in rel:
            continue
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{__version__} {digest.hexdigest()[:12]}"


def _error_text(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


@dataclass
class DaskRunner:
    """A connection to a Dask cluster for the runs made inside its ``with`` block.

    ``address``: a ``distributed`` scheduler address (``tcp://host:8786``,
    ``host:8786``) or ``"local"`` for a :class:`distributed.LocalCluster` of ``workers``
    single-threaded worker processes (None or -1: one per CPU), started on connecting and
    closed on exit. ``connect_timeout_s``: seconds to wait for the scheduler and then for
    its first worker. Connects on entry, or with ``lazy`` at the first run (the CLI: bad
    flags are reported before any connection); raises :class:`DaskError` if the cluster
    cannot be used. :attr:`failures` lists the configurations that failed
    :data:`ATTEMPTS` times.
    """

    address: str
    workers: int | None = None
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    lazy: bool = False
    failures: list[Failure] = field(default_factory=list)
    client: Any = field(default=None, init=False, repr=False)
    _stack: ExitStack | None = field(default=None, init=False, repr=False)
    _token: Any = field(default=None, init=False, repr=False)

    def __enter__(self) -> DaskRunner:
        if _ACTIVE.get() is not None:
            raise DaskError("a DaskRunner is already active in this context")
        if not self.lazy:
            self.connect()
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _ACTIVE.reset(self._token)
            self._token = None
        self.close()

    def connect(self) -> None:
        """Start the LocalCluster (for ``"local"``) and connect; check that there is a
        worker and that the workers import this pagedsim version. Does nothing when
        already connected."""
        if self.client is not None:
            return
        try:
            import distributed
        except ImportError:
            raise DaskError('needs the distributed package: pip install "pagedsim[dask]" '
                            '(or pip install "dask[distributed]")') from None
        with ExitStack() as stack:
            if self.address.strip().lower() == LOCAL:
                n = self.workers
                if n is None or n < 0:
                    n = os.cpu_count() or 1
                n = min(n, os.cpu_count() or 1)  # as the joblib runner: one per CPU at most
                # dashboard on a free port: 8787 may be another cluster's (a warning).
                cluster = stack.enter_context(distributed.LocalCluster(
                    n_workers=max(1, n), threads_per_worker=1, processes=True,
                    dashboard_address=":0", silence_logs=logging.ERROR))
                address = cluster.scheduler_address
            else:
                address = self.address
            self.client = stack.enter_context(self._connect(distributed, address))
            try:
                self._check_workers()
            except BaseException:
                self.client = None
                raise
            self._stack = stack.pop_all()

    def close(self) -> None:
        """Close the client (and the LocalCluster this runner started)."""
        stack, self._stack, self.client = self._stack, None, None
        if stack is not None:
            stack.close()

    def _connect(self, distributed: Any, address: str) -> Any:
        try:
            return distributed.Client(address, timeout=self.connect_timeout_s,
                                      set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise DaskError(f"cannot reach the Dask scheduler at {address!r} within "
                            f"{self.connect_timeout_s:g} s ({_error_text(exc)})") from None

    def _check_workers(self) -> None:
        """At least one worker, and the scheduler and every worker import the same
        pagedsim code as this process (:func:`code_fingerprint`)."""
        try:
            self.client.wait_for_workers(1, timeout=self.connect_timeout_s)
        except TimeoutError:
            raise DaskError(f"the Dask scheduler at {self.address!r} has no worker after "
                            f"{self.connect_timeout_s:g} s; start some with 'dask worker "
                            "ADDRESS'") from None
        mine = code_fingerprint()
        try:
            theirs = {"the scheduler": self.client.run_on_scheduler(code_fingerprint)}
            theirs.update(self.client.run(code_fingerprint))
        except Exception as exc:  # an ImportError raised there comes back as it is
            raise DaskError(f"the Dask cluster cannot import pagedsim ({_error_text(exc)}); "
                            "install this pagedsim on the scheduler and every worker"
                            ) from None
        for where, fingerprint in theirs.items():
            if fingerprint != mine:
                who = where if where == "the scheduler" else f"worker {where}"
                raise DaskError(f"{who} runs pagedsim {fingerprint}, this process {mine} "
                                "(version and source hash): install the same pagedsim on "
                                "the scheduler and every worker")

    def _check_alive(self, lonely_since: float | None) -> float | None:
        """Raise :class:`ClusterLost` if the scheduler is gone or has had no worker for
        :data:`NO_WORKER_GRACE_S`; returns when the workers were first found missing
        (None while there are some)."""
        try:
            workers = self.client.nthreads()
        except Exception as exc:  # OSError, or the client closed after failed reconnects
            raise ClusterLost(f"lost the Dask scheduler at {self.address!r} mid-run "
                              f"({_error_text(exc)})") from None
        if workers:
            return None
        now = time.monotonic()
        if lonely_since is None:
            return now
        if now - lonely_since > NO_WORKER_GRACE_S:
            raise ClusterLost(f"the Dask cluster at {self.address!r} has had no worker for "
                              f"{NO_WORKER_GRACE_S:g} s mid-run")
        return lonely_since

    def run(self, tasks: Sequence[tuple[Experiment, str]], keep_steps: bool = False,
            on_done: Callable[[], None] | None = None, desc: str = "runs") -> list[Any]:
        """Run every ``(experiment, scheme)`` task on the cluster; results in task order,
        ``None`` where a configuration failed :data:`ATTEMPTS` times (then recorded in
        :attr:`failures`). ``on_done`` is called once per configuration as it finishes
        (or finally fails)."""
        return self.map(_run_task, [(exp, scheme, keep_steps) for exp, scheme in tasks],
                        [task_params(exp, scheme) for exp, scheme in tasks],
                        on_done=on_done, desc=desc)

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]],
            params: Sequence[dict[str, Any]], on_done: Callable[[], None] | None = None,
            desc: str = "runs") -> list[Any]:
        """``fn(*a)`` on the cluster for each ``a`` in ``args``; results in order, ``None``
        for a call that failed :data:`ATTEMPTS` times, recorded in :attr:`failures` with
        its ``params``; raises :class:`RunsFailed` if every call failed. The engine of
        :meth:`run`, public for other picklable work."""
        self.connect()
        from distributed import as_completed

        before = len(self.failures)
        batch = uuid.uuid4().hex[:8]
        label = "-".join(desc.split()) or "runs"

        def submit(i: int, attempt: int) -> Any:
            key = f"pagedsim-{label}-{batch}-{i}-try{attempt}"
            return self.client.submit(fn, *args[i], key=key, pure=False)

        out: list[Any] = [None] * len(args)
        where: dict[str, tuple[int, int]] = {}  # future key -> (task index, attempt)
        pending = as_completed(loop=self.client.loop)
        for i in range(len(args)):
            future = submit(i, 1)
            where[future.key] = (i, 1)
            pending.add(future)
        lonely_since: float | None = None
        while where:
            # Wait for the next finished futures, checking now and then that there is
            # still a cluster to wait on.
            done = pending.next_batch(block=False)
            if not done:
                lonely_since = self._check_alive(lonely_since)
                _wait_one(pending, POLL_S)
                continue
            for future in done:
                i, attempt = where.pop(future.key)
                if future.status == "finished":
                    out[i] = future.result()
                    future.release()
                else:
                    error = _future_error(future)
                    future.release()
                    if attempt < ATTEMPTS:
                        retry = submit(i, attempt + 1)
                        where[retry.key] = (i, attempt + 1)
                        pending.add(retry)
                        continue
                    self.failures.append(Failure(dict(params[i]), error, attempt))
                if on_done is not None:
                    on_done()
        failed = self.failures[before:]
        if args and len(failed) == len(args):
            raise RunsFailed(f"every one of the {len(args)} configurations ({desc}) failed "
                             f"{ATTEMPTS} times; first: {failed[0].describe()}")
        return out


def _wait_one(pending: Any, timeout_s: float) -> None:
    """Block until a future in ``pending`` (an ``as_completed``) finishes, at most
    ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not pending.has_ready() and pending.count() and time.monotonic() < deadline:
        time.sleep(0.05)


def _future_error(future: Any) -> str:
    """A finished-with-error or cancelled future's error as one line."""
    if future.status == "cancelled":
        return "cancelled (the scheduler dropped the task)"
    try:
        exc = future.exception()
    except Exception as lost:  # the cancelled error itself, raised on asking
        return _error_text(lost)
    return _error_text(exc) if exc is not None else f"status {future.status}"
