"""Planted bugs in the lab 6 reference that the graders must catch (never released)."""

from pagedsim.labs.mutants import Mutant

MUTANTS = [
    # The last block's tail (and padding slots) read without a mask: NaN leaks in.
    Mutant(name="unmasked-last-block-load", file="paged_attention_lab.py",
           old="return tl.load(cache_ptr + rows[:, None] + d[None, :], mask=t_mask[:, None], "
               "other=0.0)",
           new="return tl.load(cache_ptr + rows[:, None] + d[None, :])",
           caught_by=("lab6_2",)),
    # Online softmax that rescales the accumulator but not the running sum.
    Mutant(name="running-sum-not-rescaled", file="paged_attention_lab.py",
           old="l_i = l_i * alpha + tl.sum(p, axis=1)",
           new="l_i = l_i + tl.sum(p, axis=1)",
           caught_by=("lab6_4",)),
    # GQA: query heads paired with KV heads one to one (h reads KV head h), not h // G.
    Mutant(name="gqa-head-not-grouped", file="paged_attention_lab.py",
           old="heads = kv_head * GROUP + g",
           new="heads = kv_head + g",
           caught_by=("lab6_3",)),
    # Split-K merged as a plain average of the splits' outputs, as if every split held the
    # same share of the softmax sum (the weights 2 ** lse forgotten).
    Mutant(name="split-k-averaged", file="paged_attention_lab.py",
           old="w = tl.exp2(lse - tl.max(lse, axis=0))",
           new="w = tl.where(p_mask, 1.0, 0.0)",
           caught_by=("lab6_5",)),
]
