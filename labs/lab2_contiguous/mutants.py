"""Planted-bug mutants of lab 2's reference: realistic student bugs the graders must catch."""

from pagedsim.labs.mutants import Mutant

MUTANTS = [
    Mutant(name="best-fit-picks-first", file="contiguous_lab.py",
           old="if best < 0 or hole < self.holes[best][1]:", new="if best < 0:",
           caught_by=("lab2_2",)),
    Mutant(name="merge-left-only", file="contiguous_lab.py",
           old="if i < len(self.holes) and start + size == self.holes[i][0]:", new="if False:",
           caught_by=("lab2_3",)),
    Mutant(name="reserved-past-region-end", file="contiguous_lab.py",
           old="future = min(max(r.final_len, r.num_tokens), r.size)",
           new="future = max(r.final_len, r.num_tokens)",
           caught_by=("lab2_5",)),
]
