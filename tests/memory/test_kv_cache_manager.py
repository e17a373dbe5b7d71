"""The scheduler's seam: ``KVCacheManager``'s eleven calls, and a scheduler that uses no other.

The stateful machine (``tests/memory/test_allocator_state.py``, rules in
:mod:`pagedsim.testing.manager_rules`) drives every registered scheme through the manager;
these tests pin the calls' contracts and keep the scheduler on the seam.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pagedsim import ModelSpec
from pagedsim.memory.kv_cache_manager import KVCacheManager
from pagedsim.memory.schemes import SCHEMES, make_allocator
from pagedsim.workloads.workload import Request

ROOT = Path(__file__).resolve().parents[2]
#: What the manager offers the scheduler: eleven calls and two facts.
MANAGER_MEMBERS = {"hashes_of", "get_computed_tokens", "allocate_slots", "fork", "free",
                   "swap_out", "swap_in", "num_seqs", "facts", "host_transfers", "decode_steps",
                   "max_model_len", "freed_while_running_blocks"}


def _members_used(path: Path, names: set[str]) -> tuple[set[str], set[str]]:
    """Attributes read on ``self.kv`` / ``sched.kv`` / ``kv`` and on an allocator
    (``self.allocator``, ``sched.allocator``, ``allocator``, ``alloc``) in a module."""
    on_kv, on_alloc = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in names:
            on_kv.add(node.attr)
        elif isinstance(base, ast.Name) and base.id in ("allocator", "alloc"):
            on_alloc.add(node.attr)
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) \
                and base.value.id in ("self", "sched"):
            if base.attr == "kv":
                on_kv.add(node.attr)
            elif base.attr == "allocator":
                on_alloc.add(node.attr)
    return on_kv, on_alloc


def test_the_scheduler_asks_memory_only_through_the_manager():
    engine = ROOT / "pagedsim" / "engine"
    used: set[str] = set()
    for name in ("scheduler.py", "waiting_queue.py", "steady.py"):
        on_kv, on_alloc = _members_used(engine / name, {"kv"})
        assert not on_alloc, f"{name} calls the allocator directly: {sorted(on_alloc)}"
        used |= on_kv
    assert used <= MANAGER_MEMBERS, sorted(used - MANAGER_MEMBERS)
    assert len(used) >= 9  # the seam is really used, not bypassed some other way


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_refused_grant_changes_nothing_and_chunks_go_to_one_sequence(scheme):
    # A model whose K (or V) row in one layer is 2 * 8192 bytes: a 2 MiB vAttention page
    # holds 128 tokens.
    model = ModelSpec("rows", num_layers=1, num_heads=1, num_kv_heads=1, head_dim=8192,
                      dtype_bytes=2, weights_bytes=0, max_model_len=512)
    alloc = make_allocator(scheme, 1024, 16, 512, model=model)
    kv = KVCacheManager(alloc)
    before = alloc.snapshot()
    assert kv.allocate_slots([7, 8, 9], 500, final_len=500) is None  # more than the pool
    assert alloc.snapshot() == before
    grant = kv.allocate_slots([1], 20, final_len=40)
    assert grant is not None and grant.computed_tokens == [0]
    assert kv.allocate_slots([2], 20, final_len=40) is not None
    with pytest.raises(ValueError, match="one sequence"):
        kv.allocate_slots([1, 2], 3)
    decode = kv.allocate_slots([1, 2], 1)
    assert decode is not None
    assert decode.slots == [alloc.slot_mapping(1)[-1], alloc.slot_mapping(2)[-1]]
    assert kv.num_seqs == 2
    facts = kv.facts(20, 40)
    assert facts.capacity_slots == alloc.capacity_slots
    assert facts.used_slots == alloc.capacity_slots - alloc.num_free_slots > 0
    assert facts.slots_per_seq == alloc.slots_needed(20, 40)
    assert kv.free([1, 99], only_held=True) == [1]  # 99 owns nothing: skipped, and said so
    with pytest.raises(ValueError):
        kv.free([99])  # a plain free of an unknown id is an error
    assert kv.swap_out([2], cpu_free_slots=0) is None and 2 in alloc


def test_computed_tokens_come_from_the_prefix_cache():
    alloc = make_allocator("prefix-cache", 256, 16, 128)
    kv = KVCacheManager(alloc)
    req = Request(1, 0.0, 48, 8, prompt_pieces=(7, 8, 9), prompt_piece_tokens=16)
    hashes = kv.hashes_of(req)
    assert hashes is not None and hashes.block_size == 16
    assert kv.allocate_slots([1], 48, hashes=hashes, final_len=55) is not None
    kv.free([1])
    again = kv.hashes_of(Request(2, 0.0, 48, 8, prompt_pieces=(7, 8, 9),
                                 prompt_piece_tokens=16))
    assert kv.get_computed_tokens(again, 2, 48) == 32  # the last token is always computed
    grant = kv.allocate_slots([2], 48, hashes=again, final_len=55)
    assert grant is not None and grant.computed_tokens == [32]
    assert kv.get_computed_tokens(None, 3, 48) == 0  # no hashes: nothing is cached


def test_schemes_without_a_prefix_cache_hash_nothing():
    for scheme in ("paged", "contiguous-max"):
        kv = KVCacheManager(make_allocator(scheme, 1024, 16, 512))
        assert kv.hashes_of(Request(1, 0.0, 48, 8)) is None


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("shared", [False, True])
def test_as_many_as_fit_is_asking_one_by_one_until_a_refusal(scheme, shared):
    """A step's lone decodes in one call serve the longest prefix that fits, leaving
    memory as one-by-one grants would, up to the first refusal."""
    model = ModelSpec("rows", num_layers=1, num_heads=1, num_kv_heads=1, head_dim=8192,
                      dtype_bytes=2, weights_bytes=0, max_model_len=512)

    def setup():
        alloc = make_allocator(scheme, 4096, 16, 512, model=model)
        kv = KVCacheManager(alloc)
        seqs = []
        for seq_id, length in enumerate((32, 20, 48, 31, 16, 40), start=1):
            if kv.allocate_slots([seq_id], length, final_len=length + 64) is None:
                break
            seqs.append(seq_id)
        if shared and seqs and kv.allocate_slots([seqs[0]], 1) is not None:
            kv.fork(seqs[0], 100)  # a shared last block: its copy takes a block
            seqs.insert(1, 100)
        return alloc, kv, seqs

    alloc, kv, seqs = setup()
    assert len(seqs) >= 2
    one_alloc, one_kv, _ = setup()
    served: list[int] = []
    while len(served) < 2500 and sum(n < len(seqs) for n in served) < 3:  # dry, and past it
        grant = kv.allocate_slots(seqs, 1, as_many_as_fit=True)
        assert grant is not None and len(grant.slots) <= len(seqs)
        alone = []
        for seq_id in seqs:
            g = one_kv.allocate_slots([seq_id], 1)
            if g is None:
                break
            alone.append(g.slots[0])
        assert grant.slots == alone  # the same prefix, the same slots
        assert alloc.snapshot() == one_alloc.snapshot()
        served.append(len(alone))
    assert served[0] == len(seqs) and min(served) < len(seqs)  # it did run dry
    with pytest.raises(ValueError, match="duplicate"):
        kv.allocate_slots([seqs[0], seqs[0]], 1, as_many_as_fit=True)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_bad_ids_and_sizes_are_refused_before_anything_changes(scheme):
    """free checks every id before it frees one (a list with an unknown or a repeated id
    once freed the ids before it); a bad CPU room, step count or batch is one error."""
    kv = KVCacheManager(make_allocator(scheme, 64 * 16, 16, 512, model="opt-13b"))
    alloc = kv.allocator
    for s in (1, 2):
        assert kv.allocate_slots([s], 20, final_len=40) is not None
    before = alloc.snapshot()
    for ids, why in (([1, 99], "unknown sequence ids"), ([1, 1], "duplicate"),
                     ([1, [2]], "hashable")):
        with pytest.raises(ValueError, match=why):
            kv.free(ids)
        assert alloc.snapshot() == before
    with pytest.raises(TypeError, match="cpu_free_slots"):
        kv.swap_out([1], "1024")
    with pytest.raises(ValueError, match="hashable"):
        kv.allocate_slots([[1]], 1, as_many_as_fit=True)
    if kv.decode_steps([1], 0) is not None:  # the schemes that run steps in one call
        with pytest.raises(ValueError, match="max_steps"):
            kv.decode_steps([1], -1)
    assert alloc.snapshot() == before
    assert kv.free([2, 1]) == [2, 1] and alloc.num_seqs == 0


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_batch_of_appends_with_a_bad_id_changes_nothing(scheme):
    """Every id of a step's appends is checked before any append, in both modes: an
    unknown id, or a swapped-out one, is refused and no other sequence grew."""
    alloc = make_allocator(scheme, 2048, 16, 512,
                           model=ModelSpec("rows", num_layers=1, num_heads=1,
                                           num_kv_heads=1, head_dim=8192, dtype_bytes=2,
                                           weights_bytes=0, max_model_len=512))
    kv = KVCacheManager(alloc)
    for sid in (1, 2):
        assert kv.allocate_slots([sid], 20, final_len=40) is not None
    group = kv.swap_out([2], 10**6)
    assert group is not None
    before = alloc.snapshot()
    for bad in ([1, 999], [1, 2]):
        for fit in (False, True):
            with pytest.raises(ValueError):
                kv.allocate_slots(bad, 1, as_many_as_fit=fit)
            assert alloc.snapshot() == before, (bad, fit)
