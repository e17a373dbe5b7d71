"""Moving K/V in a paged cache: ``write_kv`` (new tokens into their slots) and
``copy_blocks`` (copy-on-write block copies). Wrappers with checks, torch versions,
references. Kernels: :mod:`pagedsim.kernels.triton_cache_ops`.

A *slot* is ``block * block_size + offset``: the same numbering the pagedsim
allocators hand out.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import torch

from . import backend as _backend
from .checks import INDEX_DTYPES, require_cache_pair, require_same_device, require_tensor

# --------------------------------------------------------------------------- write_kv


def write_kv(
    k_cache: torch.Tensor,  # [B, BS, KVH, D]
    v_cache: torch.Tensor,  # [B, BS, KVH, D]
    k: torch.Tensor,  # [T, KVH, D]
    v: torch.Tensor,  # [T, KVH, D]
    slot_mapping: torch.Tensor,  # int32/int64 [T]
    *,
    backend: str | None = None,
    check_values: bool = True,
) -> None:
    """Store token ``i``'s K/V (``k[i]``, ``v[i]``) into slot ``slot_mapping[i]``, in place.

    A slot of -1 means "skip this token" (padding in a batch). Slots must be distinct
    (two tokens into one slot would race); with ``check_values`` they are checked to
    lie in ``-1 .. num_blocks * block_size - 1`` and to be distinct (one host sync).
    Any tensor may be a strided view (a sliced ``slot_mapping`` column, a cache that is
    a slice of a bigger one): both backends index through strides.
    """
    name = _backend.resolve(backend)
    require_cache_pair(k_cache, v_cache)
    require_tensor("k", k, 3)
    require_tensor("v", v, 3)
    require_tensor("slot_mapping", slot_mapping, 1)
    require_same_device(name, k_cache=k_cache, v_cache=v_cache, k=k, v=v,
                        slot_mapping=slot_mapping)
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ in shape")
    if k.shape[1:] != k_cache.shape[2:]:
        raise ValueError(
            f"k is [T, KVH, D] = {tuple(k.shape)} but the cache holds "
            f"[KVH, D] = {tuple(k_cache.shape[2:])} per slot"
        )
    if k.dtype != k_cache.dtype or v.dtype != k_cache.dtype:
        raise ValueError(f"k/v are {k.dtype}/{v.dtype} but the caches are {k_cache.dtype}")
    if slot_mapping.dtype not in INDEX_DTYPES:
        raise ValueError(f"slot_mapping must be int32 or int64, got {slot_mapping.dtype}")
    if slot_mapping.shape[0] != k.shape[0]:
        raise ValueError(f"{k.shape[0]} tokens but {slot_mapping.shape[0]} slots")
    if k_cache.stride() != v_cache.stride():
        raise ValueError("k_cache and v_cache must have the same strides")
    if k.shape[0] == 0:
        return
    if check_values:
        num_slots = k_cache.shape[0] * k_cache.shape[1]
        slots = slot_mapping.cpu().long()
        bad = ((slots < -1) | (slots >= num_slots)).nonzero().flatten().tolist()
        if bad:
            raise ValueError(
                f"slot_mapping[{bad[0]}] = {int(slots[bad[0]])} is out of range: the cache "
                f"has {num_slots} slots (-1 skips a token)"
            )
        real = slots[slots >= 0]
        if real.unique().numel() != real.numel():
            raise ValueError("slot_mapping writes two tokens into one slot")
    if name == "torch":
        write_kv_torch(k_cache, v_cache, k, v, slot_mapping)
        return
    from . import triton_cache_ops

    triton_cache_ops.launch_write_kv(k_cache, v_cache, k, v, slot_mapping)


def write_kv_torch(
    k_cache: torch.Tensor,  # [B, BS, KVH, D], any strides
    v_cache: torch.Tensor,  # [B, BS, KVH, D], any strides
    k: torch.Tensor,  # [T, KVH, D]
    v: torch.Tensor,  # [T, KVH, D]
    slot_mapping: torch.Tensor,  # int [T], -1 skips a token
) -> None:
    """Vectorised torch version: index_put at (slot // block_size, slot % block_size).

    Two index tensors rather than a flat ``[B*BS, KVH, D]`` view: a view needs the first
    two dims to be contiguous with each other, and a strided cache raised a bare
    RuntimeError; advanced indexing writes through any strides.
    """
    block_size = k_cache.shape[1]
    keep = slot_mapping >= 0  # [T]
    slots = slot_mapping[keep].long()  # [T'] real slots
    block, offset = slots // block_size, slots % block_size  # [T'] each
    k_cache[block, offset] = k[keep]
    v_cache[block, offset] = v[keep]


def write_kv_reference(k_cache, v_cache, k, v, slot_mapping) -> None:
    """One token at a time: block = slot // block_size, offset = slot % block_size."""
    block_size = k_cache.shape[1]
    for i, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        k_cache[slot // block_size, slot % block_size] = k[i]
        v_cache[slot // block_size, slot % block_size] = v[i]


# --------------------------------------------------------------------------- copy_blocks


def _pair_rows(pairs: Iterable[Sequence[int]]) -> list[tuple[int, int]]:
    """Python pairs as int tuples, refusing anything but two ints per pair.

    ``torch.tensor`` would truncate ``(1.7, 6.9)`` to ``(1, 6)`` and read ``True`` as 1,
    silently copying a block nobody named, so each entry is checked first.
    """
    rows: list[tuple[int, int]] = []
    for i, pair in enumerate(pairs):
        try:
            row = tuple(pair)
        except TypeError:
            raise ValueError(
                f"pairs[{i}] = {pair!r} is not a (src_block, dst_block) pair"
            ) from None
        if len(row) != 2 or any(
            isinstance(b, bool) or not isinstance(b, numbers.Integral) for b in row
        ):
            raise ValueError(
                f"pairs[{i}] = {pair!r} must be two int block ids (src_block, dst_block)"
            )
        rows.append((int(row[0]), int(row[1])))
    return rows


def _check_pair_values(host: torch.Tensor, num_blocks: int) -> None:
    """Block ids in range, and pairs independent. ``host``: int64 [num_pairs, 2] on the CPU."""
    bad = ((host < 0) | (host >= num_blocks)).any(dim=1).nonzero().flatten().tolist()
    if bad:
        raise ValueError(
            f"pairs[{bad[0]}] = {tuple(host[bad[0]].tolist())} names a block outside "
            f"0..{num_blocks - 1}"
        )
    srcs, dsts = set(host[:, 0].tolist()), host[:, 1].tolist()
    if len(set(dsts)) != len(dsts) or srcs & set(dsts):
        raise ValueError("copy_blocks pairs overlap: a destination repeats or is a source")


def as_pairs_tensor(pairs: torch.Tensor | Iterable[Sequence[int]], device) -> torch.Tensor:
    """``(src_block, dst_block)`` pairs as an int64 ``[num_pairs, 2]`` tensor on ``device``."""
    if isinstance(pairs, torch.Tensor):
        t = pairs
    else:
        t = torch.tensor(_pair_rows(pairs), dtype=torch.int64).reshape(-1, 2)
    if t.dim() != 2 or t.shape[1] != 2:
        raise ValueError(f"pairs must be [num_pairs, 2], got shape {tuple(t.shape)}")
    if t.dtype not in INDEX_DTYPES:
        raise ValueError(f"pairs must be an int32 or int64 tensor, got {t.dtype}")
    return t.to(device=device, dtype=torch.int64).contiguous()


def copy_blocks(
    k_cache: torch.Tensor,  # [B, BS, KVH, D], contiguous
    v_cache: torch.Tensor,  # [B, BS, KVH, D], contiguous
    pairs: torch.Tensor | Iterable[Sequence[int]],  # (src_block, dst_block) pairs
    *,
    backend: str | None = None,
    check_values: bool = True,
) -> None:
    """Copy whole blocks ``src -> dst`` in both caches, in place (copy-on-write).

    Pairs are independent: a destination block may not appear twice nor be another
    pair's source (the kernel runs all pairs at once, so the order would be undefined).
    Block ids are ints in ``0 .. num_blocks - 1``. Python pairs are always checked (they
    are on the host already); a device tensor of pairs only with ``check_values`` (a sync).
    """
    name = _backend.resolve(backend)
    require_cache_pair(k_cache, v_cache)
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("copy_blocks needs contiguous caches (a block is one run of memory)")
    # Parsed where the pairs are (Python pairs: on the host), checked, then moved.
    where = pairs.device if isinstance(pairs, torch.Tensor) else torch.device("cpu")
    pairs_t = as_pairs_tensor(pairs, where)  # int64 [num_pairs, 2]
    if pairs_t.shape[0] and (check_values or pairs_t.device.type == "cpu"):
        # Host pairs cost nothing to check; a block id out of range is a wild write.
        _check_pair_values(pairs_t.cpu(), k_cache.shape[0])
    pairs_t = pairs_t.to(k_cache.device)
    require_same_device(name, k_cache=k_cache, v_cache=v_cache, pairs=pairs_t)
    if pairs_t.shape[0] == 0:
        return
    if name == "torch":
        copy_blocks_torch(k_cache, v_cache, pairs_t)
        return
    from . import triton_cache_ops

    triton_cache_ops.launch_copy_blocks(k_cache, v_cache, pairs_t)


def copy_blocks_torch(k_cache, v_cache, pairs: torch.Tensor) -> None:
    """Vectorised torch version: gather the sources, scatter to the destinations."""
    src, dst = pairs[:, 0], pairs[:, 1]
    k_cache[dst] = k_cache[src]
    v_cache[dst] = v_cache[src]


def copy_blocks_reference(k_cache, v_cache, pairs: Iterable[Sequence[int]]) -> None:
    """One pair at a time."""
    for src, dst in pairs:
        k_cache[int(dst)] = k_cache[int(src)]
        v_cache[int(dst)] = v_cache[int(src)]
