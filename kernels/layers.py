"""One decoder layer's math, Llama's: RMSNorm, rotary embeddings, the layer's weights, its
attention inputs (grouped-query), its output projection and SwiGLU MLP, and causal attention
of new tokens over the K/V before them (with an optional sliding window).

Functions of tensors, with no cache in sight: :class:`pagedsim.kernels.model.Decoder`
composes them, on the cache's paths and on the dense reference alike, so that every path
computes a layer the same way.

Shapes: T tokens, P tokens before them, H query heads, KVH kv heads, D head_dim,
E hidden size, I intermediate size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from .model import ModelConfig


@dataclass(slots=True)
class LayerWeights:
    """One layer's weights."""

    attn_norm: torch.Tensor  # [E]
    wq: torch.Tensor  # [E, H*D]
    wk: torch.Tensor  # [E, KVH*D]
    wv: torch.Tensor  # [E, KVH*D]
    wo: torch.Tensor  # [H*D, E]
    mlp_norm: torch.Tensor  # [E]
    w_gate: torch.Tensor  # [E, I]
    w_up: torch.Tensor  # [E, I]
    w_down: torch.Tensor  # [I, E]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / rms(x) * weight`` computed in fp32; ``x [..., E]``."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (Llama's rotate-half form): ``x [T, heads, D]``, positions int ``[T]``."""
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]  # [T, 1, D/2]
    x1, x2 = x.float()[..., : d // 2], x.float()[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def qkv(layer: LayerWeights, x: torch.Tensor, positions: torch.Tensor, c: ModelConfig):
    """``x [T, E]`` -> roped ``q [T, H, D]``, roped ``k [T, KVH, D]``, ``v [T, KVH, D]``."""
    h = rms_norm(x, layer.attn_norm, c.rms_norm_eps)
    q = (h @ layer.wq).view(-1, c.num_heads, c.head_dim)
    k = (h @ layer.wk).view(-1, c.num_kv_heads, c.head_dim)
    v = (h @ layer.wv).view(-1, c.num_kv_heads, c.head_dim)
    return rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta), v


def finish_layer(layer: LayerWeights, x: torch.Tensor, attn: torch.Tensor,
                 eps: float) -> torch.Tensor:
    """Residual + output projection, then the SwiGLU MLP block; ``attn [T, H, D]``."""
    x = x + attn.reshape(x.shape[0], -1) @ layer.wo
    h = rms_norm(x, layer.mlp_norm, eps)
    return x + (F.silu(h @ layer.w_gate) * (h @ layer.w_up)) @ layer.w_down


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     window: int | None = None) -> torch.Tensor:
    """One sequence's new tokens: ``q [T, H, D]`` at the last T positions of
    ``k, v [P + T, KVH, D]`` (P tokens cached before them) -> ``[T, H, D]``; with a
    ``window`` of W tokens, new token i (position P + i) sees keys P + i - W + 1 ..
    P + i only."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # [P+T, H, D]: query head h reads kv head h // G
    v = v.repeat_interleave(group, dim=1)
    t, p = q.shape[0], k.shape[0] - q.shape[0]
    if window is not None:
        mask = torch.ones(t, p + t, dtype=torch.bool, device=q.device).tril(diagonal=p)
        mask &= ~torch.ones_like(mask).tril(diagonal=p - window)  # [T, P+T] in the window
        # Keys behind every window (a hybrid cache gave their blocks back) may hold
        # anything: zero them, since a masked key still multiplies its value by 0.
        keep = mask.any(dim=0)  # [P+T]
        v = torch.where(keep[:, None, None], v, torch.zeros_like(v))
        k = torch.where(keep[:, None, None], k, torch.zeros_like(k))
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                             v.transpose(0, 1), attn_mask=mask)
    elif p == 0:
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                             v.transpose(0, 1), is_causal=True)  # [H, T, D]
    else:  # new token i sits at position p + i: it sees keys 0 .. p + i
        mask = torch.ones(t, p + t, dtype=torch.bool, device=q.device).tril(diagonal=p)
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                             v.transpose(0, 1), attn_mask=mask)
    return out.transpose(0, 1)
