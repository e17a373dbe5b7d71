"""Planted-bug mutants of lab 4's reference: realistic student bugs the graders must catch."""

from pagedsim.labs.mutants import Mutant

MUTANTS = [
    # The child shares the blocks without owning a reference: a free of either sequence
    # gives blocks back that the other still reads.
    Mutant(name="fork-forgets-refcount", file="cow_lab.py",
           old="self.ref_counts[b] += 1", new="pass",
           caught_by=("lab4_1",)),
    # Fork without copy-on-write: a shared last block is written in place.
    Mutant(name="fork-without-cow", file="cow_lab.py",
           old="new = self.take_block()  # raises (nothing changed) when no block is free",
           new="self.seq_lens[seq_id] = n + 1\n        return shared * bs + offset, None",
           caught_by=("lab4_2",)),
    # The copy is made but the shared block keeps the writer's reference: it is never freed.
    Mutant(name="cow-keeps-old-ref", file="cow_lab.py",
           old="self.ref_counts[shared] -= 1", new="pass",
           caught_by=("lab4_2",)),
    # Token slots summed per sequence: a shared block counted once per sharer.
    Mutant(name="token-counts-shared-twice", file="cow_lab.py",
           old="token_slots=sum(filled.values())", new="token_slots=sum(self.seq_lens.values())",
           caught_by=("lab4_3",)),
]
