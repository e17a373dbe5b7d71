"""Graders of lab 2 (contiguous allocation and the slot accounting).

One marker per task (``lab2_1`` ... ``lab2_5``). The graders reach your code only through
``adapters``. Worked examples are notebook 02's (its arena of 128 slots) and the vLLM
paper's; the state machines are pagedsim's own allocator property tests
(:mod:`pagedsim.testing.allocator_machine`) run on your allocator. Expected numbers were
worked out by hand and checked against pagedsim's ``ContiguousAllocator`` once.
"""

from __future__ import annotations

import os

import adapters
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, run_state_machine_as_test

from pagedsim.memory.accounting import SlotAccount, final_tokens, split_slots
from pagedsim.testing.allocator_machine import AccountingRules, AllocatorMachine

# Derandomized: every grading run tries the same examples, so a score never changes
# between two runs of the same code. A failure is not shrunk to a minimal example unless
# LAB_SHRINK=1 is set (shrinking can take a minute; graders must take seconds).
PHASES = tuple(Phase) if os.environ.get("LAB_SHRINK") == "1" else (Phase.explicit,
                                                                     Phase.generate)
COMMON = {"deadline": None, "derandomize": True, "database": None, "phases": PHASES,
          "suppress_health_check": list(HealthCheck)}
FAST = settings(max_examples=40, **COMMON)
MACHINE = settings(max_examples=20, stateful_step_count=30, **COMMON)

# Notebook 02, section 1: an arena of 128 slots filled by five requests under oracle
# reservation, each run to completion: A [0, 32), B [32, 64), C [64, 80), D [80, 96),
# E [96, 128). Requests are (name, prompt tokens, final length).
ARENA = 128
FILL = [("A", 20, 32), ("B", 8, 32), ("C", 10, 16), ("D", 6, 16), ("E", 20, 32)]
REGIONS = {"A": (0, 32), "B": (32, 32), "C": (64, 16), "D": (80, 16), "E": (96, 32)}


# ============================================================= lab2_1: reservation
@pytest.mark.lab2_1
@pytest.mark.parametrize("num_tokens, final_len, max_model_len, expected", [
    (20, 45, 2048, {"max": 2048, "pow2": 20 + 32, "oracle": 45}),  # the paper's 25 -> 32
    (161, 499, 2048, {"max": 2048, "pow2": 161 + 512, "oracle": 499}),
    (100, 1000, 1024, {"max": 1024, "pow2": 1024, "oracle": 1000}),  # pow2 capped
    (6, 9, 16, {"max": 16, "pow2": 6 + 4, "oracle": 9}),
    (7, 7, 64, {"max": 64, "pow2": 7 + 1, "oracle": 7}),  # no output yet: next_pow2(0) = 1
    (0, 0, 64, {"max": 64, "pow2": 1, "oracle": 1}),  # a region is never empty
])
def test_reservation_examples(num_tokens, final_len, max_model_len, expected):
    got = {p: adapters.reserve_slots(num_tokens, final_len, p, max_model_len)
           for p in ("max", "pow2", "oracle")}
    assert got == expected


@pytest.mark.lab2_1
@FAST
@given(prompt=st.integers(0, 600), output=st.integers(0, 1500),
       max_model_len=st.integers(1, 2048))
def test_reservation_properties(prompt, output, max_model_len):
    final = min(prompt + output, max_model_len)
    prompt = min(prompt, final)
    out = final - prompt
    r = {p: adapters.reserve_slots(prompt, final, p, max_model_len)
         for p in ("max", "pow2", "oracle")}
    assert r["max"] == max_model_len
    assert r["oracle"] == max(final, 1)
    assert r["oracle"] <= r["pow2"] <= r["max"]
    if prompt + 2 * out <= max_model_len and out >= 1:
        extra = r["pow2"] - prompt  # a power of two, at most twice the output
        assert extra & (extra - 1) == 0 and out <= extra < 2 * out


# =============================================================== lab2_2: placement
def _nb02_after_a_and_c(best_fit: bool):
    """Notebook 02's arena after A and C finished: holes of 32 slots at 0, 16 at 64."""
    used = [REGIONS[n] for n in "BDE"]
    return adapters.new_arena(ARENA, best_fit, used)


