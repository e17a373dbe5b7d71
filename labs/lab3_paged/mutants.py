"""Planted-bug mutants of lab 3's reference: realistic student bugs the graders must catch."""

from pagedsim.labs.mutants import Mutant

MUTANTS = [
    Mutant(name="free-forgets-refcount", file="paged_lab.py",
           old="self.ref_counts[block] -= 1", new="pass",
           caught_by=("lab3_5",)),
    Mutant(name="free-ignores-sharing", file="paged_lab.py",
           old="if self.ref_counts[block] == 0:", new="if True:",
           caught_by=("lab3_5",)),
    # Freed first block first: the free list (a stack) then hands the blocks out again in
    # reverse, so a prompt freed and allocated again gets a reversed block table.
    Mutant(name="free-forward-order", file="paged_lab.py",
           old="for block in reversed(table):", new="for block in table:",
           caught_by=("lab3_5",)),
    Mutant(name="slot-forgets-block-size", file="paged_lab.py",
           old="return [table[i // bs] * bs + i % bs for i in range(self.seq_lens[seq_id])]",
           new="return [table[i // bs] + i % bs for i in range(self.seq_lens[seq_id])]",
           caught_by=("lab3_3",)),
]
