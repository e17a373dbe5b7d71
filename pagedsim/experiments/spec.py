"""What to simulate: the :class:`Experiment` dataclass, its defaults and its checks.

An experiment names a model and GPUs (hence the KV pool), a workload and the scheduler's
limits. Everything that can be checked without simulating is checked when it is built, so
bad input fails before any work; :mod:`pagedsim.experiments.runner` runs it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..engine.cost import CostModel
from ..engine.scheduler import POLICIES, PREEMPTION_MODES, SchedulerConfig
from ..engine.scheduler_config import ORDERS
from ..memory.accounting import CATEGORIES
from ..memory.schemes import get_scheme
from ..models.budget import PAPER_OPT_13B, kv_budget, preset_of
from ..models.cost_profiles import DEFAULT_PROFILE, CostProfileError, get_cost_profile
from ..models.specs import get_gpu, get_model
from ..units import GiB
from ..user_files import file_kind
from ..validate import check_choice, check_int
from ..workloads.random_dataset import (
    DEFAULT_RANDOM_INPUT_LEN,
    DEFAULT_RANDOM_OUTPUT_LEN,
    check_range_ratio,
    length_range,
    random_workload_config,
)
from ..workloads.sharing_workloads import (
    SHARING_WORKLOAD_NAMES,
    sharing_config,
    sharing_workload,
)
from ..workloads.traces import ON_TOO_LONG, Trace
from ..workloads.workload import MAX_NUM_REQUESTS as WORKLOAD_MAX_NUM_REQUESTS
from ..workloads.workload import (
    Request,
    WorkloadConfig,
    check_num_requests,
    check_rate_per_s,
    generate_workload,
    iter_workload,
)
from .label import experiment_label
from .trace_replay import ReplayScan, load_replay, scan_replay, stream_replay

#: Default Poisson arrival rate (requests/s); see :mod:`pagedsim.experiments` for why 5.
DEFAULT_RATE = 5.0
#: Default number of requests per run.
DEFAULT_NUM_REQUESTS = 2000
#: Most requests one run may simulate (:data:`pagedsim.workloads.workload.MAX_NUM_REQUESTS`, the
#: same limit for compare, sweep and cache-replay).
MAX_NUM_REQUESTS = WORKLOAD_MAX_NUM_REQUESTS
#: Most blocks (of ``block_size`` slots) a simulated KV pool may have: 2**23 = 8,388,608.
#: The allocators keep Python entries per block, built before the first step: at 2**24
#: blocks the heaviest to build, hybrid-prefix-cache, took 4.5 GB and 20 s, prefix-cache
#: 2.3 GB, paged 0.8 GB (2**26, the bound before, would be four times that: 18 GB for
#: one run). So a run stays near 2.3 GB at most, one per CPU (the runner starts no more
#: processes than CPUs). llama-3-8b on 8 x H200 has about 7.3 million token slots: blocks
#: of 1 token still fit.
MAX_POOL_BLOCKS = 1 << 23
#: Workload kinds the CLI accepts by name (anything else is a trace file path).
#: The sharing ones (pagedsim.workloads.sharing_workloads) fill prompt_pieces: their prompts share
#: system prompts, conversation histories or few-shot examples.
#: ``random`` is benchmark_serving's dataset of fixed lengths (pagedsim.workloads.random_dataset).
WORKLOAD_NAMES = ("sharegpt", "alpaca", "random", *SHARING_WORKLOAD_NAMES)
#: Which part of the run a compare table reports: saturated steps, or all of it.
PARTS = ("saturated", "all")
#: Keys of one ``--json`` row of ``pagedsim compare`` (more may follow them).
JSON_KEYS = ("scheme", *CATEGORIES, "mean_batch_size", "throughput_tokens_per_s",
             "preemptions", "rejected", "first_rejection", "prefix_hit_rate",
             "prefix_hit_rate_last_1000", "prefill_tokens_computed", "prefill_tokens_cached",
             "evictions")


@dataclass(frozen=True, slots=True)
class Experiment:
    """What to simulate: model and GPUs (hence the KV pool), workload, scheduler.

    Sizes in bytes, rates in requests/s. ``workload`` is ``"sharegpt"``, ``"alpaca"``, one of
    the prefix-sharing shapes ``"system-prompt"``, ``"multi-turn"``, ``"few-shot"``
    (:func:`pagedsim.workloads.sharing_workloads.sharing_workload`) or the path of a trace file
    (:func:`pagedsim.workloads.traces.load_trace`). ``n`` / ``beam_width`` are given to every
    request (they override a trace's). ``swap_bytes`` is the CPU swap
    space for ``preemption="swap"`` (vLLM's default ``swap_space`` is 4 GiB per GPU).
    ``max_num_batched_tokens`` None means ``max(2048, max_model_len)``.

    ``rate_per_s`` and ``num_requests``: for a synthetic workload the Poisson rate and the
    number of requests (``None`` becomes :data:`DEFAULT_RATE` / :data:`DEFAULT_NUM_REQUESTS`
    when the experiment is built). For a trace, ``num_requests`` takes its first N
    requests (``None``: all of them) and ``rate_per_s`` rescales its arrival gaps to that
    mean rate (:meth:`pagedsim.workloads.traces.Trace.rescale_rate`; ``None``: the recorded times).

    Trace only: ``on_too_long`` (``"clip"``, ``"skip"`` or ``"error"``) handles requests
    longer than the model's context (``max_model_len`` tokens), ``skip_zero_output``
    skips rows with 0 output tokens. Arrival times are shifted so that the first request
    arrives at t = 0 s. Whatever loading changed or left out is counted in
    :meth:`trace_report`.

    ``host_cache_gb``: GiB of host memory behind a prefix cache's GPU pool
    (:mod:`pagedsim.memory.host_tier`; 0: none; schemes without a prefix cache ignore it),
    written back at eviction, or also at insertion with ``host_write_through``; its copies
    overlap the compute layer by layer unless ``host_overlap`` is False
    (:mod:`pagedsim.engine.cost`).

    vLLM's engine and benchmark flags: ``max_model_len_tokens`` (``--max-model-len``) is
    the longest request in tokens in place of the model's context (None: the model's; at
    most that); ``max_concurrency`` (benchmark_serving's ``--max-concurrency``) lets at
    most that many requests be in the system at once, the next one sent when one ends
    (:mod:`pagedsim.engine.concurrency`; None: no limit). The ``random`` workload's
    lengths: ``random_input_len`` / ``random_output_len`` tokens, each drawn within
    ``random_range_ratio`` of itself (:mod:`pagedsim.workloads.random_dataset`).
    """

    # The memory setting defaults to the paper's (pagedsim.models.budget.PAPER_OPT_13B).
    model: str = PAPER_OPT_13B.model
    gpu: str = PAPER_OPT_13B.gpu
    num_gpus: int = PAPER_OPT_13B.num_gpus
    gpu_memory_utilization: float = PAPER_OPT_13B.gpu_memory_utilization
    activation_bytes: int = PAPER_OPT_13B.activation_bytes
    weights_bytes: int | None = PAPER_OPT_13B.weights_bytes
    workload: str = "sharegpt"
    rate_per_s: float | None = None
    num_requests: int | None = None
    seed: int = 0
    n: int = 1
    beam_width: int = 1
    block_size: int = 16
    preemption: str = "recompute"
    policy: str = "v0"  # scheduler policy: v0 or chunked (see pagedsim.engine.scheduler)
    order: str = "fcfs"  # waiting-queue order: fcfs or lpm (see pagedsim.engine.waiting_queue)
    swap_bytes: int = 4 * GiB
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    on_too_long: str = "clip"
    skip_zero_output: bool = False
    #: The KV pool in token slots (rounded down to whole blocks), in place of the one the
    #: memory setting gives; None: from the memory setting. The cache-size sweep sets it.
    capacity_tokens: int | None = None
    host_cache_gb: float = 0.0
    host_write_through: bool = False
    host_overlap: bool = True
    #: The step-time constants (:mod:`pagedsim.models.cost_profiles`): a built-in profile's
    #: name (``paper``, the default: the roofline the paper's figures are reproduced with;
    #: ``vllm``: fitted to public vLLM runs) or a profile file ``pagedsim calibrate`` wrote.
    cost_profile: str = DEFAULT_PROFILE
    max_model_len_tokens: int | None = None
    max_concurrency: int | None = None
    random_input_len: int = DEFAULT_RANDOM_INPUT_LEN
    random_output_len: int = DEFAULT_RANDOM_OUTPUT_LEN
    random_range_ratio: float = 0.0

    def __post_init__(self) -> None:
        model_len = get_model(self.model).max_model_len  # unknown presets fail here
        get_gpu(self.gpu)
        if not self.is_trace:  # synthetic: None means the default (frozen, hence setattr)
            if self.rate_per_s is None:
                object.__setattr__(self, "rate_per_s", DEFAULT_RATE)
            if self.num_requests is None:
                object.__setattr__(self, "num_requests", DEFAULT_NUM_REQUESTS)
        if self.num_requests is not None:
            check_num_requests(self.num_requests)
        check_int("seed", self.seed, minimum=0)
        check_int("n", self.n, minimum=1)
        check_int("beam_width", self.beam_width, minimum=1)
        check_int("block_size", self.block_size, minimum=1)
        check_int("swap_bytes", self.swap_bytes, minimum=0)
        check_int("max_num_seqs", self.max_num_seqs, minimum=1)
        if self.max_num_batched_tokens is not None:
            check_int("max_num_batched_tokens", self.max_num_batched_tokens, minimum=1)
        if self.max_model_len_tokens is not None:
            # As vLLM: a shorter context than the model's is allowed, a longer one is not.
            check_int("max_model_len_tokens", self.max_model_len_tokens, minimum=2)
            if self.max_model_len_tokens > model_len:
                raise ValueError(f"max_model_len_tokens must be <= the model's context "
                                 f"({model_len:,} tokens), got {self.max_model_len_tokens:,}")
        if self.max_concurrency is not None:
            check_int("max_concurrency", self.max_concurrency, minimum=1)
        self._check_random()
        check_choice("preemption", self.preemption, PREEMPTION_MODES)
        check_choice("policy", self.policy, POLICIES)
        check_choice("order", self.order, ORDERS)
        check_choice("on_too_long", self.on_too_long, ON_TOO_LONG)
        if not isinstance(self.skip_zero_output, bool):
            raise TypeError(f"skip_zero_output must be True or False, "
                            f"got {self.skip_zero_output!r}")
        if self.n > 1 and self.beam_width > 1:
            raise ValueError(f"n ({self.n}) and beam_width ({self.beam_width}) cannot both "
                             "exceed 1; choose parallel sampling or beam search")
        # A request's samples (or beams) run together, so a group wider than the batch's
        # sequence limit could never be scheduled; say so now rather than mid-run.
        for name, width in (("n", self.n), ("beam_width", self.beam_width)):
            if width > self.max_num_seqs:
                raise ValueError(f"{name} must be <= max_num_seqs ({self.max_num_seqs}), "
                                 f"got {width}")
        if self.rate_per_s is not None:
            check_rate_per_s(self.rate_per_s, "rate")
        if self.workload in SHARING_WORKLOAD_NAMES:  # its longest request must fit: now,
            # not once the runs make the requests
            assert self.num_requests is not None and self.rate_per_s is not None
            sharing_config(self.workload, self.num_requests, float(self.rate_per_s),
                           self.seed, self.max_model_len, self.n, self.beam_width)
        if self.workload not in WORKLOAD_NAMES and os.path.exists(self.workload) \
                and not os.path.isfile(self.workload):  # a FIFO or device: never opened
            raise ValueError(f"workload {self.workload!r} is "
                             f"{file_kind(os.stat(self.workload).st_mode)}, not a trace file "
                             "(a regular .csv or .jsonl file)")
        if self.workload not in WORKLOAD_NAMES and not os.path.isfile(self.workload):
            raise ValueError(f"workload {self.workload!r} is neither one of "
                             f"{', '.join(WORKLOAD_NAMES)} nor an existing trace file")
        if self.capacity_tokens is not None:
            check_int("capacity_tokens", self.capacity_tokens, minimum=self.block_size)
        check_host_cache_gb(self.host_cache_gb)
        for name in ("host_write_through", "host_overlap"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        try:  # an unknown name, a bad file, or no constants for this GPU: now, not mid-run
            get_cost_profile(self.cost_profile).efficiencies(self.gpu)
        except CostProfileError as err:
            raise ValueError(f"cost_profile {self.cost_profile!r}: {err}") from None
        self._check_pool()

    def _check_random(self) -> None:
        """The random workload's lengths: whole tokens, a ratio in [0, 1), and its longest
        request within ``max_model_len`` (they are never clipped)."""
        check_int("random_input_len", self.random_input_len, minimum=1)
        check_int("random_output_len", self.random_output_len, minimum=1)
        ratio = check_range_ratio(self.random_range_ratio)
        if self.workload != "random":
            return
        longest_in = length_range(self.random_input_len, ratio)[1]
        longest_out = length_range(self.random_output_len, ratio)[1]
        if longest_in + longest_out > self.max_model_len:
            limit = ("max_model_len_tokens" if self.max_model_len_tokens is not None
                     else "the model's context")
            raise ValueError(
                f"random_input_len + random_output_len must fit {limit} "
                f"({self.max_model_len:,} tokens): the longest random request has "
                f"{longest_in:,} + {longest_out:,} tokens")

    def _check_pool(self) -> None:
        """The KV pool must exist (kv_budget's checks) and be small enough to simulate."""
        slots = self.capacity_slots()
        num_blocks = slots // self.block_size
        if num_blocks > MAX_POOL_BLOCKS:
            raise ValueError(
                f"num_gpus {self.num_gpus} x {self.gpu} with block_size {self.block_size} "
                f"gives a KV pool of {num_blocks:,} blocks; at most {MAX_POOL_BLOCKS:,} "
                "(2**23) are simulated: use fewer GPUs or larger blocks")

    @property
    def is_trace(self) -> bool:
        """Whether ``workload`` is a trace file (not one of :data:`WORKLOAD_NAMES`)."""
        return self.workload not in WORKLOAD_NAMES

    @property
    def max_model_len(self) -> int:
        """The longest request in tokens: ``max_model_len_tokens`` when set, else the
        model's context (requests are clipped to it, or rejected above it)."""
        if self.max_model_len_tokens is not None:
            return self.max_model_len_tokens
        return get_model(self.model).max_model_len

    def capacity_slots(self) -> int:
        """Token slots of the KV pool (:func:`pagedsim.models.budget.kv_budget`'s ``max_tokens``:
        whole blocks of ``block_size``; the contiguous schemes get the same slots), or
        ``capacity_tokens`` rounded down to whole blocks when it is set."""
        if self.capacity_tokens is not None:
            return self.capacity_tokens // self.block_size * self.block_size
        return kv_budget(self.model, self.gpu, weights_bytes=self.weights_bytes,
                         gpu_memory_utilization=self.gpu_memory_utilization,
                         activation_bytes=self.activation_bytes, block_size=self.block_size,
                         num_gpus=self.num_gpus).max_tokens

    def host_cache_blocks(self) -> int:
        """Blocks of the host tier: ``host_cache_gb`` GiB over one block's K/V (all
        layers, K and V, ``block_size`` tokens), rounded down; 0 without a tier."""
        block_bytes = self.block_size * get_model(self.model).bytes_per_token
        return int(self.host_cache_gb * GiB) // block_bytes

    def scheduler_config(self) -> SchedulerConfig:
        """The scheduler's limits; the CPU swap pool in slots from ``swap_bytes``; requests
        longer than the model's ``max_model_len`` rejected, in every scheme."""
        model = get_model(self.model)
        batched = self.max_num_batched_tokens or max(2048, self.max_model_len)
        return SchedulerConfig(
            max_num_seqs=self.max_num_seqs, max_num_batched_tokens=batched,
            preemption=self.preemption, seed=self.seed, policy=self.policy, order=self.order,
            cpu_swap_slots=self.swap_bytes // model.bytes_per_token,
            max_model_len=self.max_model_len,
        )

    def cost_model(self) -> CostModel:
        """The roofline step-time model for this model and GPUs, streaming
        ``weights_bytes`` (``--weights-gb``) when given, as the pool is sized with them,
        with the constants of ``cost_profile``."""
        gpu = get_gpu(self.gpu)
        model = get_model(self.model)
        if self.weights_bytes is not None and self.weights_bytes != model.weights_bytes:
            model = replace(model, weights_bytes=self.weights_bytes)
        return CostModel(model, gpu, num_gpus=self.num_gpus,
                         host_link_bytes_per_s=gpu.host_link_bytes_per_s,
                         host_overlap=self.host_overlap,
                         **get_cost_profile(self.cost_profile).cost_kwargs(gpu.name))

    def requests(self) -> list[Request]:
        """The workload (deterministic: same experiment, same requests)."""
        if not self.is_trace:
            assert self.num_requests is not None and self.rate_per_s is not None
            if self.workload in SHARING_WORKLOAD_NAMES:
                return sharing_workload(self.workload, self.num_requests,
                                        float(self.rate_per_s), self.seed,
                                        self.max_model_len, self.n, self.beam_width)
            return generate_workload(self._workload_config())
        return self.trace().requests

    def iter_requests(self) -> Iterator[Request]:
        """:meth:`requests` one at a time, in order of arrival, without holding them all:
        ShareGPT- and Alpaca-like requests are made as they are taken (their draws take
        24 bytes a request), a trace is read from its file as the run goes
        (:func:`pagedsim.experiments.trace_replay.stream_replay`; read once more first to
        count it when ``rate_per_s`` rescales it). The prefix-sharing workloads are built
        whole."""
        if self.is_trace:
            return stream_replay(self)
        if self.workload in SHARING_WORKLOAD_NAMES:
            return iter(self.requests())
        return iter_workload(self._workload_config())

    def _workload_config(self) -> WorkloadConfig:
        """The synthetic workload (not a sharing one) as a :class:`WorkloadConfig`."""
        assert self.num_requests is not None and self.rate_per_s is not None
        common = dict(num_requests=self.num_requests, rate_per_s=float(self.rate_per_s),
                      seed=self.seed, max_model_len=self.max_model_len, n=self.n,
                      beam_width=self.beam_width)
        if self.workload == "random":
            return random_workload_config(self.random_input_len, self.random_output_len,
                                          self.random_range_ratio, **common)
        return WorkloadConfig(kind=self.workload, **common)  # type: ignore[arg-type]

    def trace(self) -> Trace:
        """The trace this experiment replays, as its runs see it: loaded with
        ``on_too_long`` and ``skip_zero_output``, its first ``num_requests`` only, arrivals
        shifted so that the first request arrives at t = 0 s (the loader rebases dates and
        wall-clock readings; any other offset is subtracted here, so a trace and the same
        trace with rebased timestamps simulate identically), ``n`` / ``beam_width`` given
        to every request, rescaled to ``rate_per_s``
        (:mod:`pagedsim.experiments.trace_replay` has the rules; runs read the same
        requests lazily, :meth:`iter_requests`).

        Raises :class:`pagedsim.workloads.traces.TraceError` for a bad file or one that leaves no
        request, ``ValueError`` starting ``rate_per_s`` for a rate that cannot be applied
        (fewer than 2 requests, or all arriving at once), and ``ValueError`` if the
        workload is not a trace.
        """
        if not self.is_trace:
            raise ValueError(f"workload {self.workload!r} is synthetic, not a trace file")
        return load_replay(self)

    def trace_scan(self) -> ReplayScan:
        """One pass over the trace keeping no request: its counts and report line (the
        same errors as :meth:`trace`)."""
        if not self.is_trace:
            raise ValueError(f"workload {self.workload!r} is synthetic, not a trace file")
        return scan_replay(self)

    def trace_report(self) -> str | None:
        """:meth:`pagedsim.workloads.traces.Trace.report` of :meth:`trace` (one line: requests
        loaded, and everything loading, ``num_requests`` and ``rate_per_s`` changed or
        left out), or ``None`` for a synthetic workload. Reads the whole file (in constant
        memory): call it once, in the parent process (runs in worker processes print
        nothing)."""
        return self.trace_scan().report() if self.is_trace else None

    def arrival_rate_per_s(self, requests: Sequence[Request] | Sequence[float]) -> float:
        """The mean arrival rate in requests/s of this experiment's ``requests`` (or of
        their arrival times, seconds): the asked ``rate_per_s``, else (a trace's recorded
        times) ``(N - 1) / span`` of the arrivals (``inf`` when all arrive at once,
        ``nan`` for one request)."""
        if self.rate_per_s is not None:
            return float(self.rate_per_s)
        if len(requests) < 2:
            return math.nan
        times = [r if isinstance(r, (int, float)) else r.arrival_s for r in requests]
        span_s = max(times) - min(times)
        return math.inf if span_s == 0 else (len(requests) - 1) / span_s

    @property
    def preset(self) -> str | None:
        """The name of the memory setting (:data:`pagedsim.models.budget.BUDGET_PRESETS`) this
        experiment's model, GPUs, utilization, activations and weights are, or None
        (also None when ``capacity_tokens`` sets the pool: no preset's pool, then)."""
        if self.capacity_tokens is not None:
            return None
        found = preset_of(self.model, self.gpu, self.num_gpus, self.gpu_memory_utilization,
                          self.activation_bytes, self.weights_bytes)
        return None if found is None else found.name

    @property
    def multi_sequence(self) -> bool:
        """Whether each request runs several sequences (``n`` > 1 or ``beam_width`` > 1)."""
        return self.n > 1 or self.beam_width > 1

    def label(self, swept: Sequence[str] = ()) -> str:
        """One line saying what was simulated, for table and figure captions
        (:func:`pagedsim.experiments.label.experiment_label`; ``swept`` names the fields a
        sweep varies)."""
        return experiment_label(self, swept)


#: Most host memory a host tier may have (GiB): 1 PiB, far above any machine's, so that a
#: typo cannot ask for billions of host blocks.
MAX_HOST_CACHE_GB = 1 << 20


def check_host_cache_gb(value: object) -> float:
    """``value`` as GiB of host tier: a finite number from 0 to :data:`MAX_HOST_CACHE_GB`
    (``ValueError`` naming it otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not (math.isfinite(value) and 0 <= value <= MAX_HOST_CACHE_GB):
        raise ValueError(f"host_cache_gb must be a number of GiB from 0 to "
                         f"{MAX_HOST_CACHE_GB:,}, got {value!r}")
    return float(value)


def check_schemes(schemes: Sequence[str]) -> tuple[str, ...]:
    """Validate scheme names (raises ``ValueError`` naming the bad one); no duplicates."""
    if not schemes:
        raise ValueError("no scheme given")
    for s in schemes:
        get_scheme(s)  # raises ValueError naming the bad name and the valid ones
    dup = sorted({s for s in schemes if list(schemes).count(s) > 1})
    if dup:
        raise ValueError(f"scheme(s) given twice: {', '.join(dup)}")
    return tuple(schemes)


def experiment_dict(exp: Experiment) -> dict[str, Any]:
    """The experiment as a plain dict (for JSON/CSV provenance)."""
    return asdict(exp)
