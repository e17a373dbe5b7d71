"""Every pool and prefix-cache policy a registered scheme composes into a block manager
implements the protocol that says what the manager asks of it
(:mod:`pagedsim.memory.manager_parts`): every member present, and every call taking the
protocol's parameters, by name and in order (an implementation may add more, with
defaults). A new pool or policy that misses a call, or names a parameter differently,
fails here rather than deep in a run."""

from __future__ import annotations

import inspect

import pytest

from pagedsim import ModelSpec
from pagedsim.memory.block_manager import BlockManager
from pagedsim.memory.manager_parts import Pool, PrefixCache
from pagedsim.memory.schemes import SCHEMES, make_allocator

MODEL = ModelSpec("rows", num_layers=1, num_heads=1, num_kv_heads=1, head_dim=128,
                  dtype_bytes=2, weights_bytes=0, max_model_len=4096)


def _managers(scheme: str) -> list[BlockManager]:
    """The block managers ``scheme``'s allocator is made of (none for the contiguous
    and hybrid schemes, which manage their memory otherwise)."""
    alloc = make_allocator(scheme, 1 << 14, 16, 4096, model=MODEL, host_cache_blocks=4)
    found = [alloc] if isinstance(alloc, BlockManager) else []
    inner = getattr(alloc, "blocks", None)  # vAttention composes one
    return found + ([inner] if isinstance(inner, BlockManager) else [])


def _calls(protocol: type) -> dict[str, inspect.Signature]:
    """The protocol's methods (properties and attributes are checked by isinstance)."""
    return {name: inspect.signature(value) for name, value in vars(protocol).items()
            if inspect.isfunction(value) and not name.startswith("_")}


def _check_calls(part: object, protocol: type) -> None:
    for name, wanted in _calls(protocol).items():
        have = inspect.signature(getattr(part, name))
        want = list(wanted.parameters)[1:]  # without self
        got = list(have.parameters.values())
        assert [p.name for p in got[:len(want)]] == want, (
            f"{type(part).__name__}.{name}{have} does not take {protocol.__name__}'s "
            f"parameters {want}")
        extra = [p.name for p in got[len(want):] if p.default is inspect.Parameter.empty]
        assert not extra, f"{type(part).__name__}.{name} needs more: {extra}"


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_each_part_implements_its_protocol(scheme: str) -> None:
    for mgr in _managers(scheme):
        assert isinstance(mgr.pool, Pool), type(mgr.pool).__name__
        _check_calls(mgr.pool, Pool)
        if mgr.cache is not None:
            assert isinstance(mgr.cache, PrefixCache), type(mgr.cache).__name__
            _check_calls(mgr.cache, PrefixCache)


def test_the_schemes_cover_every_pool_and_policy() -> None:
    """The test above sees the three pools and the two policies (so it checks them)."""
    pools, caches = set(), set()
    for scheme in SCHEMES:
        for mgr in _managers(scheme):
            pools.add(type(mgr.pool).__name__)
            caches.add(type(mgr.cache).__name__)
    assert {"FreeList", "BlockPool", "RadixPool"} <= pools
    assert {"NoneType", "HashCache", "RadixCache"} <= caches


def test_a_part_that_misses_a_call_is_caught() -> None:
    """The check itself can fail: a pool without ``touch_blocks``, and one whose
    ``get_new_blocks`` names its count otherwise."""
    free_list = _managers("paged")[0].pool

    class Short:
        def __init__(self) -> None:
            for name in ("num_blocks", "block_size", "caches", "hashes", "host",
                         "evicted_blocks", "on_release", "num_free_blocks",
                         "num_cached_blocks"):
                setattr(self, name, getattr(free_list, name))

        def __getattr__(self, name: str) -> object:
            if name == "touch_blocks":
                raise AttributeError(name)
            return getattr(free_list, name)

    assert not isinstance(Short(), Pool)

    class Renamed(type(free_list)):
        def get_new_blocks(self, count: int) -> list[int]:  # type: ignore[override]
            return super().get_new_blocks(count)

    with pytest.raises(AssertionError, match="get_new_blocks"):
        _check_calls(Renamed(4, 16), Pool)