@pytest.mark.lab2_2
def test_notebook02_first_fit_spends_the_big_hole():
    arena = _nb02_after_a_and_c(best_fit=False)
    assert adapters.arena_holes(arena) == [(0, 32), (64, 16)]
    assert adapters.arena_alloc(arena, 12) == 0  # F (6 + 6 tokens): the first hole
    assert adapters.arena_holes(arena) == [(12, 20), (64, 16)]
    assert adapters.arena_alloc(arena, 24) is None  # G (16 + 8 tokens) must wait
    assert adapters.arena_holes(arena) == [(12, 20), (64, 16)]


@pytest.mark.lab2_2
def test_notebook02_best_fit_keeps_the_big_hole():
    arena = _nb02_after_a_and_c(best_fit=True)
    assert adapters.arena_alloc(arena, 12) == 64  # F: the smallest hole that holds it
    assert adapters.arena_holes(arena) == [(0, 32), (76, 4)]
    assert adapters.arena_alloc(arena, 24) == 0  # G fits
    assert adapters.arena_holes(arena) == [(24, 8), (76, 4)]
    assert adapters.arena_used(arena) == {0: 24, 32: 32, 64: 12, 80: 16, 96: 32}


@pytest.mark.lab2_2
def test_best_fit_ties_and_exact_fits():
    # holes: 8 at 0, 4 at 10, 8 at 16, 4 at 26, 2 at 32 (regions between them)
    used = [(8, 2), (14, 2), (24, 2), (30, 2), (34, 6)]
    best = adapters.new_arena(40, True, used)
    assert adapters.arena_holes(best) == [(0, 8), (10, 4), (16, 8), (26, 4), (32, 2)]
    assert adapters.arena_alloc(best, 4) == 10  # two holes of 4: the lower one, taken whole
    assert adapters.arena_holes(best) == [(0, 8), (16, 8), (26, 4), (32, 2)]
    assert adapters.arena_alloc(best, 5) == 0  # two holes of 8: the lower one
    assert adapters.arena_alloc(best, 3) == 5  # now the 3 left at 5 fit best
    first = adapters.new_arena(40, False, used)
    assert adapters.arena_alloc(first, 2) == 0
    assert adapters.arena_alloc(first, 7) == 16
    assert adapters.arena_alloc(first, 9) is None


def _layouts():
    """A random arena: capacity, and regions separated by holes of random sizes."""
    spans = st.lists(st.tuples(st.integers(0, 12), st.integers(1, 12)), min_size=0,
                     max_size=8)

    @st.composite
    def build(draw):
        used, pos = [], 0
        for gap, size in draw(spans):
            used.append((pos + gap, size))
            pos += gap + size
        tail = draw(st.integers(0 if pos else 1, 12))
        return pos + tail, used

    return build()


def _expected_start(holes, size, best_fit):
    fits = [(n if best_fit else 0, s) for s, n in holes if n >= size]
    return min(fits)[1] if fits else None


@pytest.mark.lab2_2
@FAST
@given(layout=_layouts(), best_fit=st.booleans(), sizes=st.lists(st.integers(1, 14),
                                                                  min_size=1, max_size=6))
def test_placement_follows_the_rule(layout, best_fit, sizes):
    capacity, used = layout
    arena = adapters.new_arena(capacity, best_fit, used)
    for size in sizes:
        holes = adapters.arena_holes(arena)
        want = _expected_start(holes, size, best_fit)
        assert adapters.arena_alloc(arena, size) == want, f"holes {holes}, size {size}"
        if want is not None:  # the region comes off the front of its hole
            hole = dict(holes)[want]
            rest = [h for h in holes if h[0] != want]
            if hole > size:
                rest = sorted(rest + [(want + size, hole - size)])
            assert adapters.arena_holes(arena) == rest
        else:
            assert adapters.arena_holes(arena) == holes


# ============================================================ lab2_3: merging holes
@pytest.mark.lab2_3
def test_notebook02_frees_merge():
    arena = adapters.new_arena(ARENA, False, REGIONS.values())
    assert adapters.arena_holes(arena) == []
    steps = [("A", [(0, 32)]),
             ("C", [(0, 32), (64, 16)]),
             ("B", [(0, 80)]),  # touches both holes: one hole of 80
             ("E", [(0, 80), (96, 32)]),
             ("D", [(0, 128)])]  # touches both again: the whole arena
    for name, holes in steps:
        adapters.arena_free(arena, REGIONS[name][0])
        assert adapters.arena_holes(arena) == holes, f"after freeing {name}"
    assert adapters.arena_used(arena) == {}


