"""Planted bugs in the lab 7 reference that the graders must catch (never released)."""

from pagedsim.labs.mutants import Mutant

MUTANTS = [
    # The scan counts a block with any data as full (allocator granularity, not slots).
    Mutant(name="partial-block-counted-full", file="measure_lab.py",
           old="per_block = written.sum(dim=1)",
           new="per_block = written.any(dim=1) * written.shape[1]",
           caught_by=("lab7_1",)),
    # The tables' view counts a slot once per sequence that holds it (shared blocks twice).
    Mutant(name="shared-slots-double-counted", file="measure_lab.py",
           old="return sorted({slot for seq in allocator.seq_ids() "
               "for slot in allocator.slot_mapping(seq)})",
           new="return sorted([slot for seq in allocator.seq_ids() "
               "for slot in allocator.slot_mapping(seq)])",
           caught_by=("lab7_2",)),
    # Released blocks keep their old K/V: the scan then sees memory nobody owns.
    Mutant(name="no-scrub-on-release", file="measure_lab.py",
           old="self._rows(cache)[start_slot:start_slot + num_slots] = SENTINEL",
           new="pass",
           caught_by=("lab7_3",)),
    # The first mismatch taken between the scan and the block tables, not the accounting
    # under test: they agree whenever the cache is right, so no accounting bug is reported.
    Mutant(name="first-mismatch-against-tables", file="measure_lab.py",
           old="first = next((r.step for r in rows if r.measured != r.accounted), None)",
           new="first = next((r.step for r in rows if r.measured != r.tables), None)",
           caught_by=("lab7_4",)),
]
