"""Requests and synthetic workloads: Poisson arrivals, ShareGPT- and Alpaca-like lengths.

A :class:`Request` is what arrives at the server: a prompt of ``prompt_len`` tokens that
will generate exactly ``output_len`` tokens (the simulator knows the true output length in
advance; a real server does not, which is why contiguous allocators must reserve).

Length distributions
--------------------
The vLLM paper (Kwon et al., SOSP 2023, Fig. 11) reports only the mean lengths of its two
datasets: ShareGPT 161.31 input / 337.99 output tokens, Alpaca 19.31 / 58.45. The real
length histograms are right-skewed with a long tail (a few very long conversations, many
short ones), so we draw every length from a **lognormal** distribution: it is positive,
right-skewed, heavy-tailed, and fixed by two numbers, a location ``mu`` and a spread
``sigma`` (of the length's natural logarithm). The spreads are our choice (the paper gives
none): wide for ShareGPT, whose conversations range from one line to pages, narrower for
Alpaca's short instructions (``mu`` then sets the mean)::

    kind       input mu  input sigma  output mu  output sigma  resulting p50 / p99 (in, out)
    sharegpt   4.5881    1.0          5.5173     0.8           98 / 1003,  251 / 1567
    alpaca     2.7801    0.6          3.6644     0.9           16 / 65,    39 / 315

How a length is made: ``max(1, round(lognormal(mu, sigma)))`` for the prompt and,
independently, for the output; then **clipped** to the model's context
(:func:`clip_lengths`): the prompt is cut to ``max_model_len - 1`` tokens (a server
truncates or rejects prompts that leave no room to generate), then the output is cut to
``max_model_len - prompt_len`` (generation stops at the context limit). So every request
has ``prompt_len + output_len <= max_model_len`` and both lengths >= 1.

Clipping lowers the means a little, so ``mu`` was calibrated (fixed-point iteration on
2 million draws) for the clipped means at ``max_model_len = 2048``, the paper's OPT
models' context, to land on the paper's means. Measured over 100,000 requests
(``seed=0``, ``max_model_len=2048``; ``tests/workloads/test_workload.py`` re-measures them):

* sharegpt: mean input 160.42, mean output 338.99 (paper 161.31 / 337.99)
* alpaca:   mean input 19.26,  mean output 58.63  (paper 19.31 / 58.45)

(the gaps are sampling noise: the standard error of the ShareGPT input mean at 100k
draws is about 0.7 tokens). With ``max_model_len = 4096`` fewer draws are clipped and the
ShareGPT means rise to 161.22 / 343.12; Alpaca requests (longest 1928 tokens in 100k)
never reach a 2048 clip.

Arrivals
--------
A Poisson process: inter-arrival gaps are exponential with mean ``1 / rate_per_s``
seconds and the first request arrives after the first gap. ``rate_per_s = inf`` puts
every request at t = 0 (an offline batch). Lengths and arrivals come from two independent
child streams of one seed, so sweeping the rate keeps every request's lengths the same.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from numbers import Real

import numpy as np

from ..validate import check_choice, check_int

#: Lognormal (mu, sigma) of the natural log of the length, per kind: (input, output).
#: See the module docstring for how they were chosen and calibrated.
LENGTH_DISTRIBUTIONS: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "sharegpt": ((4.5881, 1.0), (5.5173, 0.8)),
    "alpaca": ((2.7801, 0.6), (3.6644, 0.9)),
}

#: The vLLM paper's mean (input, output) lengths in tokens (Fig. 11), the calibration targets.
PAPER_MEAN_LENS: dict[str, tuple[float, float]] = {
    "sharegpt": (161.31, 337.99),
    "alpaca": (19.31, 58.45),
}

WORKLOAD_KINDS = ("sharegpt", "alpaca", "fixed", "uniform")
#: Most requests one workload may hold. A run keeps a compact record per request (76
#: bytes), and 10 million already take hours of simulation; more is a typo
#: (and 2**53 of them would ask numpy for 64 PiB before any check).
MAX_NUM_REQUESTS = 10_000_000
#: Slowest arrival rate, requests/s: one request per 11.6 days. Slower ones put arrivals
#: past 1e6 s per request, where float seconds lose the milliseconds a step lasts, and a
#: rate such as 5e-324 makes the mean gap 1 / rate infinite.
MIN_RATE_PER_S = 1e-6


def check_num_requests(value: object, name: str = "num_requests") -> int:
    """A request count: an int from 1 to :data:`MAX_NUM_REQUESTS`."""
    check_int(name, value, minimum=1)
    if value > MAX_NUM_REQUESTS:  # type: ignore[operator]
        raise ValueError(f"{name} must be <= {MAX_NUM_REQUESTS:,}, got {value:,}")
    return value  # type: ignore[return-value]


def check_rate_per_s(value: object, name: str = "rate_per_s") -> float:
    """An arrival rate in requests/s: at least :data:`MIN_RATE_PER_S`, or ``inf`` (all
    requests at t = 0)."""
    rate = _check_real(name, value, allow_inf=True)
    if rate < MIN_RATE_PER_S:
        raise ValueError(f"{name} must be >= {MIN_RATE_PER_S:g} requests/s (one per 11.6 "
                         f"days) or inf (all at t = 0), got {value!r}")
    return rate


def _check_real(name: str, value: object, minimum: float = 0.0, allow_inf: bool = False) -> float:
    """Return ``value`` as a float >= ``minimum`` (finite unless ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    x = float(value)
    if math.isnan(x) or (math.isinf(x) and not allow_inf) or x < minimum:
        bound = f">= {minimum}" + (" (inf allowed)" if allow_inf else ", finite")
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return x


@dataclass(frozen=True, slots=True)
class Request:
    """One request as it arrives.

    ``arrival_s`` is seconds from the start of the run; ``prompt_len`` and ``output_len``
    are tokens (the output length is the true one the simulator will generate). ``n`` is
    the number of parallel samples (vLLM's ``n``), ``beam_width`` the beam-search width;
    at most one of them can exceed 1. ``prefix_id`` marks requests that share a prompt
    prefix (same id = same prefix); ``None`` means no shared prefix.
    """

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    n: int = 1
    beam_width: int = 1
    prefix_id: int | None = None
    #: What the prompt holds, in a compact form: ids of its consecutive pieces of
    #: ``prompt_piece_tokens`` tokens each (the last may be partial), as Mooncake's
    #: ``hash_ids``. Two prompts whose tuples start with the same k ids share their first
    #: k pieces of tokens (see :mod:`pagedsim.workloads.prompts`); None: a prompt shared with
    #: nobody.
    prompt_pieces: tuple[int, ...] | None = None
    prompt_piece_tokens: int = 512
    #: True when ``prompt_pieces`` go on past the prompt to name the output's tokens too
    #: (a multi-turn chat, whose next turn repeats this output); then the pieces are kept
    #: up to ``prompt_len + output_len`` tokens. False: output tokens are the request's own.
    output_in_pieces: bool = False

    def __post_init__(self) -> None:
        # Coerce numpy scalars to plain Python numbers so requests hash, compare and
        # serialize (JSON) the same whatever produced them; frozen needs object.__setattr__.
        set_ = object.__setattr__
        set_(self, "request_id", check_int("request_id", self.request_id, minimum=0))
        set_(self, "arrival_s", _check_real(f"request {self.request_id}: arrival_s",
                                            self.arrival_s))
        for name in ("prompt_len", "output_len", "n", "beam_width"):
            set_(self, name, check_int(f"request {self.request_id}: {name}",
                                       getattr(self, name), minimum=1))
        if self.n > 1 and self.beam_width > 1:
            raise ValueError(
                f"request {self.request_id}: n ({self.n}) and beam_width ({self.beam_width}) "
                "cannot both exceed 1; choose parallel sampling or beam search"
            )
        if self.prefix_id is not None:
            set_(self, "prefix_id", check_int(f"request {self.request_id}: prefix_id",
                                              self.prefix_id, minimum=0))
        if self.prompt_pieces is not None:
            check_int(f"request {self.request_id}: prompt_piece_tokens",
                      self.prompt_piece_tokens, minimum=1)
            pieces = tuple(check_int(f"request {self.request_id}: prompt_pieces", p, minimum=0)
                           for p in self.prompt_pieces)
            need = -(-self.prompt_len // self.prompt_piece_tokens)
            keep = (-(-(self.prompt_len + self.output_len) // self.prompt_piece_tokens)
                    if self.output_in_pieces else need)
            if len(pieces) < need:
                raise ValueError(
                    f"request {self.request_id}: {len(pieces)} prompt pieces of "
                    f"{self.prompt_piece_tokens} tokens cannot hold {self.prompt_len} tokens "
                    f"(need {need})")
            set_(self, "prompt_pieces", pieces[:keep])
        elif self.output_in_pieces:
            raise ValueError(f"request {self.request_id}: output_in_pieces needs prompt_pieces")

    @property
    def final_len(self) -> int:
        """Tokens of one sequence when it finishes: prompt_len + output_len."""
        return self.prompt_len + self.output_len


def clip_lengths(prompt_len: int, output_len: int, max_model_len: int) -> tuple[int, int]:
    """Clip one request to ``max_model_len`` tokens; returns ``(prompt_len, output_len)``.

    The prompt keeps at most ``max_model_len - 1`` tokens (so one output token fits), then
    the output is cut to what is left. Requests that already fit come back unchanged.
    """
    prompt_len = min(prompt_len, max_model_len - 1)
    return prompt_len, min(output_len, max_model_len - prompt_len)


@dataclass(slots=True)
class WorkloadConfig:
    """How to synthesize a workload; :func:`generate_workload` turns it into requests.

    * ``kind``: ``sharegpt`` / ``alpaca`` (lognormal lengths, see the module docstring),
      ``fixed`` (every request ``prompt_len`` + ``output_len`` tokens) or ``uniform``
      (lengths uniform on the inclusive ranges ``prompt_len_range`` / ``output_len_range``).
    * ``num_requests``: how many requests.
    * ``rate_per_s``: Poisson arrival rate in requests per second; ``inf`` = all at t = 0.
    * ``seed``: seeds numpy's generator; same config, same requests.
    * ``max_model_len``: the context limit in tokens; sharegpt/alpaca draws are clipped to
      it, fixed/uniform lengths must fit it (an error otherwise, since clipping would
      silently change the distribution a teacher asked for).
    * ``n`` / ``beam_width``: parallel samples / beam width given to every request.
    """

    kind: str = "sharegpt"
    num_requests: int = 1000
    rate_per_s: float = 1.0
    seed: int = 0
    max_model_len: int = 2048
    n: int = 1
    beam_width: int = 1
    prompt_len: int = 128
    output_len: int = 128
    prompt_len_range: tuple[int, int] = (1, 512)
    output_len_range: tuple[int, int] = (1, 512)

    def __post_init__(self) -> None:
        check_choice("workload kind", self.kind, WORKLOAD_KINDS)
        check_num_requests(self.num_requests)
        self.rate_per_s = check_rate_per_s(self.rate_per_s)
        check_int("seed", self.seed, minimum=0)
        # 2 tokens is the shortest request there is: one prompt token, one output token.
        check_int("max_model_len", self.max_model_len, minimum=2)
        check_int("n", self.n, minimum=1)
        check_int("beam_width", self.beam_width, minimum=1)
        if self.n > 1 and self.beam_width > 1:
            raise ValueError(f"n ({self.n}) and beam_width ({self.beam_width}) cannot both "
                             "exceed 1; choose parallel sampling or beam search")
        if self.kind == "fixed":
            check_int("prompt_len", self.prompt_len, minimum=1)
            check_int("output_len", self.output_len, minimum=1)
            longest = self.prompt_len + self.output_len
        elif self.kind == "uniform":
            for name in ("prompt_len_range", "output_len_range"):
                low, high = _check_range(name, getattr(self, name))
                setattr(self, name, (low, high))
            longest = self.prompt_len_range[1] + self.output_len_range[1]
        else:
            longest = 0  # lognormal draws are clipped instead
        if longest > self.max_model_len:
            raise ValueError(f"{self.kind} workload: longest request is {longest} tokens, "
                             f"over max_model_len {self.max_model_len}")


def _check_range(name: str, value: object) -> tuple[int, int]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a (low, high) pair, got {value!r}")
    low = check_int(f"{name}[0]", value[0], minimum=1)
    high = check_int(f"{name}[1]", value[1], minimum=1)
    if high < low:
        raise ValueError(f"{name} must have low <= high, got {value!r}")
    return low, high


def _lognormal_lens(rng: np.random.Generator, mu: float, sigma: float, size: int) -> np.ndarray:
    # Round to whole tokens; a zero-token prompt or output does not exist, so floor at 1.
    return np.maximum(1, np.rint(rng.lognormal(mu, sigma, size))).astype(np.int64)


def generate_workload(config: WorkloadConfig) -> list[Request]:
    """Synthesize ``config.num_requests`` requests, sorted by arrival (ids 0, 1, ... in order).

    Deterministic: the same config gives the same list. Lengths in tokens, arrivals in
    seconds; every request satisfies ``prompt_len + output_len <= config.max_model_len``.
    """
    return list(iter_workload(config))


#: Requests :func:`iter_workload` turns into objects at a time.
WORKLOAD_CHUNK = 4096


def iter_workload(config: WorkloadConfig) -> Iterator[Request]:
    """:func:`generate_workload`'s requests one at a time, in order: the draws are made
    at once into numpy arrays (24 bytes a request), the :class:`Request` objects (about
    250 bytes each) only as they are taken, so a million-request run never holds them
    all."""
    prompt, output, arrivals = _draw(config)
    n, beam_width = config.n, config.beam_width
    for start in range(0, config.num_requests, WORKLOAD_CHUNK):
        end = start + WORKLOAD_CHUNK
        for i, a, p, o in zip(range(start, min(end, config.num_requests)),
                              arrivals[start:end].tolist(), prompt[start:end].tolist(),
                              output[start:end].tolist(), strict=True):
            yield Request(i, a, p, o, n, beam_width)


def _draw(config: WorkloadConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prompt and output lengths (tokens) and arrival times (seconds) of every request."""
    count = config.num_requests
    # Two independent streams: changing the rate must not change the lengths (rate sweeps).
    length_rng, arrival_rng = (np.random.default_rng(s)
                               for s in np.random.SeedSequence(config.seed).spawn(2))
    if config.kind in LENGTH_DISTRIBUTIONS:
        (mu_in, sigma_in), (mu_out, sigma_out) = LENGTH_DISTRIBUTIONS[config.kind]
        prompt = _lognormal_lens(length_rng, mu_in, sigma_in, count)
        output = _lognormal_lens(length_rng, mu_out, sigma_out, count)
        prompt = np.minimum(prompt, config.max_model_len - 1)  # same rule as clip_lengths
        output = np.minimum(output, config.max_model_len - prompt)
    elif config.kind == "fixed":
        prompt = np.full(count, config.prompt_len, dtype=np.int64)
        output = np.full(count, config.output_len, dtype=np.int64)
    else:  # uniform, inclusive bounds
        (p_lo, p_hi), (o_lo, o_hi) = config.prompt_len_range, config.output_len_range
        prompt = length_rng.integers(p_lo, p_hi, size=count, endpoint=True)
        output = length_rng.integers(o_lo, o_hi, size=count, endpoint=True)

    if math.isinf(config.rate_per_s):
        arrivals = np.zeros(count)
    else:
        arrivals = np.cumsum(arrival_rng.exponential(1.0 / config.rate_per_s, size=count))
    return prompt, output, arrivals


def summarize_workload(requests: list[Request]) -> dict[str, float | int]:
    """Summary statistics of a workload as a flat dict (lengths in tokens, times in seconds).

    Keys: ``num_requests``, ``mean_prompt_len``, ``p50_prompt_len``, ``p99_prompt_len``,
    ``max_prompt_len``, the same four for ``output_len``, ``max_final_len``,
    ``duration_s`` (last arrival minus first) and ``mean_interarrival_s``
    (``nan`` for a single request).
    """
    if not requests:
        raise ValueError("cannot summarize an empty workload")
    prompt = np.fromiter((r.prompt_len for r in requests), dtype=np.int64, count=len(requests))
    output = np.fromiter((r.output_len for r in requests), dtype=np.int64, count=len(requests))
    arrivals = np.fromiter((r.arrival_s for r in requests), dtype=float, count=len(requests))
    summary: dict[str, float | int] = {"num_requests": len(requests)}
    for name, lens in (("prompt_len", prompt), ("output_len", output)):
        summary[f"mean_{name}"] = float(lens.mean())
        summary[f"p50_{name}"] = float(np.percentile(lens, 50))
        summary[f"p99_{name}"] = float(np.percentile(lens, 99))
        summary[f"max_{name}"] = int(lens.max())
    summary["max_final_len"] = int((prompt + output).max())
    duration_s = float(arrivals.max() - arrivals.min())
    summary["duration_s"] = duration_s
    summary["mean_interarrival_s"] = (duration_s / (len(requests) - 1) if len(requests) > 1
                                      else math.nan)
    return summary
