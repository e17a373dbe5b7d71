"""Stateful property tests of the host tier behind every scheme with a prefix cache.

One machine per registered scheme whose allocator takes a host tier
(:mod:`pagedsim.testing.host_tier_machine`: steps of frees, decodes and admissions with
shared prefixes, the copies carried out in the executor's order, the K/V of both tiers
modelled): no hit from either tier reads lost or overwritten K/V, a host entry always
holds what its hash names, the tier never exceeds its capacity, and an admission's hits
per tier add up to what it was served.
"""

from __future__ import annotations

from pagedsim.memory.schemes import SCHEMES, make_allocator
from pagedsim.testing.host_tier_machine import HostTierMachine


def _has_host_tier(scheme: str) -> bool:
    try:
        alloc = make_allocator(scheme, 64, 16, 64, host_cache_blocks=2)
    except ValueError:  # a scheme that needs more than this (a model, say)
        return False
    return getattr(alloc, "host", None) is not None


HOST_SCHEMES = [name for name in SCHEMES if _has_host_tier(name)]


def test_every_caching_scheme_takes_a_host_tier():
    assert {"prefix-cache", "prefix-cache-dedup", "radix", "radix-lfu"} <= set(HOST_SCHEMES)


for _name in HOST_SCHEMES:
    _machine = type(f"HostMachine[{_name}]", (HostTierMachine,), {"scheme": _name})
    _case = _machine.TestCase
    _case.__name__ = f"TestHostTier_{_name.replace('-', '_')}"
    globals()[_case.__name__] = _case
del _name, _machine, _case
