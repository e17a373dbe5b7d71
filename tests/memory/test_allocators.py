"""Allocator bad input: one clear error naming the value; and a few worked examples."""

from __future__ import annotations

import copy

import pytest

from pagedsim import ContiguousAllocator, KVCopy, OutOfMemoryError, PagedAllocator, account
from pagedsim.memory.schemes import SCHEMES, make_allocator


@pytest.mark.parametrize("block_size", [0, -1])
def test_paged_block_size_must_be_positive(block_size):
    with pytest.raises(ValueError, match=f"block_size must be >= 1, got {block_size}"):
        PagedAllocator(4, block_size)


@pytest.mark.parametrize("block_size", [1.5, "16", True, None])
def test_paged_block_size_must_be_an_int(block_size):
    with pytest.raises(TypeError, match="block_size must be an integer"):
        PagedAllocator(4, block_size)


def test_sequence_id_errors_name_the_id():
    a = PagedAllocator(4, 4)
    a.allocate("s", 3)
    with pytest.raises(ValueError, match="'s' already exists"):
        a.allocate("s", 1)
    with pytest.raises(ValueError, match="unknown sequence id 'x'"):
        a.append_slot("x")
    with pytest.raises(ValueError, match="unknown sequence id 'p'"):
        a.fork("p", "c")
    with pytest.raises(ValueError, match="num_tokens must be >= 0, got -2"):
        a.allocate("t", -2)
    a.free("s")
    with pytest.raises(ValueError, match="already freed"):
        a.free("s")


def test_contiguous_options_are_checked():
    with pytest.raises(ValueError, match="unknown reservation 'big'; valid: max, pow2, oracle"):
        ContiguousAllocator(64, reservation="big")
    with pytest.raises(ValueError, match="unknown placement 'worst-fit'"):
        ContiguousAllocator(64, placement="worst-fit")
    a = ContiguousAllocator(64, reservation="oracle", max_model_len=32)
    with pytest.raises(ValueError, match="needs the request's final_len"):
        a.allocate(0, 4)
    with pytest.raises(ValueError, match="final_len \\(40\\) exceeds max_model_len \\(32\\)"):
        a.allocate(0, 4, 40)


def test_paged_worked_example():
    """6-token prompt, blocks of 4: slots 0..5; fork; the child's append copies block 1."""
    a = PagedAllocator(4, 4)
    a.allocate("p", 6, final_len=8)
    assert a.block_table("p") == [0, 1] and a.slot_mapping("p") == [0, 1, 2, 3, 4, 5]
    a.fork("p", "c")
    slot, copy = a.append_slot("c")
    assert copy == KVCopy(src_slot=4, dst_slot=8, num_slots=2) and slot == 10
    assert copy.block_pairs(4) == [(1, 2)]
    slot, copy = a.append_slot("p")  # block 1 is private again: written in place
    assert (slot, copy) == (6, None)
    acct = account(a)
    assert (acct.token, acct.physical_blocks, acct.logical_blocks) == (10, 3, 4)  # block 0 once
    assert acct.sharing_saving == pytest.approx(0.25)


def test_contiguous_external_fragmentation_example():
    """Two 16-slot holes cannot take a 24-slot region: 32 free slots, all stranded."""
    a = ContiguousAllocator(64, reservation="oracle", placement="first-fit", max_model_len=64)
    for s, n in enumerate([16, 16, 16, 16]):
        a.allocate(s, n, n)
    a.free(0)
    a.free(2)
    need = a.slots_needed(8, 24)
    assert need == 24 and not a.can_allocate(8, 24)
    with pytest.raises(OutOfMemoryError, match="largest hole is 16"):
        a.allocate(9, 8, 24)
    acct = account(a, need)
    assert (acct.external_frag, acct.free, acct.token) == (32, 0, 32)


def test_buddy_rounds_to_powers_of_two():
    a = ContiguousAllocator(100, reservation="oracle", placement="buddy", max_model_len=64)
    a.allocate("a", 5, 9)  # 9 slots -> a 16-slot buddy block
    assert a.region("a")[1] == 16
    acct = account(a)
    assert (acct.token, acct.reserved, acct.internal_frag) == (5, 4, 7)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_deep_copy_is_independent_of_its_original(scheme):
    """The state machines check a "no" on a deep copy: mutating the copy must leave the
    original exactly as it was (a pool that kept a bound method of its own free list
    once handed the copy's blocks out of the original's)."""
    a = make_allocator(scheme, 64 * 16, block_size=16, max_model_len=512, model="opt-13b")
    a.allocate_group([1], 20, 40)
    before = a.snapshot()
    b = copy.deepcopy(a)
    for _ in range(20):  # up to its final length: a contiguous region cannot grow past it
        b.append_slot(1)
    b.allocate_group([2], 30, 40)
    assert a.snapshot() == before
    a.check_invariants()


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_an_unhashable_or_taken_id_is_refused_and_changes_nothing(scheme):
    """One clear ValueError naming the id, before any block moves, for every scheme (a
    bare TypeError from a dict lookup once escaped a contiguous fork and every
    swap-out)."""
    a = make_allocator(scheme, 64 * 16, block_size=16, max_model_len=512, model="opt-13b")
    a.allocate(1, 20, 40)
    before = a.snapshot()
    with pytest.raises(ValueError, match=r"sequence id 1 already exists"):
        a.allocate(1, 5, 40)
    with pytest.raises(ValueError, match="hashable"):
        a.allocate(["not", "hashable"], 5, 40)
    with pytest.raises(ValueError, match=r"sequence id 1 already exists"):
        a.fork(1, 1)
    with pytest.raises(ValueError, match="hashable"):
        a.fork(1, ["not", "hashable"])
    with pytest.raises(ValueError, match="hashable"):
        a.swap_out([1, ["not", "hashable"]])
    with pytest.raises(ValueError, match="duplicate sequence ids"):
        a.swap_out([1, 1])
    assert ["not", "hashable"] not in a
    assert a.snapshot() == before
    a.check_invariants()


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_bad_watermark_is_refused_by_name_and_changes_nothing(scheme):
    """Every scheme checks the watermark, even those it does not apply to (contiguous):
    a string, None, a bool, NaN or a fraction outside [0, 1) is one error naming it."""
    a = make_allocator(scheme, 64 * 16, block_size=16, max_model_len=512, model="opt-13b")
    a.allocate(1, 20, 40)
    before = a.snapshot()
    for bad in ("0.1", None, True, float("nan"), -0.1, 1, 1.5):
        with pytest.raises((TypeError, ValueError), match="watermark"):
            a.allocate_group([2], 5, 40, watermark=bad)
    assert a.snapshot() == before
    assert a.allocate_group([2], 5, 40, watermark=0)  # an int 0 is a fraction too
