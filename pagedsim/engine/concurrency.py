"""A cap on the requests in the system, as ``benchmark_serving --max-concurrency N``.

vLLM's benchmark client draws its arrival times (Poisson, or all at once for ``--rate
inf``) and then sends each request only once it holds one of ``N`` permits (an asyncio
semaphore); a request gives its permit back when its response ends, successful or not.
Its clock for TTFT and end-to-end latency starts when the request is *sent*, so a
request that waited for a permit is timed from then.

:class:`ConcurrencyGate` does the same in front of the scheduler: it hands the simulator
the next request only while fewer than ``N`` are in the system (handed out and not yet
finished or rejected), and a request that had to wait arrives, as far as the engine and
its record are concerned, when a permit came free (its ``arrival_s`` is that time). The
order of requests never changes. Without a cap it passes the requests through as they
are.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from ..validate import check_int
from ..workloads.workload import Request


class ConcurrencyGate:
    """Requests in arrival order, at most ``max_concurrency`` in the system at once
    (None: no cap). The simulator calls :meth:`next` for the next request to add (None:
    none now, the cap is reached or no request is left) and :meth:`release` as requests
    finish or are rejected."""

    __slots__ = ("_requests", "_cap", "_in_system", "_exhausted")

    def __init__(self, requests: Iterable[Request], max_concurrency: int | None = None) -> None:
        if max_concurrency is not None:
            check_int("max_concurrency", max_concurrency, minimum=1)
        self._requests: Iterator[Request] = iter(requests)
        self._cap = max_concurrency
        self._in_system = 0  # handed out (pending or in the scheduler), not yet done
        self._exhausted = False

    @property
    def in_system(self) -> int:
        """Requests handed out and not yet released."""
        return self._in_system

    def next(self, now_s: float) -> Request | None:
        """The next request, arriving no earlier than ``now_s`` if it waited for a permit
        (the clock when the permit came free); None while the cap is reached, or when no
        request is left."""
        if self._exhausted or (self._cap is not None and self._in_system >= self._cap):
            return None
        request = next(self._requests, None)
        if request is None:
            self._exhausted = True
            return None
        self._in_system += 1
        if self._cap is not None and request.arrival_s < now_s:
            # It was due while every permit was held: sent when this one came free.
            return replace(request, arrival_s=now_s)
        return request

    def release(self, count: int) -> None:
        """``count`` requests left the system (finished or rejected): their permits are
        free again."""
        if count > self._in_system:
            raise ValueError(f"{count} requests released, {self._in_system} in the system")
        self._in_system -= count
