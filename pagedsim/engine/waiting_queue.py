"""The waiting queue: the order the scheduler tries requests in, and bounded memory however
long it grows.

An overloaded run's queue grows without bound: a day of traffic at 5 req/s on a server
that finishes 3 a second leaves hundreds of thousands of requests waiting by its end.
The scheduler only ever looks at the front of the queue (admission stops at the first
request that has to wait; ``lpm`` orders at most
:data:`LPM_MAX_WAITING` requests), so :class:`WaitingQueue` keeps a
bounded front of :class:`~.plan.SequenceGroup` objects, and behind it only what arrived:
each request and the sequence id it was given on arrival, made a group when it moves up
to the front. The queue is the front followed by the rest, in order; ``len`` counts both.
A plain request (one sequence, no prefix, no named prompt: every synthetic ShareGPT or
Alpaca request, every plain trace row) is kept behind as five numbers (40 bytes) and made
again, equal to itself, when it moves up; any other is kept as it came.

Nothing the scheduler decides changes: it sees the same groups in the same order, with
the same sequence ids (given on arrival, as before), so every run is the same run.

**The order**, ``fcfs`` or ``lpm``:

``SchedulerConfig.order`` picks it; :func:`order_waiting` applies it to the waiting queue
at the start of every admission round (:meth:`~pagedsim.engine.scheduler.Scheduler._admit`).

* ``fcfs``: the queue as it is. New requests join at the back in arrival order; requests
  preempted for recomputation go back to the front.
* ``lpm`` (SGLang's cache-aware *longest prefix match* policy, ``schedule_policy.py``):
  the request whose prompt the prefix cache holds most of goes first (tokens, as
  :meth:`~pagedsim.memory.kv_cache_manager.KVCacheManager.get_computed_tokens` counts
  them, which changes nothing), so requests that share a prefix run while it is cached.
  Ties keep arrival order. Preempted requests still go first, oldest first, as under
  ``fcfs``: they have run already, and going first keeps them from starving behind
  better-cached newcomers. With more than :data:`LPM_MAX_WAITING` requests waiting,
  SGLang skips the lookups and sorting (their cost grows with the queue) and serves
  FCFS; so do we, restoring the FCFS order (preempted first, then by arrival) that
  earlier sorting may have changed. Without a prefix cache every lookup is 0 and ``lpm``
  is FCFS.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import fields

from ..memory.base import SeqId
from ..memory.kv_cache_manager import KVCacheManager
from ..workloads.workload import Request
from .plan import SequenceGroup

#: Above this many waiting requests ``lpm`` serves FCFS (SGLang's threshold).
LPM_MAX_WAITING = 128


def _fcfs_key(group: SequenceGroup) -> tuple[bool, float, int]:
    """Preempted requests first, then by arrival (request id breaks ties)."""
    return group.num_preemptions == 0, group.request.arrival_s, group.request.request_id


def order_waiting(waiting: deque[SequenceGroup], kv: KVCacheManager, order: str) -> None:
    """Reorder ``waiting`` in place for ``order`` (``"fcfs"``: left as it is); ``kv``
    answers how much of each prompt is cached."""
    if order == "fcfs" or len(waiting) < 2:
        return
    if order != "lpm":
        raise ValueError(f"unknown order {order!r}; valid: fcfs, lpm")
    groups = sorted(waiting, key=_fcfs_key)
    if len(groups) <= LPM_MAX_WAITING:
        lookup = kv.get_computed_tokens

        def longest_first(g: SequenceGroup) -> tuple[int, int]:
            if g.num_preemptions:
                return 0, 0  # preempted: first, in FCFS order
            hit = lookup(g.block_hashes, g.seq_ids[0], g.request.prompt_len + g.num_output)
            return 1, -hit

        groups.sort(key=longest_first)  # stable: ties stay in FCFS order
    waiting.clear()
    waiting.extend(groups)


#: Groups kept at the front: more than ``lpm`` ever orders (it must be), and than any step
#: admits under the default ``max_num_seqs`` (256; admission refills as it takes them).
FRONT_GROUPS = 1024


class _Behind:
    """The arrivals behind the front, FIFO: plain requests as numbers in arrays, others
    (and their sequence ids) as they came."""

    __slots__ = ("ids", "arrivals", "lengths", "seq_ids", "others", "head")

    def __init__(self) -> None:
        self.ids = array("q")  # request id; -1: the next of ``others``
        self.arrivals = array("d")  # seconds
        self.lengths = array("q")  # prompt tokens, output tokens (two per request)
        self.seq_ids = array("q")
        self.others: deque[tuple[Request, SeqId]] = deque()
        self.head = 0  # entries before it are taken (dropped in halves: O(1) a take)

    def __len__(self) -> int:
        return len(self.ids) - self.head

    def append(self, request: Request, seq_id: SeqId) -> None:
        if _is_plain(request) and type(seq_id) is int:
            self.ids.append(request.request_id)
            self.arrivals.append(request.arrival_s)
            self.lengths.extend((request.prompt_len, request.output_len))
            self.seq_ids.append(seq_id)
        else:
            self.ids.append(-1)
            self.arrivals.append(0.0)
            self.lengths.extend((0, 0))
            self.seq_ids.append(0)
            self.others.append((request, seq_id))

    def first(self) -> tuple[Request, SeqId]:
        """The oldest arrival (taken by :meth:`drop_first`)."""
        i = self.head
        rid = self.ids[i]
        if rid < 0:
            return self.others[0]
        return Request(rid, self.arrivals[i], self.lengths[2 * i], self.lengths[2 * i + 1]), \
            self.seq_ids[i]

    def drop_first(self) -> None:
        i = self.head
        if self.ids[i] < 0:
            self.others.popleft()
        self.head = i = i + 1
        if i >= 4096 and 2 * i >= len(self.ids):  # half of it taken: drop that half
            del self.ids[:i], self.arrivals[:i], self.lengths[:2 * i], self.seq_ids[:i]
            self.head = 0


#: The fields a plain request leaves at their defaults, with those defaults (read from
#: Request itself, so that a field added there is checked here too).
_DEFAULTS = tuple((f.name, f.default) for f in fields(Request)
                  if f.name not in ("request_id", "arrival_s", "prompt_len", "output_len"))


def _is_plain(request: Request) -> bool:
    """Whether ``Request(id, arrival, prompt, output)`` makes ``request`` again."""
    if type(request) is not Request:
        return False
    for name, default in _DEFAULTS:
        if getattr(request, name) != default:
            return False
    return True


class WaitingQueue:
    """A FIFO of waiting groups: ``front`` (groups, read and reordered by the scheduler)
    then arrivals not yet made groups, made by ``make_group(request, seq_id)`` as the
    front drains."""

    __slots__ = ("front", "_rest", "_make", "_front_groups")

    def __init__(self, make_group: Callable[[Request, SeqId], SequenceGroup],
                 front_groups: int | None = None) -> None:
        if front_groups is None:
            front_groups = FRONT_GROUPS  # read now, so a test may set a small one
        if type(front_groups) is not int or front_groups <= LPM_MAX_WAITING:
            # ``lpm`` orders the whole queue when it is no longer than LPM_MAX_WAITING: the
            # whole queue must then be the front.
            raise ValueError(f"front_groups must be an integer above LPM_MAX_WAITING "
                             f"({LPM_MAX_WAITING}), got {front_groups!r}")
        self.front: deque[SequenceGroup] = deque()
        self._rest = _Behind()
        self._make = make_group
        self._front_groups = front_groups

    def __len__(self) -> int:
        return len(self.front) + len(self._rest)

    def __bool__(self) -> bool:
        return bool(self.front)  # the rest is never there without a front

    def __getitem__(self, index: int) -> SequenceGroup:
        """A group of the front (``[0]``: the head)."""
        return self.front[index]

    def __iter__(self) -> Iterator[SequenceGroup]:
        """The front's groups (the rest are arrivals behind them, not groups yet)."""
        return iter(self.front)

    @property
    def num_behind(self) -> int:
        """Requests behind the front, not yet made groups."""
        return len(self._rest)

    def wants_group(self) -> bool:
        """Whether a new arrival joins the front as a group (else it waits behind)."""
        return not len(self._rest) and len(self.front) < self._front_groups

    def append(self, group: SequenceGroup) -> None:
        """A new group at the back (call only when :meth:`wants_group`)."""
        self.front.append(group)

    def append_arrival(self, request: Request, seq_id: SeqId) -> None:
        """A new arrival at the back, kept as it came (its group made when it moves up)."""
        self._rest.append(request, seq_id)

    def appendleft(self, group: SequenceGroup) -> None:
        """A group back at the front (a preempted one)."""
        self.front.appendleft(group)

    def popleft(self) -> SequenceGroup:
        """Take the head; the next arrival behind moves up to the front."""
        rest = self._rest
        if len(rest) and len(self.front) <= self._front_groups:
            made = self._make(*rest.first())  # first: if it raises, nothing has changed
            rest.drop_first()
            self.front.append(made)
        return self.front.popleft()
