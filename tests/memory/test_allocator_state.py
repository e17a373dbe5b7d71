"""Stateful property tests of every registered allocation scheme.

One machine per entry of :data:`pagedsim.memory.schemes.SCHEMES`, built through the registry,
so a new scheme gets these tests for free. The rules and invariants live in
:mod:`pagedsim.testing.allocator_machine` (the classroom labs' graders use them too):
random allocate / append / fork / free / swap sequences, deliberately bad or oversized
requests, and a model of what a real KV cache would hold, updated only through the
copies the allocator reports and the slots it hands out.
"""

from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st

from pagedsim import ModelSpec
from pagedsim.memory.schemes import SCHEMES, make_allocator
from pagedsim.testing.allocator_machine import FullAllocatorMachine


def _model(head_dim: int) -> ModelSpec:
    """A model whose K (or V) row in one layer is ``2 * head_dim`` bytes: big rows make
    page-sized schemes (vAttention) hold only a few tokens per page in a small pool."""
    return ModelSpec("rows", num_layers=1, num_heads=1, num_kv_heads=1, head_dim=head_dim,
                     dtype_bytes=2, weights_bytes=0, max_model_len=FullAllocatorMachine.max_len)


def machine_for(scheme: str) -> type[FullAllocatorMachine]:
    """The machine for one registered scheme; every pool parameter is drawn."""

    class SchemeMachine(FullAllocatorMachine):
        def make(self, data):
            block_size = data.draw(st.sampled_from([1, 2, 4, 16]), label="block_size")
            align = data.draw(st.sampled_from([1, 4]), label="align")
            capacity = max(data.draw(st.integers(8, 300), label="capacity") // align * align,
                           align)
            head_dim = data.draw(st.sampled_from([8192, 65536, 262144]), label="head_dim")
            max_seqs = data.draw(st.integers(1, 12), label="max_num_seqs")
            # A host tier behind a prefix cache (ignored by the other schemes); its own
            # machine, with shared prompts, is tests/memory/test_host_tier_state.py.
            host = data.draw(st.sampled_from([0, 0, 3]), label="host_blocks")
            try:
                return make_allocator(scheme, capacity, block_size, self.max_len,
                                      model=_model(head_dim), max_num_seqs=max_seqs,
                                      align_slots=align, host_cache_blocks=host)
            except ValueError:  # e.g. a pool smaller than one block or page
                assume(False)

    SchemeMachine.__name__ = SchemeMachine.__qualname__ = f"Machine[{scheme}]"
    return SchemeMachine


for _name in SCHEMES:
    _case = machine_for(_name).TestCase
    _case.__name__ = f"TestState_{_name.replace('-', '_')}"
    globals()[_case.__name__] = _case
del _name, _case
