"""What ``pagedsim compare`` says when memory never limited the batch: where the pool
would fill.

A scheme that saves memory (the hybrid manager's sliding-window groups, paging over
contiguous reservation) batches more only when memory is what stops the batch from
growing. When no request of any run ever waited, the arrival rate and the step times
alone set the batch (schemes whose steps take as long batch alike), and the table cannot
show what the saving is worth. :func:`fill_hint_lines` then says so, and estimates,
from the run itself, a setting where the pool would fill:

* Below saturation the memory held and the batch both grow in proportion to the arrival
  rate (Little's law, while latencies stay the same). The scheme whose pool was fullest
  held a mean share ``h`` of its slots (token, reserved and internal-fragmentation
  slots, time-weighted over the whole run) with a mean batch of ``B`` requests at
  ``r`` req/s. Scaled linearly, its pool fills at ``r / h`` req/s, with a batch of
  ``B / h``.
* The batch stops growing at ``max_num_seqs`` requests. When ``B / h`` is beyond it,
  no rate fills the pool; a smaller one would: the pool that the batch at half of
  ``max_num_seqs`` fills (a lower ``--gpu-memory-utilization``, rounded down to
  hundredths), with the rate at which it fills, by the same linear estimate.

The estimates are linear in the rate, and say so: queueing and slower steps at a higher
rate make the real fill come somewhat earlier.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..models.budget import kv_budget

if TYPE_CHECKING:  # pragma: no cover
    from .runner import Comparison
    from .spec import Experiment

#: The slot categories held by running requests (what a higher rate would grow).
HELD = ("all_token", "all_reserved", "all_internal_frag")


def round_up(x: float, digits: int = 2) -> float:
    """``x`` rounded up to ``digits`` significant figures (``41.3 -> 42``, ``0.123 ->
    0.13``)."""
    if x <= 0 or not math.isfinite(x):
        return x
    scale = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return math.ceil(round(x / scale, 9)) * scale


def _rate_text(rate_per_s: float) -> str:
    return f"{rate_per_s:g}"


def _smaller_pool(exp: Experiment, fraction: float) -> tuple[float, float] | None:
    """``(gpu_memory_utilization, pool fraction)``: the utilization, rounded down to
    hundredths, that leaves at most ``fraction`` of this experiment's KV bytes, and the
    fraction it really leaves; None when no utilization leaves room for a block."""
    budget = kv_budget(exp.model, exp.gpu, weights_bytes=exp.weights_bytes,
                       gpu_memory_utilization=exp.gpu_memory_utilization,
                       activation_bytes=exp.activation_bytes, block_size=exp.block_size,
                       num_gpus=exp.num_gpus)
    want_bytes = fraction * budget.kv_cache_bytes
    util = math.floor(100 * (budget.weights_bytes + budget.activation_bytes + want_bytes)
                      / budget.gpu_memory_bytes) / 100
    if not 0 < util < exp.gpu_memory_utilization:
        return None
    left = int(budget.gpu_memory_bytes * util) - budget.weights_bytes - budget.activation_bytes
    if left < budget.bytes_per_block:
        return None
    return util, left / budget.kv_cache_bytes


def fill_hint_lines(cmp: Comparison) -> list[str]:
    """Lines for the foot of the compare table when no run saturated (no request ever
    waited; see the module docstring); none when one did."""
    summary = cmp.summary
    if not len(summary) or summary["sat_token"].notna().any():
        return []
    lines = ["memory never limited the batch (no request waited), so schemes that save "
             "memory cannot batch more here: the arrival rate and the step times set it"]
    recs = summary.to_dict("records")
    held = [sum(float(r[c]) for c in HELD) for r in recs]
    top = max(range(len(recs)), key=held.__getitem__)
    share, batch = held[top], float(recs[top]["mean_batch_size"])
    exp = cmp.experiment
    rate = exp.rate_per_s
    if not (share > 0 and batch > 0) or (rate is not None and math.isinf(rate)):
        return lines
    scheme, cap = recs[top]["scheme"], exp.max_num_seqs
    seen = (f"{scheme}'s pool, the fullest, held {100 * share:.1f}% of its slots with "
            f"{batch:.2f} requests a step")
    at = "this rate" if rate is None else f"{_rate_text(rate)} req/s"
    fill = 1 / share  # the rate multiple at which the pool fills (linear)
    if batch * fill <= cap:
        if rate is None:
            lines.append(f"  linear estimate: {seen} at {at}, so it would fill at about "
                         f"{round_up(fill):g} x the trace's mean arrival rate (--rate sets "
                         "it, in req/s)")
        else:
            fill_rate = _rate_text(round_up(rate * fill))
            lines.append(f"  linear estimate: {seen} at {at}, so it would fill at about "
                         f"{fill_rate} req/s: try --rate {fill_rate}")
        return lines
    most = share * cap / batch
    text = (f"  linear estimate: {seen} at {at}; the batch stops at max_num_seqs = {cap} "
            f"requests, where it would hold about {100 * most:.0f}%: no rate fills it")
    smaller = _smaller_pool(exp, share * cap / 2 / batch)
    if smaller is None or rate is None:
        lines.append(text)
        return lines
    util, fraction = smaller
    new_rate = _rate_text(round_up(rate * fraction / share))
    lines.append(f"{text}; a pool of {100 * fraction:.0f}% the size would fill at about "
                 f"{new_rate} req/s: try --gpu-memory-utilization {util:g} --rate {new_rate}")
    return lines
