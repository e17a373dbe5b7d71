"""Planted-bug mutants of lab 5's reference: realistic student bugs the graders must catch."""

from pagedsim.labs.mutants import Mutant

MUTANTS = [
    # Each block hashed on its own tokens only: equal blocks after different prefixes
    # (whose K/V differ) get the same name.
    Mutant(name="hash-ignores-parent", file="prefix_lab.py",
           old="parent = hash_block(parent, tokens",
           new="parent = hash_block(ROOT_HASH, tokens",
           caught_by=("lab5_1",)),
    # Evicted blocks stay in the map: a later lookup hits a block that now holds other
    # tokens.
    Mutant(name="eviction-keeps-map-entry", file="prefix_lab.py",
           old=("        blocks.remove(block)\n"
                "        if not blocks:\n            del self.cached[h]\n"),
           new="",
           caught_by=("lab5_2",)),
    # A block taken out of the free queue by rebuilding the queue without it: right, and a
    # scan of the whole queue per hit (O(n) where O(1) is asked).
    Mutant(name="free-queue-remove-rebuilds", file="prefix_lab.py",
           old="        del self._queue[block]\n",
           new="        self._queue = OrderedDict((b, None) for b in self._queue if b != block)\n",
           caught_by=("lab5_2",)),
    # A prompt made of cached blocks only hits all of them: nothing is left to compute
    # the last token's logits from.
    Mutant(name="lookup-without-last-token-rule", file="prefix_lab.py",
           old="most = max(len(tokens) - 1, 0) // self.block_size",
           new="most = len(tokens) // self.block_size",
           caught_by=("lab5_3",)),
    # Freed head first: a chain's head reaches the queue's head before its tail and is
    # evicted first, stranding the tail.
    Mutant(name="free-head-first", file="prefix_lab.py",
           old="for block in reversed(table):", new="for block in table:",
           caught_by=("lab5_4",)),
]
