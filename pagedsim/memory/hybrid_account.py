"""The six-way account of a hybrid pool, per KV-cache group and in total; its snapshot;
and the consistency checks the property tests run after every operation.

The groups *partition* the pool: a block is free (or cached) or held by exactly one
group, so each group's token / reserved / internal-fragmentation / cached slots plus the
pool's free slots sum to the capacity. A sliding group's blocks are full but for each
table's last one, like a full group's (blocks behind the window are given up, not kept
half-empty), so one visit per sequence and group splits the slots
(:mod:`.fast_usage`'s argument, table by table). Tokens behind the window that still sit
in a held block count as ``token``: their K/V is there until the block is given up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from .accounting import final_tokens
from .base import SeqId, SlotUsage
from .hybrid_groups import NULL_BLOCK


class HybridAccount:
    """``usage``, ``group_usage``, ``snapshot`` and ``check_invariants`` of a
    :class:`~.hybrid.HybridAllocator`."""

    def _split(self, groups: range, used_blocks: int, final_lens: Mapping | None
               ) -> tuple[int, int]:
        """(token, reserved) slots of the blocks ``groups`` hold (``used_blocks`` of them)."""
        bs, ref, fl = self.block_size, self._ref, final_lens or {}
        token = reserved = num_partial = 0
        shared_last: dict[int, tuple[int, int]] = {}  # shared partial block -> (fill, future)
        for seq_id, seq in self._seqs.items():
            n = seq.num_tokens
            fill = n % bs
            if not fill:
                continue
            final = final_tokens(n, fl.get(seq_id, seq.final_len) if fl else seq.final_len)
            future = min(bs, final - (n - fill))
            for g in groups:
                b = seq.tables[g][-1]
                if ref[b] == 1:
                    num_partial += 1
                    token += fill
                    reserved += future - fill
                else:
                    old = shared_last.get(b)
                    if old is None:
                        num_partial += 1
                    if old is None or future > old[1]:
                        shared_last[b] = (fill, future)
        for fill, future in shared_last.values():
            token += fill
            reserved += future - fill
        return token + (used_blocks - num_partial) * bs, reserved

    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """Slots of every group together: token / reserved / internal fragmentation, and
        the cached ones (logical blocks: the tables' held entries)."""
        used = self.num_blocks - self.pool.get_num_free_blocks()
        token, reserved = self._split(range(len(self.groups)), used, final_lens)
        return SlotUsage(token_slots=token, reserved_slots=reserved,
                         internal_frag_slots=used * self.block_size - token - reserved,
                         physical_blocks=used, logical_blocks=self._num_logical_blocks,
                         cached_slots=self.pool.num_cached_blocks * self.block_size)

    def group_usage(self, group: int, final_lens: Mapping[SeqId, int] | None = None
                    ) -> SlotUsage:
        """One group's share: the slots of the blocks it holds, split as :meth:`usage`
        splits them, and the cached blocks named for it (a scan of the free queue)."""
        g = self._check_group(group)
        used = self.group_blocks[g]
        token, reserved = self._split(range(g, g + 1), used, final_lens)
        names = getattr(self.pool, "hashes", None)
        cached = 0 if names is None else sum(
            1 for b in self.pool.free if names[b] is not None and names[b][0] == g)
        held = sum(len(s.tables[g]) - s.first[g] for s in self._seqs.values())
        return SlotUsage(token_slots=token, reserved_slots=reserved,
                         internal_frag_slots=used * self.block_size - token - reserved,
                         physical_blocks=used, logical_blocks=held,
                         cached_slots=cached * self.block_size)

    def group_accounts(self, final_lens: Mapping[SeqId, int] | None = None) -> list[dict]:
        """One row per group (``group``, ``kind``, ``window_tokens``, ``blocks`` held,
        ``token``, ``reserved``, ``internal_frag``, ``cached`` slots, and the entries and
        blocks given up behind the window so far), then a ``total`` row whose ``free``
        completes the six-way account: the rows' slots sum to ``capacity_slots``."""
        rows = []
        for g, spec in enumerate(self.groups):
            u = self.group_usage(g, final_lens)
            rows.append({"group": g, "kind": spec.kind, "window_tokens": spec.window_tokens,
                         "blocks": u.physical_blocks, "token": u.token_slots,
                         "reserved": u.reserved_slots, "internal_frag": u.internal_frag_slots,
                         "cached": u.cached_slots,
                         "window_dropped_entries": self.window_dropped_entries[g],
                         "window_freed_blocks": self.window_freed_blocks[g]})
        total = {k: sum(r[k] for r in rows) for k in rows[0] if k not in
                 ("group", "kind", "window_tokens")}
        rows.append({"group": "total", "kind": "", "window_tokens": 0, **total,
                     "external_frag": 0, "free": self.num_free_slots})
        return rows

    def window_null_entries(self) -> list[int]:
        """Per group, the table entries live sequences hold as null (blocks given up
        behind the window): what a group that kept every block would hold more, in
        blocks (0 for full groups)."""
        out = [0] * len(self.groups)
        for g, _ in self._sliding:
            out[g] = sum(seq.first[g] for seq in self._seqs.values())
        return out

    def snapshot(self) -> dict:
        """The whole state as plain data: the groups, every sequence's tables (group 0's
        as ``block_table``, the pictures' field), reference counts and the pool's free
        structure (in a caching pool its cached blocks and every block's name)."""
        snap = {
            "kind": self.kind, "view": "blocks", "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "groups": [(g.kind, g.window_tokens, g.num_layers) for g in self.groups],
            "free_blocks": [], "ref_counts": list(self._ref),
            "seqs": {sid: {"block_table": list(s.tables[0]),
                           "block_tables": [list(t) for t in s.tables],
                           "num_tokens": s.num_tokens, "final_len": s.final_len}
                     for sid, s in self._seqs.items()},
        }
        self.pool.snapshot(snap)
        return snap

    def check_invariants(self) -> None:
        """Assert the groups partition the pool, tables and counts agree, each sliding
        group gave up every block behind the window of its last growth, and the fast
        accounting agrees with a walk (``AssertionError`` naming the first disagreement)."""
        counts: Counter[int] = Counter()
        owner: dict[int, int] = {}
        bs = self.block_size
        for seq_id, seq in self._seqs.items():
            assert len({len(t) for t in seq.tables}) == 1, f"{seq_id!r}: tables differ"
            assert len(seq.tables[0]) == -(-seq.num_tokens // bs), (
                f"sequence {seq_id!r}: {len(seq.tables[0])} blocks for {seq.num_tokens}")
            for g, (table, first) in enumerate(zip(seq.tables, seq.first, strict=True)):
                window = self.groups[g].window
                assert window is not None or first == 0, f"{seq_id!r}: full group dropped"
                assert all(b == NULL_BLOCK for b in table[:first]), f"{seq_id!r}: {g}"
                assert NULL_BLOCK not in table[first:], f"{seq_id!r}: hole in group {g}"
                assert not table or first < len(table), f"{seq_id!r}: last block dropped"
                if window is not None and seq.grown_at >= 0:
                    assert first >= (seq.grown_at - window + 1) // bs, (
                        f"sequence {seq_id!r}: group {g} keeps blocks behind its window")
                for b in table[first:]:
                    counts[b] += 1
                    assert owner.setdefault(b, g) == g, f"block {b} in groups {owner[b]}, {g}"
        for b in range(self.num_blocks):
            assert self._ref[b] == counts[b], f"block {b}: ref {self._ref[b]} != {counts[b]}"
        self.pool.check(set(counts))
        held = Counter(owner.values())
        assert self.group_blocks == [held[g] for g in range(len(self.groups))], (
            f"group block counts {self.group_blocks} != {[held[g] for g in held]}")
        assert self.refs.num_shared == sum(1 for c in counts.values() if c > 1)
        assert self._num_logical_blocks == sum(counts.values())
        walked = self._walk_usage()
        assert self.usage() == walked, f"fast usage {self.usage()} != {walked}"
        if self.cache is not None:
            self.cache.check()

    def _walk_usage(self) -> SlotUsage:
        """:meth:`usage` by the rule itself: every held block of every table visited."""
        bs, ref = self.block_size, self._ref
        seen: dict[int, tuple[int, int]] = {}  # block -> (fill, largest future fill)
        for seq in self._seqs.values():
            n = seq.num_tokens
            final = final_tokens(n, seq.final_len)
            for table, first in zip(seq.tables, seq.first, strict=True):
                for j in range(first, len(table)):
                    fill, future = min(bs, n - j * bs), min(bs, final - j * bs)
                    old = seen.get(table[j])
                    if old is None or future > old[1]:
                        seen[table[j]] = (fill, future)
        token = sum(f for f, _ in seen.values())
        reserved = sum(u - f for f, u in seen.values())
        used = len(seen)
        assert all(ref[b] for b in seen)
        return SlotUsage(token, reserved, used * bs - token - reserved, used,
                         self._num_logical_blocks, self.pool.num_cached_blocks * bs)
