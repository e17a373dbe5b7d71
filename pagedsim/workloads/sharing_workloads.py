"""Synthetic workloads whose prompts share content: the classic prefix-sharing shapes.

The ShareGPT/Alpaca generators of :mod:`pagedsim.workloads.workload` share nothing. The three here
fill :attr:`pagedsim.workloads.workload.Request.prompt_pieces` (ids of consecutive pieces of
``piece_tokens`` tokens; equal ids = equal tokens, see :mod:`pagedsim.workloads.prompts`), so a
prefix cache (:func:`pagedsim.experiments.cache_replay.replay`) finds what they share:

* :func:`system_prompt`: ``groups`` groups of ``per_group`` requests; a group's requests
  start with the same system prompt of ``system_tokens`` tokens, then a user message of
  their own.
* :func:`multi_turn`: ``conversations`` conversations of ``turns`` turns; turn k's prompt
  is turn k-1's whole prompt, then its output, then a new user message.
* :func:`few_shot`: every request starts with the same ``shots`` examples of
  ``shot_tokens`` tokens each (one set per task, ``tasks`` sets), then its own question.

Piece ids
---------
Ids are unique across a workload except where content is shared on purpose. Each role
draws from its own range, handed out in order: shared prefixes (system prompts, shot sets)
from :data:`SHARED_IDS`, conversation histories from :data:`CONVERSATION_IDS`, and content
nobody else holds (user messages, questions) from :data:`UNIQUE_IDS`.

**The piece-boundary rule.** A piece holds one content only: a piece that would hold both
the tail of a shared part and the head of a request's own part gets a fresh unique id.
So requests share the first ``floor(shared_tokens / piece_tokens)`` pieces of a shared
part and nothing after; its last ``shared_tokens % piece_tokens`` tokens count as the
request's own. With blocks of ``block_size`` tokens a multiple of ``piece_tokens`` (the
default 16 and 16: a block is a piece), this is exactly what real token sharing gives a
block-level prefix cache: sharing stops at the last full block inside the shared part,
``floor(shared_tokens / block_size)`` blocks. With blocks smaller than a piece, up to
``piece_tokens - 1`` shared tokens go unshared. A multi-turn conversation is one stream
of tokens (its history never diverges), so its pieces straddle turn boundaries freely
and turn k-1's prompt + output is a true prefix of turn k's prompt, partial pieces
included.

Arrivals and determinism
------------------------
Arrivals are a Poisson process at ``rate_per_s`` (exponential gaps, the first after one
gap; ``inf``: all at t = 0), as :func:`pagedsim.workloads.workload.generate_workload`. Which group,
conversation or task each arrival belongs to is a seeded shuffle, so groups interleave in
time; a conversation's turns arrive in order. Lengths and arrivals come from two child
streams of ``seed``: the same config gives the same requests, and changing the rate
keeps every length and every piece. Lengths are drawn uniform on inclusive ``(low, high)``
token ranges; a config whose longest possible request exceeds ``max_model_len`` is an
error (clipping would break the sharing structure).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..validate import check_choice, check_int
from .workload import Request, _check_range, check_num_requests, check_rate_per_s

#: First piece id of each role (disjoint ranges; see the module docstring).
SHARED_IDS = 0
CONVERSATION_IDS = 1 << 40
UNIQUE_IDS = 2 << 40

#: Workload names usable wherever ``sharegpt`` / ``alpaca`` are (experiments, CLI).
SHARING_WORKLOAD_NAMES = ("system-prompt", "multi-turn", "few-shot")


class _Ids:
    """Hands out fresh piece ids of one role, in order."""

    __slots__ = ("next",)

    def __init__(self, start: int) -> None:
        self.next = start

    def take(self, count: int) -> tuple[int, ...]:
        out = tuple(range(self.next, self.next + count))
        self.next += count
        return out


def _check_common(rate_per_s: object, seed: object, piece_tokens: object,
                  max_model_len: object, n: object, beam_width: object) -> float:
    rate = check_rate_per_s(rate_per_s)
    check_int("seed", seed, minimum=0)
    check_int("piece_tokens", piece_tokens, minimum=1)
    check_int("max_model_len", max_model_len, minimum=2)
    check_int("n", n, minimum=1)
    check_int("beam_width", beam_width, minimum=1)
    if n > 1 and beam_width > 1:  # type: ignore[operator]
        raise ValueError(f"n ({n}) and beam_width ({beam_width}) cannot both exceed 1; "
                         "choose parallel sampling or beam search")
    return rate


def _check_fits(what: str, longest: int, max_model_len: int) -> None:
    if longest > max_model_len:
        raise ValueError(f"{what} workload: longest request is {longest} tokens, over "
                         f"max_model_len {max_model_len}")


def _streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    length_rng, arrival_rng = (np.random.default_rng(s)
                               for s in np.random.SeedSequence(seed).spawn(2))
    return length_rng, arrival_rng


def _arrivals(rng: np.random.Generator, rate_per_s: float, count: int) -> list[float]:
    if math.isinf(rate_per_s):
        return [0.0] * count
    return np.cumsum(rng.exponential(1.0 / rate_per_s, size=count)).tolist()


def _shared_then_own(shared: tuple[int, ...], shared_tokens: int, prompt_len: int,
                     piece_tokens: int, unique: _Ids) -> tuple[int, ...]:
    """Pieces of a prompt that starts with a shared part (``shared``: its pieces, the
    last possibly partial) then holds its own tokens: the shared part's full pieces, then
    fresh unique ids (the piece-boundary rule)."""
    full = shared_tokens // piece_tokens
    need = -(-prompt_len // piece_tokens)
    return shared[:full] + unique.take(need - full)


def _uniform(rng: np.random.Generator, bounds: tuple[int, int], size: int) -> list[int]:
    return rng.integers(bounds[0], bounds[1], size=size, endpoint=True).tolist()


@dataclass(slots=True)
class SystemPromptConfig:
    """:func:`system_prompt`'s parameters. Lengths in tokens, inclusive ``(low, high)``
    ranges; ``rate_per_s`` in requests/s (``inf``: all at t = 0); ``piece_tokens``: tokens
    per prompt piece; ``max_model_len``: the context every request must fit."""

    groups: int = 10
    per_group: int = 100
    system_tokens: int = 96
    user_len_range: tuple[int, int] = (1, 130)
    output_len_range: tuple[int, int] = (1, 676)
    rate_per_s: float = 1.0
    seed: int = 0
    piece_tokens: int = 16
    max_model_len: int = 2048
    n: int = 1
    beam_width: int = 1

    def __post_init__(self) -> None:
        self.rate_per_s = _check_common(self.rate_per_s, self.seed, self.piece_tokens,
                                        self.max_model_len, self.n, self.beam_width)
        check_int("groups", self.groups, minimum=1)
        check_int("per_group", self.per_group, minimum=1)
        check_num_requests(self.groups * self.per_group, "groups x per_group")
        check_int("system_tokens", self.system_tokens, minimum=1)
        self.user_len_range = _check_range("user_len_range", self.user_len_range)
        self.output_len_range = _check_range("output_len_range", self.output_len_range)
        _check_fits("system-prompt", self.system_tokens + self.user_len_range[1]
                    + self.output_len_range[1], self.max_model_len)


@dataclass(slots=True)
class MultiTurnConfig:
    """:func:`multi_turn`'s parameters. ``message_len_range``: tokens of each turn's new
    user message (the first turn's whole prompt); ``output_len_range``: tokens each turn
    generates; inclusive ``(low, high)`` ranges. Other fields as
    :class:`SystemPromptConfig`."""

    conversations: int = 250
    turns: int = 4
    message_len_range: tuple[int, int] = (1, 64)
    output_len_range: tuple[int, int] = (1, 112)
    rate_per_s: float = 1.0
    seed: int = 0
    piece_tokens: int = 16
    max_model_len: int = 2048
    n: int = 1
    beam_width: int = 1

    def __post_init__(self) -> None:
        self.rate_per_s = _check_common(self.rate_per_s, self.seed, self.piece_tokens,
                                        self.max_model_len, self.n, self.beam_width)
        check_int("conversations", self.conversations, minimum=1)
        check_int("turns", self.turns, minimum=1)
        check_num_requests(self.conversations * self.turns, "conversations x turns")
        self.message_len_range = _check_range("message_len_range", self.message_len_range)
        self.output_len_range = _check_range("output_len_range", self.output_len_range)
        _check_fits("multi-turn", self.turns * (self.message_len_range[1]
                                                + self.output_len_range[1]),
                    self.max_model_len)


@dataclass(slots=True)
class FewShotConfig:
    """:func:`few_shot`'s parameters. ``shots`` examples of ``shot_tokens`` tokens each
    open every prompt (one set of shots per task; each request picks one of ``tasks``
    uniformly), then a question of ``question_len_range`` tokens. Other fields as
    :class:`SystemPromptConfig`."""

    num_requests: int = 1000
    shot_tokens: int = 32
    shots: int = 4
    question_len_range: tuple[int, int] = (1, 66)
    output_len_range: tuple[int, int] = (1, 676)
    tasks: int = 1
    rate_per_s: float = 1.0
    seed: int = 0
    piece_tokens: int = 16
    max_model_len: int = 2048
    n: int = 1
    beam_width: int = 1

    def __post_init__(self) -> None:
        self.rate_per_s = _check_common(self.rate_per_s, self.seed, self.piece_tokens,
                                        self.max_model_len, self.n, self.beam_width)
        check_num_requests(self.num_requests)
        check_int("shot_tokens", self.shot_tokens, minimum=1)
        check_int("shots", self.shots, minimum=1)
        check_int("tasks", self.tasks, minimum=1)
        self.question_len_range = _check_range("question_len_range", self.question_len_range)
        self.output_len_range = _check_range("output_len_range", self.output_len_range)
        _check_fits("few-shot", self.shots * self.shot_tokens + self.question_len_range[1]
                    + self.output_len_range[1], self.max_model_len)


def generate_system_prompt(config: SystemPromptConfig) -> list[Request]:
    """``groups * per_group`` requests sorted by arrival (ids 0, 1, ...); ``prefix_id`` is
    the group. Two requests of one group share ``floor(system_tokens / piece_tokens)``
    pieces, requests of different groups none."""
    c = config
    count = c.groups * c.per_group
    length_rng, arrival_rng = _streams(c.seed)
    shared, unique = _Ids(SHARED_IDS), _Ids(UNIQUE_IDS)
    systems = [shared.take(-(-c.system_tokens // c.piece_tokens)) for _ in range(c.groups)]
    group_of = length_rng.permutation(np.repeat(np.arange(c.groups), c.per_group)).tolist()
    user = _uniform(length_rng, c.user_len_range, count)
    output = _uniform(length_rng, c.output_len_range, count)
    arrivals = _arrivals(arrival_rng, c.rate_per_s, count)
    out = []
    for i in range(count):
        g, prompt_len = group_of[i], c.system_tokens + user[i]
        pieces = _shared_then_own(systems[g], c.system_tokens, prompt_len, c.piece_tokens,
                                  unique)
        out.append(Request(i, arrivals[i], prompt_len, output[i], c.n, c.beam_width,
                           prefix_id=g, prompt_pieces=pieces,
                           prompt_piece_tokens=c.piece_tokens))
    return out


def generate_multi_turn(config: MultiTurnConfig) -> list[Request]:
    """``conversations * turns`` requests sorted by arrival (ids 0, 1, ...); ``prefix_id``
    is the conversation. Turn k's prompt is turn k-1's prompt + output + a new message."""
    c = config
    count = c.conversations * c.turns
    length_rng, arrival_rng = _streams(c.seed)
    order = length_rng.permutation(np.repeat(np.arange(c.conversations), c.turns)).tolist()
    message = _uniform(length_rng, c.message_len_range, count)  # by arrival slot
    output = _uniform(length_rng, c.output_len_range, count)
    arrivals = _arrivals(arrival_rng, c.rate_per_s, count)
    ids = _Ids(CONVERSATION_IDS)
    streams: list[list[int]] = [[] for _ in range(c.conversations)]  # pieces so far
    history = [0] * c.conversations  # tokens of prompt + output so far
    out = []
    for i in range(count):
        conv = order[i]
        prompt_len = history[conv] + message[i]
        # the stream must hold the prompt and the output it will generate
        need = -(-(prompt_len + output[i]) // c.piece_tokens)
        stream = streams[conv]
        stream.extend(ids.take(need - len(stream)))
        pieces = tuple(stream[:need])  # prompt and output: the next turn repeats both
        out.append(Request(i, arrivals[i], prompt_len, output[i], c.n, c.beam_width,
                           prefix_id=conv, prompt_pieces=pieces,
                           prompt_piece_tokens=c.piece_tokens, output_in_pieces=True))
        history[conv] = prompt_len + output[i]
    return out


def generate_few_shot(config: FewShotConfig) -> list[Request]:
    """``num_requests`` requests sorted by arrival (ids 0, 1, ...); ``prefix_id`` is the
    task. Requests of one task share ``floor(shots * shot_tokens / piece_tokens)``
    pieces."""
    c = config
    length_rng, arrival_rng = _streams(c.seed)
    shared_tokens = c.shots * c.shot_tokens
    shared, unique = _Ids(SHARED_IDS), _Ids(UNIQUE_IDS)
    sets = [shared.take(-(-shared_tokens // c.piece_tokens)) for _ in range(c.tasks)]
    task_of = length_rng.integers(0, c.tasks, size=c.num_requests).tolist()
    question = _uniform(length_rng, c.question_len_range, c.num_requests)
    output = _uniform(length_rng, c.output_len_range, c.num_requests)
    arrivals = _arrivals(arrival_rng, c.rate_per_s, c.num_requests)
    out = []
    for i in range(c.num_requests):
        t, prompt_len = task_of[i], shared_tokens + question[i]
        pieces = _shared_then_own(sets[t], shared_tokens, prompt_len, c.piece_tokens, unique)
        out.append(Request(i, arrivals[i], prompt_len, output[i], c.n, c.beam_width,
                           prefix_id=t, prompt_pieces=pieces,
                           prompt_piece_tokens=c.piece_tokens))
    return out


def system_prompt(groups: int, per_group: int, system_tokens: int,
                  user_len_range: tuple[int, int], output_len_range: tuple[int, int],
                  rate_per_s: float, seed: int, piece_tokens: int = 16,
                  **more: int) -> list[Request]:
    """Shared system prompts (see :class:`SystemPromptConfig`; ``more``: ``max_model_len``,
    ``n``, ``beam_width``)."""
    return generate_system_prompt(SystemPromptConfig(
        groups, per_group, system_tokens, user_len_range, output_len_range, rate_per_s,
        seed, piece_tokens, **more))


def multi_turn(conversations: int, turns: int, message_len_range: tuple[int, int],
               output_len_range: tuple[int, int], rate_per_s: float, seed: int,
               piece_tokens: int = 16, **more: int) -> list[Request]:
    """Multi-turn conversations (see :class:`MultiTurnConfig`)."""
    return generate_multi_turn(MultiTurnConfig(
        conversations, turns, message_len_range, output_len_range, rate_per_s, seed,
        piece_tokens, **more))


def few_shot(num_requests: int, shot_tokens: int, shots: int,
             question_len_range: tuple[int, int], output_len_range: tuple[int, int],
             rate_per_s: float, seed: int, piece_tokens: int = 16, tasks: int = 1,
             **more: int) -> list[Request]:
    """Few-shot prompts (see :class:`FewShotConfig`)."""
    return generate_few_shot(FewShotConfig(
        num_requests, shot_tokens, shots, question_len_range, output_len_range, tasks,
        rate_per_s, seed, piece_tokens, **more))


def _first(requests: list[Request], count: int) -> list[Request]:
    return requests[:count]  # sorted by arrival, ids 0.. in order: still 0..count-1


def sharing_config(name: str, num_requests: int, rate_per_s: float = 1.0, seed: int = 0,
                   max_model_len: int = 2048, n: int = 1, beam_width: int = 1
                   ) -> SystemPromptConfig | MultiTurnConfig | FewShotConfig:
    """The config of the workload ``name`` (one of :data:`SHARING_WORKLOAD_NAMES`) with its
    default shape, sized for ``num_requests`` requests, checked and not yet generated: a
    shape whose longest possible request exceeds ``max_model_len`` tokens is refused here,
    before any request is made (an experiment checks it when it is built).

    Defaults keep the mean prompt near ShareGPT's 161 tokens: ``system-prompt`` 10 groups
    (fewer if fewer requests) of a 96-token system prompt + 1..130 user tokens, 1..676
    output tokens (mean 338.5, ShareGPT's 339); ``few-shot`` 4 shots of 32 tokens + a
    1..66-token question, 1..676 output tokens; ``multi-turn`` conversations of 4 turns,
    messages of 1..64 tokens and outputs of 1..112 (mean prompt about 166 tokens over the
    turns; outputs are short because each one lengthens every later prompt).
    """
    check_choice("sharing workload", name, SHARING_WORKLOAD_NAMES)
    check_num_requests(num_requests)
    common = dict(rate_per_s=rate_per_s, seed=seed, max_model_len=max_model_len, n=n,
                  beam_width=beam_width)
    if name == "system-prompt":
        groups = min(10, num_requests)
        return SystemPromptConfig(groups=groups, per_group=-(-num_requests // groups),
                                  **common)
    if name == "multi-turn":
        turns = MultiTurnConfig.__dataclass_fields__["turns"].default
        return MultiTurnConfig(conversations=-(-num_requests // turns), turns=turns,
                               **common)
    return FewShotConfig(num_requests=num_requests, **common)


def sharing_workload(name: str, num_requests: int, rate_per_s: float = 1.0, seed: int = 0,
                     max_model_len: int = 2048, n: int = 1,
                     beam_width: int = 1) -> list[Request]:
    """The workload ``name`` (one of :data:`SHARING_WORKLOAD_NAMES`) with its default
    shape (:func:`sharing_config`) and ``num_requests`` requests, for experiments and the
    CLI. Requests are cut to the first ``num_requests`` arrivals (a last group or
    conversation may be partial)."""
    config = sharing_config(name, num_requests, rate_per_s, seed, max_model_len, n,
                            beam_width)
    make: Callable[..., list[Request]] = {
        SystemPromptConfig: generate_system_prompt, MultiTurnConfig: generate_multi_turn,
        FewShotConfig: generate_few_shot}[type(config)]
    return _first(make(config), num_requests)