@pytest.mark.lab2_3
def test_merge_with_the_right_neighbour_only():
    arena = adapters.new_arena(30, False, [(0, 10), (10, 10)])  # hole (20, 10)
    adapters.arena_free(arena, 10)
    assert adapters.arena_holes(arena) == [(10, 20)]
    with pytest.raises(ValueError):
        adapters.arena_free(arena, 10)  # freed already
    assert adapters.arena_holes(arena) == [(10, 20)]
    assert adapters.arena_used(arena) == {0: 10}


def _free_runs(capacity, used):
    """Maximal runs of free slots, as ``(start, size)``."""
    taken = [False] * capacity
    for s, n in used:
        taken[s:s + n] = [True] * n
    runs, start = [], None
    for i, t in enumerate([*taken, True]):
        if not t and start is None:
            start = i
        elif t and start is not None:
            runs.append((start, i - start))
            start = None
    return runs


@pytest.mark.lab2_3
@FAST
@given(layout=_layouts(), data=st.data())
def test_holes_are_the_maximal_free_runs(layout, data):
    capacity, used = layout
    used = [(s, n) for s, n in used]
    arena = adapters.new_arena(capacity, False, used)
    order = data.draw(st.permutations(used))
    for region in order:
        adapters.arena_free(arena, region[0])
        used.remove(region)
        assert adapters.arena_holes(arena) == _free_runs(capacity, used)
        assert adapters.arena_used(arena) == dict(used)
    assert adapters.arena_holes(arena) == [(0, capacity)]


# ====================================================== lab2_4: one region per sequence
@pytest.mark.lab2_4
@pytest.mark.parametrize("placement, f_start", [("first-fit", 0), ("best-fit", 64)])
def test_notebook02_requests(placement, f_start):
    alloc = adapters.LabContiguous(ARENA, "oracle", placement, max_model_len=ARENA)
    for name, prompt, final in FILL:
        alloc.allocate(name, prompt, final)
        assert alloc.slot_mapping(name) == list(range(REGIONS[name][0],
                                                      REGIONS[name][0] + prompt))
        for i in range(prompt, final):  # the request runs to completion
            assert alloc.append_slot(name) == (REGIONS[name][0] + i, None)
    with pytest.raises(adapters.OutOfMemoryError):
        alloc.append_slot("C")  # C filled its 16 slots: a region cannot grow
    for name in "AC":
        alloc.free(name)
    assert alloc.holes() == [(0, 32), (64, 16)]
    alloc.allocate("F", 6, 12)
    assert alloc.regions()["F"] == (f_start, 12, 6, 12)
    if placement == "first-fit":
        before = alloc.snapshot()
        with pytest.raises(adapters.OutOfMemoryError):
            alloc.allocate("G", 16, 24)
        assert alloc.snapshot() == before  # a failed allocation changes nothing
    else:
        alloc.allocate("G", 16, 24)
        assert alloc.regions()["G"] == (0, 24, 16, 24)


@pytest.mark.lab2_4
def test_max_reservation_and_errors():
    alloc = adapters.LabContiguous(64, "max", "first-fit", max_model_len=32)
    alloc.allocate("a", 5, 9)
    alloc.allocate("b", 3, 12)
    assert alloc.regions() == {"a": (0, 32, 5, 9), "b": (32, 32, 3, 12)}
    with pytest.raises(adapters.OutOfMemoryError):
        alloc.allocate("c", 1, 2)
    with pytest.raises(ValueError):
        alloc.allocate("a", 1, 2)  # a duplicate id
    slots = [alloc.append_slot("a")[0] for _ in range(27)]
    assert slots == list(range(5, 32))  # past its final length 9: max reserved that room
    with pytest.raises(adapters.OutOfMemoryError):
        alloc.append_slot("a")
    with pytest.raises(ValueError):
        alloc.append_slot("zzz")
    alloc.free("a")
    with pytest.raises(ValueError):
        alloc.free("a")  # freed twice
    assert alloc.holes() == [(0, 32)]
    alloc.free("b")
    assert alloc.holes() == [(0, 64)] and alloc.regions() == {}


