"""Beam search's stand-in for scores: which beams survive a step, and what that does.

After every step of a beam-search request (``beam_width`` k), k survivors are chosen among
the beams' continuations. Parents with several survivors are forked (the children share
their blocks where the scheme shares), parents with none are dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..memory.base import SeqId


class BeamModel:
    """Which beams' continuations survive a step: a seeded stand-in for real scores.

    Each of the k survivors picks its parent independently, beam i with probability
    proportional to ``decay ** i``. With decay 0.5 and k = 4 the best beam parents
    about half the survivors, so beams keep merging into few lineages, as real beam
    search does; decay 1 makes every beam equally likely.
    """

    def __init__(self, decay: float, seed: int) -> None:
        self.decay = decay
        self.rng = np.random.default_rng(seed)
        self._probs: dict[int, np.ndarray] = {}

    def parents(self, width: int) -> list[int]:
        """For each survivor, the index of its parent beam (sorted: best parent first)."""
        p = self._probs.get(width)
        if p is None:
            w = self.decay ** np.arange(width)
            p = self._probs[width] = w / w.sum()
        return sorted(self.rng.choice(width, size=width, p=p).tolist())

    def select(self, seq_ids: list[SeqId], new_seq_id: Callable[[], SeqId]
               ) -> tuple[list[SeqId], list[tuple[SeqId, SeqId]], list[SeqId]]:
        """One step's selection over the beams ``seq_ids`` (best first): the survivors'
        ids, the ``(parent, child)`` forks that make them (children named by
        ``new_seq_id``), and the beams dropped."""
        counts = [0] * len(seq_ids)
        for i in self.parents(len(seq_ids)):
            counts[i] += 1
        survivors: list[SeqId] = []
        forks: list[tuple[SeqId, SeqId]] = []
        dropped: list[SeqId] = []
        for i, seq_id in enumerate(seq_ids):
            if counts[i] == 0:
                dropped.append(seq_id)
                continue
            survivors.append(seq_id)
            for _ in range(counts[i] - 1):
                child = new_seq_id()
                forks.append((seq_id, child))
                survivors.append(child)
        return survivors, forks, dropped
