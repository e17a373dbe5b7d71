"""Why the scheduler rejects a request: the one-line reasons a run reports
(``SequenceGroup.reject_reason``), in words a user can act on.

Each names the request (its id, prompt and output lengths in tokens, its width) and the
limit that bites, with the limit's value.
"""

from __future__ import annotations

from ..memory.kv_cache_manager import PoolFacts
from .plan import SequenceGroup


def describe(group: SequenceGroup) -> str:
    """``request 3 (prompt 100 + output 50 tokens, width 2)``."""
    r = group.request
    return (f"request {r.request_id} (prompt {r.prompt_len} + output {r.output_len} "
            f"tokens, width {group.width})")


def too_long_reason(group: SequenceGroup, max_model_len: int) -> str:
    """The request's prompt + output exceeds the model's context (``max_model_len``)."""
    r = group.request
    return (f"{describe(group)}: its {r.prompt_len + r.output_len} tokens are more than "
            f"max_model_len ({max_model_len}), the longest sequence the model runs")


def no_fit_reason(facts: PoolFacts, group: SequenceGroup, num_tokens: int,
                  recompute: bool) -> str:
    """The request does not fit the empty pool at admission (``facts`` of the pool, for
    one sequence of ``num_tokens`` tokens)."""
    per_seq = facts.slots_per_seq
    many = (f"; it starts {len(group.seq_ids)} sequences" if recompute
            else f" (and room for {group.width - 1} forks, in schemes that cannot share)"
            if group.width > 1 else "")
    return (f"{describe(group)} does not fit the empty pool of "
            f"{facts.capacity_slots:,} slots: this scheme takes {per_seq:,} "
            f"slots for one sequence of {num_tokens} tokens at admission{many}")


def outgrows_reason(facts: PoolFacts, group: SequenceGroup) -> str:
    """The request, running alone, needs more than the whole pool (``facts`` of it)."""
    return (f"{describe(group)} outgrows the whole pool of "
            f"{facts.capacity_slots:,} slots while running alone (it held "
            f"{facts.used_slots:,} slots after {group.num_output} output tokens)")
