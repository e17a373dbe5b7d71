"""vAttention's allocator: worked examples (the stateful machine covers it too)."""

from __future__ import annotations

import pytest

import pagedsim
from pagedsim import OutOfMemoryError, account
from pagedsim.experiments import Experiment, compare
from pagedsim.memory.schemes import SCHEMES, make_allocator
from pagedsim.memory.vattention import (
    PAGE_BYTES_OPTIONS,
    VAttentionAllocator,
    page_tokens_for,
)


def test_tokens_per_page_llama3_8b():
    llama = pagedsim.get_model("llama-3-8b")  # 8 kv heads x 128 x 2 B = 2 KiB per row
    assert page_tokens_for(llama, PAGE_BYTES_OPTIONS[""]) == 1024
    assert page_tokens_for(llama, PAGE_BYTES_OPTIONS["-64k"]) == 32
    alloc = make_allocator("vattention", 10 * 1024 + 5, model=llama)
    assert (alloc.block_size, alloc.num_blocks, alloc.capacity_slots) == (1024, 10, 10 * 1024)


def test_registry_entries_and_missing_model():
    for name in ("vattention", "vattention-64k"):
        assert SCHEMES[name].view == "blocks" and SCHEMES[name].family == "vattention"
    with pytest.raises(ValueError, match="needs the model"):
        make_allocator("vattention", 4096)


def test_last_page_tail_is_internal_fragmentation():
    a = VAttentionAllocator(num_pages=6, page_tokens=4, max_model_len=64, max_regions=4)
    a.allocate("A", 5, final_len=6)  # 2 pages: 5 tokens, 1 reserved, 2 never filled
    acct = account(a)
    assert (acct.token, acct.reserved, acct.internal_frag, acct.external_frag,
            acct.free) == (5, 1, 2, 0, 16)


def test_regions_cap_concurrency_and_failure_changes_nothing():
    a = VAttentionAllocator(num_pages=20, page_tokens=4, max_model_len=16, max_regions=2)
    a.allocate("A", 3)
    a.allocate("B", 3)
    before = a.snapshot()
    with pytest.raises(OutOfMemoryError, match="virtual regions"):
        a.allocate("C", 1)
    assert not a.allocate_group(["C"], 1)
    assert a.snapshot() == before
    with pytest.raises(ValueError, match="max_model_len"):
        a.allocate("D", 17)


def test_fork_copies_pages_into_room_held_from_admission():
    a = VAttentionAllocator(num_pages=6, page_tokens=4, max_model_len=32, max_regions=4)
    assert a.allocate_group(["P"], 6, final_len=9, fork_ids=["C1"])
    held = account(a)
    # P will fill the 2 empty slots of its 2 pages; C1 will fill all 8 of its held ones.
    assert held.token == 6 and held.reserved == 2 + 8 and held.internal_frag == 0
    assert a.num_free_blocks == 2 and "C1" in a
    # Nothing else may take the held pages: a 3-page request does not fit now.
    assert not a.allocate_group(["X"], 9)
    copies = a.fork("P", "C1")
    assert [c.num_slots for c in copies] == [4, 2]  # page by page, the last one partly
    assert sorted(a.slot_mapping("C1")) != sorted(a.slot_mapping("P"))  # nothing shared
    assert a.num_free_blocks == 2
    a.check_invariants()


def test_free_of_a_sample_never_forked_returns_its_pages():
    a = VAttentionAllocator(num_pages=4, page_tokens=4, max_model_len=16, max_regions=4)
    released = []
    a.on_release = lambda start, n: released.append((start, n))
    assert a.allocate_group(["P"], 4, fork_ids=["C"])
    a.free("C")
    assert a.num_free_blocks == 3 and len(released) == 1 and "C" not in a


def test_compare_paged_vs_vattention():
    exp = Experiment(num_requests=150, rate_per_s=20.0)
    cmp = compare(exp, ("paged", "vattention"), jobs=1, progress=False)
    rows = {r["scheme"]: r for r in cmp.summary.to_dict("records")}
    shares = [f"all_{c}" for c in pagedsim.CATEGORIES]
    for r in rows.values():
        assert sum(r[c] for c in shares) == pytest.approx(1.0)
    assert rows["vattention"]["all_internal_frag"] > rows["paged"]["all_internal_frag"]
