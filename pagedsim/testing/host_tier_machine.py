"""A hypothesis state machine for a prefix cache with a host tier, driven as the scheduler
drives it: step by step, through :class:`~pagedsim.memory.kv_cache_manager.KVCacheManager`.

Each step frees some sequences, decodes some, and admits requests whose prompts share
prefixes (pieces drawn from a small alphabet), then carries out the step's copies in the
executor's order (:mod:`pagedsim.engine.plan`): the host tier's loads and write-backs in
list order, the model's writes, then the write-throughs. Beside the allocator the machine
keeps what real memory would hold: a value per GPU slot and per host block, changed only
by those copies and writes. A token's value names its content: ``(h, offset)`` for a
token of a full block whose chained hash is ``h`` in its request's whole sequence, so two
requests that share a block write the same values there.

What it checks after every step:

* every running sequence reads its own values in every slot, the cached prefix included:
  no hit, from either tier, served K/V that was overwritten or lost;
* every host entry holds the values its hash names (a write-back or a load never read a
  block after it was reused), and the tier holds at most its capacity;
* an admission's hits add up: the tokens ``get_computed_tokens`` promised are the ones the
  grant served, those loaded from the host are exactly the blocks the step's loads filled
  (the blocks after the GPU hits), and the rest came from the GPU;
* a refused admission and a lookup change nothing, and the allocator's own invariants
  hold (:meth:`check_invariants`, which checks the host tier too).

``tests/memory/test_host_tier_state.py`` runs it over every registered scheme that has a prefix
cache. This module imports hypothesis (a ``dev`` dependency).
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ..memory.kv_cache_manager import KVCacheManager
from ..memory.schemes import make_allocator
from ..workloads.block_hashes import BlockHashes
from ..workloads.workload import Request

__all__ = ["HostTierMachine"]


class HostTierMachine(RuleBasedStateMachine):
    """Steps of frees, decodes and admissions over ``scheme`` with a host tier."""

    scheme = "prefix-cache"  # set per scheme by the test module
    max_len = 48  # longest sequence, tokens

    @initialize(data=st.data())
    def setup(self, data):
        self.bs = bs = data.draw(st.sampled_from([1, 2, 4]), label="block_size")
        num_blocks = data.draw(st.integers(3, 24), label="gpu_blocks")
        self.host_blocks = data.draw(st.integers(1, 16), label="host_blocks")
        write_through = data.draw(st.booleans(), label="write_through")
        self.alloc = make_allocator(self.scheme, num_blocks * bs, bs, self.max_len,
                                    host_cache_blocks=self.host_blocks,
                                    host_write_through=write_through)
        self.kv = KVCacheManager(self.alloc)
        self.piece_tokens = bs * data.draw(st.sampled_from([1, 2, 3]), label="piece_blocks")
        self.live: dict[int, tuple[Request, BlockHashes]] = {}  # seq id -> its request
        self.gpu: dict[int, object] = {}  # GPU slot -> the value it holds
        self.host: dict[int, list[object]] = {}  # host block -> its slots' values
        self.next_id = 0

    # ------------------------------------------------------------- helpers
    def _value(self, seq: int, i: int) -> object:
        """What token ``i`` of sequence ``seq`` holds: its block's chained hash and its
        offset for a block full in the request's whole sequence, else its own name."""
        request, hashes = self.live[seq]
        j = i // self.bs
        if j < request.final_len // self.bs:
            return (hashes.chain(seq, request.final_len // self.bs)[j], i % self.bs)
        return ("tail", seq, i)

    def _request(self, data) -> Request:
        self.next_id += 1
        prompt_len = data.draw(st.integers(1, self.max_len - 8), label="prompt_len")
        output_len = data.draw(st.integers(1, 8), label="output_len")
        need = -(-prompt_len // self.piece_tokens)
        pieces = tuple(data.draw(st.lists(st.integers(0, 2), min_size=need, max_size=need),
                                 label="pieces"))
        return Request(self.next_id, 0.0, prompt_len, output_len, prompt_pieces=pieces,
                       prompt_piece_tokens=self.piece_tokens)

    def _block_values(self, block: int) -> list[object]:
        bs = self.bs
        return [self.gpu.get(block * bs + o) for o in range(bs)]

    # --------------------------------------------------------------- rules
    @rule(data=st.data())
    def step(self, data):
        """One step: frees, then decodes, then admissions (the scheduler's order); then
        the copies and writes in the executor's order."""
        kv, alloc, bs = self.kv, self.alloc, self.bs
        live = sorted(self.live)
        frees = data.draw(st.lists(st.sampled_from(live), unique=True, max_size=2)
                          if live else st.just([]), label="frees")
        for s in frees:
            kv.free([s])
            del self.live[s]
        writes: list[tuple[int, object]] = []  # the model's: (slot, value), at step 6
        cow = []
        growing = [s for s in sorted(self.live)
                   if alloc.seq_len(s) < self.live[s][0].final_len - 1]
        for s in data.draw(st.lists(st.sampled_from(growing), unique=True, max_size=3)
                           if growing else st.just([]), label="decodes"):
            grant = kv.allocate_slots([s], 1)
            if grant is not None:
                cow += grant.copies
                writes.append((grant.slots[0], self._value(s, alloc.seq_len(s) - 1)))
        loads_expected: list[int] = []  # GPU blocks the host tier must fill this step
        for _ in range(data.draw(st.integers(0, 3), label="admissions")):
            request = self._request(data)
            s, hashes = request.request_id, kv.hashes_of(request)
            n = request.prompt_len
            before = alloc.snapshot()
            promised = kv.get_computed_tokens(hashes, s, n)
            assert alloc.snapshot() == before, "a lookup changed the allocator"
            grant = kv.allocate_slots([s], n, hashes=hashes, final_len=request.final_len - 1)
            if grant is None:
                assert alloc.snapshot() == before, "a refused admission changed memory"
                continue
            self.live[s] = (request, hashes)
            hit, from_host = grant.computed_tokens[0], grant.host_tokens[0]
            assert hit == promised, f"lookup said {promised} tokens, the grant {hit}"
            assert 0 <= from_host <= hit and hit % bs == 0 and from_host % bs == 0
            assert alloc.prefix_hit_tokens(s) == hit
            table = alloc.block_table(s)
            loads_expected += table[(hit - from_host) // bs:hit // bs]
            writes += [(slot, self._value(s, i))
                       for i, slot in enumerate(alloc.slot_mapping(s)) if i >= hit]
        moved = kv.host_transfers()
        loaded = []
        for c in moved.copies:  # 3b: in list order
            if c.to_host:
                self.host[c.host_block] = self._block_values(c.gpu_block)
            else:
                assert c.host_block in self.host, (
                    f"a load reads host block {c.host_block}, never written")
                for o, v in enumerate(self.host[c.host_block]):
                    self.gpu[c.gpu_block * bs + o] = v
                loaded.append(c.gpu_block)
        assert sorted(loaded) == sorted(loads_expected), (
            f"the host loads filled blocks {loaded}, the grants' host hits are {loads_expected}")
        for c in cow:  # 4
            for o in range(c.num_slots):
                self.gpu[c.dst_slot + o] = self.gpu.get(c.src_slot + o)
        for slot, v in writes:  # 6: the model
            self.gpu[slot] = v
        for c in moved.writes:  # 7: write-through of what the model computed
            self.host[c.host_block] = self._block_values(c.gpu_block)

    # ---------------------------------------------------------- invariants
    @invariant()
    def consistent(self):
        self.alloc.check_invariants()

    @invariant()
    def sequences_read_their_own_tokens(self):
        for s in self.live:
            got = [self.gpu.get(slot) for slot in self.alloc.slot_mapping(s)]
            want = [self._value(s, i) for i in range(len(got))]
            assert got == want, f"sequence {s} reads K/V that is not its own"

    @invariant()
    def host_entries_hold_what_they_name(self):
        host = self.alloc.host
        assert len(host) <= self.host_blocks, "the host tier holds more than its capacity"
        for h, hb in host.entries.items():
            assert self.host.get(hb) == [(h, o) for o in range(self.bs)], (
                f"host block {hb} is named {h} but holds other K/V")
