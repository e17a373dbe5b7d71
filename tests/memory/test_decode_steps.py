"""``KVCacheManager.decode_steps``: several decode steps of the same sequences in one call
must leave memory, step after step, exactly as asking ``allocate_slots(seqs, 1)`` once a
step does, with the same usage after each step; where a scheme cannot, it says None and
changes nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim import ModelSpec
from pagedsim.memory.kv_cache_manager import KVCacheManager
from pagedsim.memory.schemes import SCHEMES, make_allocator

MODEL = ModelSpec("rows", num_layers=1, num_heads=1, num_kv_heads=1, head_dim=8192,
                  dtype_bytes=2, weights_bytes=0, max_model_len=512)

#: (prompt tokens, tokens of output still to come, or None: no final length told)
_SEQS = st.lists(st.tuples(st.integers(1, 70), st.one_of(st.none(), st.integers(0, 90))),
                 min_size=1, max_size=7)


def _setup(scheme: str, num_blocks: int, block_size: int, seqs, fork: bool):
    alloc = make_allocator(scheme, num_blocks * block_size, block_size, 512, model=MODEL)
    kv = KVCacheManager(alloc)
    ids = []
    for seq_id, (prompt, more) in enumerate(seqs, start=1):
        final = None if more is None else prompt + more
        if not alloc.allocate_group([seq_id], prompt, final):  # final None: untold
            break
        ids.append(seq_id)
    if fork and ids:
        kv.fork(ids[0], 100)  # a shared block: the run must refuse
        ids.append(100)
    return alloc, kv, ids


def _usage_now(alloc) -> tuple[int, ...]:
    u = alloc.usage()
    return (u.token_slots, u.reserved_slots, u.internal_frag_slots, u.physical_blocks,
            u.logical_blocks, u.cached_slots, alloc.num_free_slots)


def _runs_steps(scheme: str) -> bool:
    return KVCacheManager(make_allocator(scheme, 4096, 16, 512, model=MODEL)
                          ).decode_steps([], 1) is not None


#: The schemes that run several steps in one call (the others answer None).
STEP_SCHEMES = sorted(s for s in SCHEMES if _runs_steps(s))


@pytest.mark.parametrize("scheme", STEP_SCHEMES)
@given(seqs=_SEQS, num_blocks=st.integers(8, 60), block_size=st.sampled_from([1, 2, 16]),
       max_steps=st.integers(0, 80), fork=st.booleans())
def test_decode_steps_are_the_steps_one_by_one(scheme, seqs, num_blocks, block_size,
                                               max_steps, fork):
    alloc, kv, ids = _setup(scheme, num_blocks, block_size, seqs, fork)
    if not ids:
        return
    before = alloc.snapshot()
    rows = kv.decode_steps(ids, max_steps)
    ref_alloc, ref_kv, _ = _setup(scheme, num_blocks, block_size, seqs, fork)
    if rows is None:  # the scheme cannot: nothing changed
        assert alloc.snapshot() == before
        return
    expected = []
    for _ in range(max_steps):
        if any(ref_alloc.seq_len(s) >= f for s, f in _finals(ref_alloc, ids)):
            break  # never past a final length
        if ref_kv.allocate_slots(ids, 1) is None:
            break
        expected.append(_usage_now(ref_alloc))
    assert [tuple(r) for r in rows] == expected
    assert alloc.snapshot() == ref_alloc.snapshot()
    # The fast path's own fields agree too: the next appends land in the same slots.
    for _ in range(block_size + 1):
        a, b = kv.allocate_slots(ids, 1), ref_kv.allocate_slots(ids, 1)
        assert (a is None) == (b is None)
        if a is None:
            break
        assert list(a.slots) == list(b.slots)


def _finals(alloc, ids):
    snap = alloc.snapshot()["seqs"]
    return [(s, snap[s]["final_len"]) for s in ids if snap[s]["final_len"] is not None]


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_scheme_that_cannot_says_none_and_changes_nothing(scheme):
    alloc, kv, ids = _setup(scheme, 256, 16, [(20, 20), (33, 40), (16, 30)], fork=False)
    assert len(ids) == 3
    before = alloc.snapshot()
    rows = kv.decode_steps(ids, 5)
    assert (rows is None) == (scheme not in STEP_SCHEMES)
    if rows is None:
        assert alloc.snapshot() == before
    else:
        assert len(rows) == 5


def test_the_plain_paged_pool_runs_steps_and_the_caching_ones_do_not():
    assert "paged" in STEP_SCHEMES
    assert not {"prefix-cache", "radix", "vattention"} & set(STEP_SCHEMES)
    kv = KVCacheManager(make_allocator("paged", 64, 16, 512))
    assert kv.allocate_slots([1], 20, final_len=40) is not None
    with pytest.raises(ValueError, match="duplicate"):
        kv.decode_steps([1, 1], 3)
    with pytest.raises(ValueError, match="unknown"):
        kv.decode_steps([1, 2], 3)
    assert len(kv.decode_steps([1], 100)) == 20  # up to its final length