class ContiguousMachine(AllocatorMachine):
    """pagedsim's allocator state machine (core rules) on your allocator; pool, reservation
    and placement are drawn."""

    def make(self, data):
        capacity = data.draw(st.integers(8, 300), label="capacity")
        reservation = data.draw(st.sampled_from(["max", "pow2", "oracle"]), label="reservation")
        placement = data.draw(st.sampled_from(["first-fit", "best-fit"]), label="placement")
        return adapters.LabContiguous(capacity, reservation, placement, self.max_len)


@pytest.mark.lab2_4
def test_allocator_state_machine():
    run_state_machine_as_test(ContiguousMachine, settings=MACHINE)


# ================================================================= lab2_5: accounting
@pytest.mark.lab2_5
def test_notebook02_external_fragmentation():
    # After A and C finished: B, D, E ran to completion; a request needing 40 slots waits.
    regions = [(32, 32, 32, 32), (80, 16, 16, 16), (96, 32, 32, 32)]
    holes = [(0, 32), (64, 16)]
    assert adapters.account(ARENA, regions, holes, 40) == {
        "token": 80, "reserved": 0, "internal_frag": 0, "external_frag": 48, "free": 0}
    assert adapters.account(ARENA, regions, holes, None) == {
        "token": 80, "reserved": 0, "internal_frag": 0, "external_frag": 0, "free": 48}
    assert adapters.account(ARENA, regions, holes, 32)["external_frag"] == 16  # 32 fits 32


@pytest.mark.lab2_5
def test_reserved_and_internal_fragmentation():
    regions = [(0, 64, 10, 40),  # max-style region: 10 tokens, 30 to come, 24 never used
               (64, 16, 12, 8)]  # ran past its final length: nothing reserved any more
    holes = [(80, 48)]
    assert adapters.account(128, regions, holes, 50) == {
        "token": 22, "reserved": 30, "internal_frag": 28, "external_frag": 48, "free": 0}
    assert adapters.account(128, [(0, 16, 4, 40)], [(16, 112)], 48) == {
        "token": 4, "reserved": 12, "internal_frag": 0, "external_frag": 0, "free": 112}


@pytest.mark.lab2_5
def test_reserved_stops_at_the_region_end():
    # A 16-slot region whose owner's final length is 40: only the region's 12 empty slots
    # can be reserved.
    concept = ("reserved slots run up to the final length but never past the region's end: "
               "a region of 16 slots holding 4 tokens has 12 reserved even when its final "
               "length is 40")
    try:
        got = adapters.account(128, [(0, 16, 4, 40)], [(16, 112)], None)
    except AssertionError as err:  # your account's own check of the five parts
        raise AssertionError(f"{err}: {concept}") from None
    assert got["reserved"] == 12, f"reserved {got['reserved']}, expected 12: {concept}"


def _expected(regions, holes, need, capacity):
    """The five parts by pagedsim's accounting rules (pagedsim.memory.accounting)."""
    token = reserved = internal = 0
    for _, size, n, final in regions:
        t, r, i = split_slots(n, final_tokens(n, final), size)
        token, reserved, internal = token + t, reserved + r, internal + i
    external = sum(n for _, n in holes if need and n < need)
    return {"token": token, "reserved": reserved, "internal_frag": internal,
            "external_frag": external, "free": capacity - token - reserved - internal - external}


class AccountingMachine(AccountingRules, ContiguousMachine):
    """The state machine, with your account() checked at every step: it partitions the
    pool, and each part is what pagedsim's accounting rules say."""

    def account_of(self, need):
        n = len(self.alloc.regions())
        return SlotAccount(**self.alloc.account(need), capacity=self.alloc.capacity_slots,
                           physical_blocks=n, logical_blocks=n)

    @invariant()
    def account_is_exact(self):
        regions, holes = self.alloc.regions().values(), self.alloc.holes()
        for need in (None, 1, 17, 64):
            assert self.alloc.account(need) == _expected(regions, holes, need,
                                                         self.alloc.capacity_slots)


@pytest.mark.lab2_5
def test_account_state_machine():
    run_state_machine_as_test(AccountingMachine, settings=MACHINE)
