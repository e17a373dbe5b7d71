"""Graders for lab 7 (measured versus simulated KV memory).

Everything runs on the CPU with small tensors. The expected numbers of the script below
were worked out by hand (each step's comment says how) and agree with the reference.
Tests import only ``adapters``.
"""

from __future__ import annotations

import adapters
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import pagedsim

NAN = float("nan")
# The same examples every run (a grade must not depend on luck); no shrinking, so that a
# wrong submission fails fast.
COMMON = dict(deadline=None, derandomize=True, database=None,
              phases=(Phase.explicit, Phase.generate),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
FAST = settings(max_examples=15, **COMMON)
MACHINE = settings(max_examples=12, stateful_step_count=20, **COMMON)

# The script every 7.4 test replays: blocks of 4 slots, 8 blocks. Token slots after each
# step, worked out by hand:
SCRIPT = [
    ("allocate", "a", 8),  # 0: a fills blocks a0, a1                                    8
    ("allocate", "c", 4),  # 1: c fills c0                                              12
    ("append", "a"),  # 2: a's 9th token opens a2                                      13
    ("fork", "c", "d"),  # 3: d shares c0 (full): nothing written                      13
    ("append", "d"),  # 4: c0 is full, so d opens its own block                        14
    ("fork", "a", "b"),  # 5: b shares a0, a1 and a2 (a2 holds 1 token)                  14
    ("append", "b"),  # 6: copy-on-write: a2's 1 token copied to b's block, +1 new      16
    ("free", "a"),  # 7: a2 released (1 token); a0, a1 stay, held by b                  15
    ("append", "c"),  # 8: c opens c1                                                  16
    ("free", "b"),  # 9: a0, a1 (8 tokens) and b's block (2) released                    6
    ("free", "c"),  # 10: c1 released (1 token); c0 stays, held by d                     5
    ("free", "d"),  # 11: everything released                                           0
]
SCRIPT_SLOTS = [8, 12, 13, 13, 14, 14, 16, 15, 16, 6, 5, 0]


def honest(allocator: pagedsim.PagedAllocator) -> int:
    """The simulator's own accounting: token slots, a shared slot once."""
    return allocator.usage().token_slots


def shared_counted_per_sharer(allocator: pagedsim.PagedAllocator) -> int:
    """Planted bug: every sequence's tokens, so a block shared by k sequences counts k times."""
    return sum(allocator.seq_len(s) for s in allocator.seq_ids())


def tails_subtracted_per_sharer(allocator: pagedsim.PagedAllocator) -> int:
    """Planted bug: blocks in use times block size, minus each sequence's empty tail. A last
    block shared by k sequences has its tail subtracted k times."""
    bs = allocator.block_size
    tails = sum((bs - allocator.seq_len(s) % bs) % bs for s in allocator.seq_ids())
    return allocator.num_used_blocks * bs - tails


def spec_live_slots(allocator: pagedsim.PagedAllocator) -> set[int]:
    return {slot for s in allocator.seq_ids() for slot in allocator.slot_mapping(s)}


def rows_of(kvh: int, d: int, n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, kvh, d, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- 7.1


@pytest.mark.lab7_1
def test_scan_worked_example():
    # 3 blocks of 4 slots, 1 KV head, D = 2: block 0 full, block 2 holds 2 tokens.
    cache = torch.full((3, 4, 1, 2), NAN)
    cache[0] = 1.0
    cache[2, :2] = -3.0
    written, per_block, total = adapters.scan(cache)
    assert per_block == [4, 0, 2]
    assert total == 6
    assert written.tolist() == [[True] * 4, [False] * 4, [True, True, False, False]]


@pytest.mark.lab7_1
def test_scan_zeros_and_partly_written_slots_hold_data():
    # 0.0 is data (that is why the sentinel is NaN, not 0); a slot with one real element is
    # written (say, one KV head's row); a slot with every element NaN is not.
    cache = torch.full((2, 2, 2, 3), NAN)
    cache[0, 0] = 0.0
    cache[1, 1, 1, 2] = 5.0
    written, per_block, total = adapters.scan(cache)
    assert written.tolist() == [[True, False], [False, True]]
    assert (per_block, total) == ([1, 1], 2)


@pytest.mark.lab7_1
@FAST
@given(st.integers(1, 6), st.integers(1, 8), st.integers(1, 3), st.integers(1, 4),
       st.data())
def test_scan_finds_every_written_slot(num_blocks, block_size, kvh, d, data):
    flags = data.draw(st.lists(st.booleans(), min_size=num_blocks * block_size,
                               max_size=num_blocks * block_size))
    mask = torch.tensor(flags).reshape(num_blocks, block_size)
    cache = torch.full((num_blocks, block_size, kvh, d), NAN)
    cache[mask] = torch.randn(int(mask.sum()), kvh, d)
    written, per_block, total = adapters.scan(cache)
    assert torch.equal(written.bool(), mask)
    assert per_block == mask.sum(dim=1).tolist()
    assert total == int(mask.sum())


# --------------------------------------------------------------------------- 7.2


@pytest.mark.lab7_2
def test_live_slots_worked_example():
    # 6 tokens in blocks of 4 take 2 blocks (the second half full); a fork shares both;
    # an append to the fork copies the shared half block (2 tokens) and writes a third.
    alloc = pagedsim.PagedAllocator(num_blocks=6, block_size=4)
    alloc.allocate("p", 6)
    assert len(adapters.live_slots(alloc)) == 6
    alloc.fork("p", "q")
    assert len(adapters.live_slots(alloc)) == 6, "a shared slot counts once"
    alloc.append_slot("q")
    got = adapters.live_slots(alloc)
    assert len(got) == 9
    assert got == sorted(spec_live_slots(alloc))


@pytest.mark.lab7_2
@FAST
@given(st.lists(st.tuples(st.sampled_from(["allocate", "append", "fork", "free"]),
                          st.integers(0, 3), st.integers(0, 3), st.integers(1, 9)),
                max_size=20))
def test_live_slots_match_block_tables_and_accounting(steps):
    alloc = pagedsim.PagedAllocator(num_blocks=12, block_size=4)
    fresh = iter(range(100, 200))
    for kind, i, j, n in steps:
        seqs = sorted(alloc.seq_ids())
        try:
            if kind == "allocate":
                alloc.allocate(next(fresh), n)
            elif kind == "append" and seqs:
                alloc.append_slot(seqs[i % len(seqs)])
            elif kind == "fork" and seqs:
                alloc.fork(seqs[i % len(seqs)], next(fresh))
            elif kind == "free" and seqs:
                alloc.free(seqs[j % len(seqs)])
        except pagedsim.OutOfMemoryError:
            continue
        got = adapters.live_slots(alloc)
        assert got == sorted(spec_live_slots(alloc)), "not each live slot once, sorted"
        assert len(got) == honest(alloc)


# --------------------------------------------------------------------------- 7.3


@pytest.mark.lab7_3
def test_cache_writes_prompt_and_tokens():
    cache = adapters.make_cache(num_blocks=4, block_size=4, num_kv_heads=2, head_dim=3)
    k, v = rows_of(2, 3, 7, 0), rows_of(2, 3, 7, 1)
    cache.allocate("s", k[:5], v[:5])
    cache.append("s", k[5], v[5])
    cache.append("s", k[6], v[6])
    got_k, got_v = cache.read("s")
    assert torch.equal(got_k, k) and torch.equal(got_v, v)
    # 7 tokens in 2 blocks of 4: one slot of the second block and 2 whole blocks are empty.
    assert int(cache.k.isnan().all(dim=(2, 3)).sum()) == 16 - 7
    assert int(cache.v.isnan().all(dim=(2, 3)).sum()) == 16 - 7


@pytest.mark.lab7_3
def test_cache_copy_on_write_keeps_both_sequences():
    cache = adapters.make_cache(num_blocks=6, block_size=4)
    k, v = rows_of(1, 4, 8, 2), rows_of(1, 4, 8, 3)
    cache.allocate("p", k[:6], v[:6])
    cache.fork("p", "q")
    cache.append("q", k[6], v[6])  # the shared half-full block is copied first
    cache.append("p", k[7], v[7])
    q_k, q_v = cache.read("q")
    p_k, p_v = cache.read("p")
    assert torch.equal(q_k, k[:7]) and torch.equal(q_v, v[:7]), "q lost its prefix"
    assert torch.equal(p_k, torch.cat([k[:6], k[7:8]])) and torch.equal(p_v[6], v[7])
    # Measured: 4 shared + 2 + 1 (q's copy of the half block and its token) + 2 + 1 (p).
    assert int((~cache.k.isnan().all(dim=(2, 3))).sum()) == 10


@pytest.mark.lab7_3
def test_cache_released_memory_holds_the_sentinel():
    cache = adapters.make_cache(num_blocks=5, block_size=4)
    k, v = rows_of(1, 4, 9, 4), rows_of(1, 4, 9, 5)
    cache.allocate("p", k[:6], v[:6])
    cache.fork("p", "q")
    cache.append("q", k[6], v[6])
    cache.free("p")  # p's blocks: the first stays (q holds it), the half block is released
    assert int((~cache.k.isnan().all(dim=(2, 3))).sum()) == 7
    cache.free("q")
    assert cache.k.isnan().all() and cache.v.isnan().all(), "freed memory still holds data"
    cache.allocate("r", k[:3], v[:3])  # a reused block: only the new tokens are data
    assert int((~cache.v.isnan().all(dim=(2, 3))).sum()) == 3


class CacheMachine(RuleBasedStateMachine):
    """Random allocate / append / fork / free on your cache, against a model of every
    sequence's K/V rows: reads give the model back, every slot no table names is NaN."""

    seqs = Bundle("seqs")

    def __init__(self) -> None:
        super().__init__()
        self.cache = adapters.make_cache(num_blocks=8, block_size=3, num_kv_heads=1,
                                         head_dim=2)
        self.model: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        self.next_id = 0
        self.gen = torch.Generator().manual_seed(0)

    def _rows(self, n: int) -> list[torch.Tensor]:
        return list(torch.randn(n, 1, 2, generator=self.gen))

    def _fits(self, blocks: int) -> bool:
        return self.cache.allocator.num_free_blocks >= blocks

    @rule(target=seqs, n=st.integers(1, 7))
    def allocate(self, n):
        sid, self.next_id = self.next_id, self.next_id + 1
        if not self._fits(-(-n // 3)):
            return sid  # not admitted; later rules skip ids the model lacks
        k, v = self._rows(n), self._rows(n)
        self.cache.allocate(sid, torch.stack(k), torch.stack(v))
        self.model[sid] = (k, v)
        return sid

    @rule(sid=seqs)
    def append(self, sid):
        if sid not in self.model or not self._fits(1):
            return
        k, v = self._rows(1), self._rows(1)
        self.cache.append(sid, k[0], v[0])
        self.model[sid][0].append(k[0])
        self.model[sid][1].append(v[0])

    @rule(target=seqs, sid=seqs)
    def fork(self, sid):
        child, self.next_id = self.next_id, self.next_id + 1
        if sid in self.model:
            self.cache.fork(sid, child)
            self.model[child] = (list(self.model[sid][0]), list(self.model[sid][1]))
        return child

    @precondition(lambda self: self.model)
    @rule(sid=consumes(seqs))
    def free(self, sid):
        if sid in self.model:
            self.cache.free(sid)
            del self.model[sid]

    @invariant()
    def reads_give_the_model_back(self):
        for sid, (k, v) in self.model.items():
            got_k, got_v = self.cache.read(sid)
            assert torch.equal(got_k, torch.stack(k)), f"sequence {sid}: K differs"
            assert torch.equal(got_v, torch.stack(v)), f"sequence {sid}: V differs"

    @invariant()
    def only_live_slots_hold_data(self):
        live = spec_live_slots(self.cache.allocator)
        for name in ("k", "v"):
            flat = getattr(self.cache, name).reshape(-1, 2)
            empty = flat.isnan().all(dim=1)
            data = {int(i) for i in (~empty).nonzero().flatten()}
            assert data == live, f"{name}: data in {sorted(data - live)}, none in " \
                                 f"{sorted(live - data)}"


@pytest.mark.lab7_3
def test_cache_state_machine():
    run_state_machine_as_test(CacheMachine, settings=MACHINE)


# --------------------------------------------------------------------------- 7.4

FIRST_MISMATCH = ("the first mismatch is the first step where the measurement (the scan) and "
                  "the accounting under test disagree; the block tables agree with the scan "
                  "whenever the cache is right, so they cannot show an accounting bug")


@pytest.mark.lab7_4
def test_compare_honest_accounting_agrees_at_every_step():
    rows, first = adapters.compare(SCRIPT, honest, num_blocks=8, block_size=4)
    assert first is None
    assert [r["step"] for r in rows] == list(range(len(SCRIPT)))
    assert [r["measured"] for r in rows] == SCRIPT_SLOTS
    assert [r["accounted"] for r in rows] == SCRIPT_SLOTS
    assert [r["tables"] for r in rows] == SCRIPT_SLOTS
    assert all(r["stray"] == 0 and r["missing"] == 0 for r in rows)


@pytest.mark.lab7_4
def test_compare_flags_shared_blocks_counted_per_sharer():
    # From the fork at step 3 on, d's 4 shared tokens count twice (17 vs 13); after the fork
    # at step 5, b's 9 count again (27 vs 14); the gap closes only when the sharing ends.
    rows, first = adapters.compare(SCRIPT, shared_counted_per_sharer, num_blocks=8,
                                   block_size=4)
    assert first == 3, f"first mismatch {first}, expected 3: {FIRST_MISMATCH}"
    gaps = [r["accounted"] - r["measured"] for r in rows]
    assert gaps == [0, 0, 0, 4, 4, 13, 12, 4, 4, 4, 0, 0]
    assert all(r["stray"] == 0 and r["missing"] == 0 for r in rows), \
        "the cache agrees with its tables: the bug is in the accounting"


@pytest.mark.lab7_4
def test_compare_flags_a_bug_visible_for_one_step():
    # a2 (1 token, 3 empty slots) is shared by a and b from the fork at step 5 until b's
    # copy-on-write at step 6: its empty tail is subtracted twice, at that step only.
    rows, first = adapters.compare(SCRIPT, tails_subtracted_per_sharer, num_blocks=8,
                                   block_size=4)
    assert first == 5, f"first mismatch {first}, expected 5: {FIRST_MISMATCH}"
    assert [(r["step"], r["measured"], r["accounted"]) for r in rows
            if r["measured"] != r["accounted"]] == [(5, 14, 11)]


@pytest.mark.lab7_4
@FAST
@given(st.lists(st.tuples(st.sampled_from(["allocate", "append", "fork", "free"]),
                          st.integers(0, 3), st.integers(1, 7)), min_size=1, max_size=15),
       st.data())
def test_compare_reports_the_first_step_that_disagrees(steps, data):
    # A random valid script; the accounting under test is honest except from one call on
    # (one call per step, after the step), where it adds one slot.
    script, live, fresh, blocks = [], [], iter(range(100)), 0
    alloc = pagedsim.PagedAllocator(num_blocks=10, block_size=4)
    for kind, i, n in steps:  # built on a bare allocator, so every step is valid
        if kind == "allocate" and alloc.can_allocate(n):
            op = ("allocate", next(fresh), n)
            alloc.allocate(op[1], n)
        elif kind == "append" and live and alloc.can_append(live[i % len(live)]):
            op = ("append", live[i % len(live)])
            alloc.append_slot(op[1])
        elif kind == "fork" and live:
            op = ("fork", live[i % len(live)], next(fresh))
            alloc.fork(op[1], op[2])
        elif kind == "free" and live:
            op = ("free", live[i % len(live)])
            alloc.free(op[1])
        else:
            continue
        script.append(op)
        live = sorted(alloc.seq_ids())
        blocks = max(blocks, alloc.num_used_blocks)
    if not script:
        return
    wrong_from = data.draw(st.integers(0, len(script)), label="wrong_from")  # len: never
    seen: list[int] = []

    def account(allocator):
        seen.append(honest(allocator))
        return seen[-1] + (len(seen) - 1 >= wrong_from)

    rows, first = adapters.compare(script, account, num_blocks=10, block_size=4)
    assert len(seen) == len(script), "account must be called once per step"
    assert [r["measured"] for r in rows] == seen, "measured differs from the tables' count"
    assert first == (wrong_from if wrong_from < len(script) else None)
