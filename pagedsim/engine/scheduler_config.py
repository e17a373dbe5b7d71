"""What the scheduler may do: its limits and policies, and the beam-search stand-in.

:class:`SchedulerConfig` holds vLLM v0's limits (``max_num_seqs``,
``max_num_batched_tokens``, the watermark), the preemption mode, the scheduling policy
(see :mod:`pagedsim.engine.scheduler`), the order of the waiting queue (see
:mod:`pagedsim.engine.waiting_queue`) and the CPU swap pool; :class:`BeamModel` decides which
beams survive a beam-search step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..validate import check_choice, check_fraction, check_int

PREEMPTION_MODES = ("recompute", "swap")
#: Scheduling policies: ``v0`` (vLLM v0, the paper's: a step prefills or decodes) and
#: ``chunked`` (vLLM v1 / Sarathi-Serve: decodes first, prefill chunks fill the budget).
POLICIES = ("v0", "chunked")
#: Orders of the waiting queue: ``fcfs`` (arrival order) and ``lpm`` (SGLang's longest
#: prefix match first, FCFS above 128 waiting); see :mod:`pagedsim.engine.waiting_queue`.
ORDERS = ("fcfs", "lpm")


@dataclass(slots=True)
class SchedulerConfig:
    """Scheduling limits. Defaults follow vLLM v0."""

    max_num_seqs: int = 256  # sequences decoding in one step
    max_num_batched_tokens: int = 2048  # prefill tokens + decode tokens in one step
    watermark: float = 0.01  # fraction of the pool kept free at admission (where it applies)
    preemption: str = "recompute"  # or "swap"
    cpu_swap_slots: int = 0  # CPU pool for swapping, in token slots (0 = no swapping room)
    beam_decay: float = 0.5  # beam search parent model, see BeamModel
    seed: int = 0  # beam search randomness
    policy: str = "v0"  # see POLICIES
    order: str = "fcfs"  # see ORDERS
    #: Longest request in tokens (prompt + output); longer ones are rejected with a reason.
    #: None: the allocator's own limit if it has one (contiguous, vAttention), else none.
    max_model_len: int | None = None
    #: vLLM 0.6's multi-step scheduling (``--num-scheduler-steps``, ``v0`` only): decodes
    #: run in blocks of this many steps, and waiting prompts are admitted only between
    #: blocks. 1: every step may admit.
    num_scheduler_steps: int = 1

    def __post_init__(self) -> None:
        check_int("max_num_seqs", self.max_num_seqs, minimum=1)
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, minimum=1)
        check_fraction("watermark", self.watermark)
        check_choice("preemption", self.preemption, PREEMPTION_MODES)
        check_int("cpu_swap_slots", self.cpu_swap_slots, minimum=0)
        if not 0 < self.beam_decay <= 1:
            raise ValueError(f"beam_decay must be in (0, 1], got {self.beam_decay!r}")
        check_int("seed", self.seed, minimum=0)
        check_choice("policy", self.policy, POLICIES)
        check_choice("order", self.order, ORDERS)
        if self.max_model_len is not None:
            check_int("max_model_len", self.max_model_len, minimum=1)
        check_int("num_scheduler_steps", self.num_scheduler_steps, minimum=1)
        if self.num_scheduler_steps > 1 and self.policy != "v0":
            raise ValueError(f"num_scheduler_steps {self.num_scheduler_steps} needs policy "
                             f"'v0' (vLLM 0.6's multi-step), got policy {self.policy!r}")
