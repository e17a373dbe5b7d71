"""A small Llama-style decoder that generates through a paged (or contiguous) KV cache.

RMSNorm, rotary position embeddings, grouped-query attention, SwiGLU MLP (one layer's
math is :mod:`pagedsim.kernels.layers`); sizes from :class:`ModelConfig`, random weights
from a seed (it generates nonsense, but the *same* nonsense whichever cache it runs on,
which is what the tests need). Layers may have sliding windows (``layer_windows``,
gpt-oss's and Gemma 3's pattern): such a layer's token at position ``p`` attends to
positions ``p - W + 1 .. p`` only, on every path.

Three ways to run it:

- step by step, as a serving engine's executor would from a scheduler's plan:
  ``prefill(cache, seq_ids, token_ids)`` writes each prompt's K/V into the cache
  (attention by ``scaled_dot_product_attention``, causal; a prefix that a prefix
  cache already holds is attended to, not recomputed) and returns the last token's
  logits; ``decode(cache, seq_ids, token_ids)`` appends one token per sequence
  (copy-on-write handled by the cache) and attends with ``paged_attention``;
  forks, frees, copies and swaps are the cache's own methods;
- ``generate(cache, prompt, max_new_tokens, n, temperature, seed)``: prefill once,
  fork ``n - 1`` children (parallel sampling), decode;
- ``generate_dense(...)``: the reference, recomputing the whole sequence with plain
  matmul attention at every step, no cache at all.

Shapes: T tokens, H query heads, KVH kv heads, D head_dim, E hidden size, V vocab.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import torch

import pagedsim
from pagedsim.memory.schemes import kv_cache_class

from .backend import DEVICE
from .kv_cache import KVCache, KVCacheConfig
from .layers import LayerWeights, causal_attention, finish_layer, qkv, rms_norm

SeqId = Hashable

#: Largest size of each dimension (real models stay well under: Llama 3.1 405B has 126
#: layers, hidden 16,384, intermediate 53,248; Gemma 3's vocabulary is 262,144): the
#: weights are random tensors built at once, and each layer is a Python loop's turn.
MAX_DIMS = {"vocab_size": 2**18, "hidden_size": 2**14, "num_layers": 256, "num_heads": 256,
            "num_kv_heads": 256, "head_dim": 1024, "intermediate_size": 2**17}


@dataclass(slots=True)
class ModelConfig:
    """Decoder sizes. ``num_heads * head_dim`` need not equal ``hidden_size``."""

    vocab_size: int = 512
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 256
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    dtype: torch.dtype = torch.float32
    device: str = DEVICE
    seed: int = 0
    #: Each layer's sliding window in tokens, 0 for full attention; empty: all full.
    layer_windows: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "head_dim", "intermediate_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
            if value > MAX_DIMS[name]:
                raise ValueError(f"{name} must be at most {MAX_DIMS[name]:,}, got {value:,}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.rope_theta <= 0 or self.rms_norm_eps <= 0:
            raise ValueError("rope_theta and rms_norm_eps must be positive")
        windows = self.layer_windows
        if windows and (len(windows) != self.num_layers or not all(
                type(w) is int and w >= 0 for w in windows)):
            raise ValueError(f"layer_windows must give {self.num_layers} ints >= 0 (0: full "
                             f"attention), got {windows!r}")

    def weights_bytes_by_part(self) -> dict[str, int]:
        """Bytes of the weights :class:`Decoder` builds, by the size that sets each part:
        ``vocab_size`` (the embedding and the LM head), ``hidden_size`` (attention and the
        norms), ``intermediate_size`` (the MLP)."""
        e, i, layers = self.hidden_size, self.intermediate_size, self.num_layers
        qd, kvd = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        size = self.dtype.itemsize
        return {"vocab_size": 2 * self.vocab_size * e * size,
                "hidden_size": (layers * (2 * e * qd + 2 * e * kvd + 2 * e) + e) * size,
                "intermediate_size": layers * 3 * e * i * size}

    def window(self, layer: int) -> int | None:
        """Layer ``layer``'s sliding window in tokens, or None (full attention)."""
        return (self.layer_windows[layer] or None) if self.layer_windows else None


@dataclass(slots=True)
class Generation:
    """What ``generate`` produced: ``n`` samples of new tokens and every step's logits."""

    token_ids: list[list[int]]  # [n][max_new_tokens] new tokens (prompt excluded)
    logits: list[torch.Tensor] = field(repr=False)  # per step, fp32 CPU [n, V]
    seq_ids: tuple[SeqId, ...] = ()  # the cache's ids for the samples (empty for dense)


class Sampler:
    """Greedy (temperature 0) or Gumbel-max sampling from seeded noise.

    argmax(logits / T + Gumbel noise) is an exact sample of softmax(logits / T); drawing
    the noise from one seeded generator, step after step, makes the cached and the dense
    paths pick the same tokens whenever their logits agree.
    """

    def __init__(self, temperature: float, seed: int) -> None:
        if temperature < 0 or not math.isfinite(temperature):
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.temperature = temperature
        self.gen = torch.Generator().manual_seed(seed)

    def pick(self, logits: torch.Tensor) -> list[int]:
        """``logits`` fp32 CPU ``[n, V]`` -> one token id per row."""
        if self.temperature == 0:
            return logits.argmax(dim=-1).tolist()
        u = torch.rand(logits.shape, generator=self.gen, dtype=torch.float64)
        gumbel = -torch.log(-torch.log(u.clamp(1e-20, 1 - 1e-16)))
        return (logits.double() / self.temperature + gumbel).argmax(dim=-1).tolist()


class Decoder:
    """The model: weights and the three ways to run them (see the module docstring)."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = c = config
        gen = torch.Generator().manual_seed(c.seed)

        def w(*shape: int, std: float) -> torch.Tensor:
            return (torch.randn(*shape, generator=gen) * std).to(dtype=c.dtype, device=c.device)

        def norm_weight() -> torch.Tensor:
            return (1 + 0.1 * torch.randn(c.hidden_size, generator=gen)).to(c.dtype).to(c.device)

        e, qd, kvd, i = c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, \
            c.intermediate_size
        self.embed = w(c.vocab_size, e, std=1.0)  # [V, E]
        self.layers = [
            LayerWeights(
                attn_norm=norm_weight(),
                wq=w(e, qd, std=e ** -0.5), wk=w(e, kvd, std=e ** -0.5),
                wv=w(e, kvd, std=e ** -0.5), wo=w(qd, e, std=qd ** -0.5),
                mlp_norm=norm_weight(),
                w_gate=w(e, i, std=e ** -0.5), w_up=w(e, i, std=e ** -0.5),
                w_down=w(i, e, std=i ** -0.5),
            )
            for _ in range(c.num_layers)
        ]
        self.final_norm = norm_weight()
        # Larger than usual so that logits are well spread: greedy choices are then far
        # from ties, and a cached run can be compared token for token with the reference.
        self.lm_head = w(e, c.vocab_size, std=4 * e ** -0.5)  # [E, V]
        self._request_ids = itertools.count()

    # ----------------------------------------------------------- building blocks
    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, E]`` -> fp32 ``[T, V]``."""
        return (rms_norm(x, self.final_norm, self.config.rms_norm_eps) @ self.lm_head).float()

    def _tokens(self, token_ids: Sequence[int]) -> torch.Tensor:
        ids = torch.tensor(list(token_ids), dtype=torch.int64, device=self.config.device)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.config.vocab_size):
            raise ValueError(f"token ids must be in 0..{self.config.vocab_size - 1}")
        return ids

    def check_cache(self, cache: KVCache) -> None:
        """The cache must have this model's layers, kv heads, head_dim and dtype."""
        c, k = self.config, cache.config
        full = (0,) * c.num_layers
        mine = (c.num_layers, c.num_kv_heads, c.head_dim, c.dtype, c.layer_windows or full)
        theirs = (k.num_layers, k.num_kv_heads, k.head_dim, k.dtype, k.layer_windows or full)
        if mine != theirs:
            raise ValueError(f"cache (layers, kv heads, head_dim, dtype, windows) = {theirs}, "
                             f"model needs {mine}")

    def make_cache(self, num_blocks: int, block_size: int = 16, scheme: str = "paged",
                   max_model_len: int = 2048) -> KVCache:
        """A cache shaped for this model over a fresh allocator of ``scheme`` (any name in
        :mod:`pagedsim.memory.schemes` with a registered cache class, e.g. ``"paged"`` or
        ``"contiguous-oracle-first-fit"``); ``max_model_len`` in tokens."""
        c = self.config
        config = KVCacheConfig(c.num_layers, c.num_kv_heads, c.head_dim, num_blocks,
                               block_size, c.dtype, c.device, c.layer_windows)
        return kv_cache_class(scheme).for_scheme(config, scheme, max_model_len)

    # -------------------------------------------------------------- executor steps
    def prefill(self, cache: KVCache, seq_ids: Sequence[SeqId],
                token_ids: Sequence[Sequence[int]],
                final_lens: Sequence[int | None] | None = None,
                requests: Sequence[pagedsim.Request | None] | None = None) -> torch.Tensor:
        """Self-driven: add new sequences to the cache (``final_lens`` go to the allocator),
        then run :meth:`forward_prefill`; fp32 ``[S, V]`` last-token logits.

        ``requests`` name each prompt's tokens for a prefix-caching allocator (the caller
        vouches that ``token_ids`` are those tokens): the prefix it serves from the cache
        is attended to, not computed."""
        self.check_cache(cache)
        if len(seq_ids) != len(token_ids):
            raise ValueError(f"{len(seq_ids)} sequence ids but {len(token_ids)} prompts")
        final_lens = final_lens or [None] * len(seq_ids)
        requests = requests or [None] * len(seq_ids)
        for seq_id, tokens in zip(seq_ids, token_ids, strict=True):
            if not tokens:
                raise ValueError(f"sequence {seq_id!r}: empty prompt")
            if seq_id in cache:
                raise ValueError(f"sequence {seq_id!r} is already in the cache "
                                 "(forward_prefill runs sequences allocated elsewhere)")
        added: list[SeqId] = []
        starts: list[int] = []
        try:  # all or nothing: a failure frees what this call added
            for seq_id, tokens, final, request in zip(seq_ids, token_ids, final_lens,
                                                      requests, strict=True):
                starts.append(cache.add(seq_id, len(tokens), final, request))
                added.append(seq_id)
            return self.forward_prefill(cache, seq_ids, [list(t)[s:] for t, s in
                                                         zip(token_ids, starts, strict=True)],
                                        starts)
        except Exception:
            for seq_id in reversed(added):
                cache.free(seq_id)
            raise

    def forward_prefill(self, cache: KVCache, seq_ids: Sequence[SeqId],
                        token_ids: Sequence[Sequence[int]],
                        starts: Sequence[int] | None = None) -> torch.Tensor:
        """Plan-driven: run tokens of sequences the allocator already holds and write their
        K/V; fp32 ``[S, V]`` logits of each sequence's last token given. Nothing here
        touches the allocator.

        ``token_ids[i]`` are the tokens at positions ``starts[i] ..`` of sequence ``i``,
        which must hold exactly ``starts[i] + len(token_ids[i])`` slots. ``starts[i] > 0``
        (default 0): the first ``starts[i]`` tokens' K/V is already in the cache (a prefix
        cache's hit, or earlier chunks of a chunked prefill); the new tokens attend to it
        and only they are written. Within a layer every sequence's K/V is written before
        any is read, so a sequence may attend to blocks another one of the same call
        fills (a prefix cache can hand out a block in the step that computes it).
        """
        self.check_cache(cache)
        if len(seq_ids) != len(token_ids):
            raise ValueError(f"{len(seq_ids)} sequence ids but {len(token_ids)} prompts")
        starts = [0] * len(seq_ids) if starts is None else list(starts)
        if len(starts) != len(seq_ids):
            raise ValueError(f"{len(seq_ids)} sequence ids but {len(starts)} starts")
        for seq_id, tokens, start in zip(seq_ids, token_ids, starts, strict=True):
            if isinstance(start, bool) or not isinstance(start, int) or start < 0:
                raise ValueError(f"sequence {seq_id!r}: start must be an int >= 0, "
                                 f"got {start!r}")
            if not tokens:
                raise ValueError(f"sequence {seq_id!r}: empty prompt")
            if cache.seq_len(seq_id) != start + len(tokens):
                raise ValueError(f"sequence {seq_id!r} holds {cache.seq_len(seq_id)} slots, "
                                 f"start {start} + {len(tokens)} tokens given")
        lens = [len(t) for t in token_ids]
        x = self.embed[self._tokens([t for seq in token_ids for t in seq])]  # [T, E]
        positions = torch.cat([torch.arange(s, s + n, device=x.device)
                               for s, n in zip(starts, lens, strict=True)])  # [T]
        slots = torch.cat([cache.slot_mapping([seq_id], s, s + n) for seq_id, s, n
                           in zip(seq_ids, starts, lens, strict=True)])  # [T]
        # Slots of the tokens already cached, per sequence (None: nothing cached).
        prefix_slots = [cache.slot_mapping([seq_id], 0, s) if s else None
                        for seq_id, s in zip(seq_ids, starts, strict=True)]
        for li, layer in enumerate(self.layers):
            q, k, v = qkv(layer, x, positions, self.config)
            cache.write(li, k, v, slots)  # all of them before any prefix is read back
            attn = []
            window = self.config.window(li)
            for qs, ks, vs, pre in zip(q.split(lens), k.split(lens), v.split(lens),
                                       prefix_slots, strict=True):
                if pre is None:
                    attn.append(causal_attention(qs, ks, vs, window))
                else:
                    kp, vp = cache.read(li, pre)  # [start, KVH, D]
                    attn.append(causal_attention(qs, torch.cat([kp, ks]), torch.cat([vp, vs]),
                                                  window))
            x = finish_layer(layer, x, torch.cat(attn), self.config.rms_norm_eps)
        last = torch.tensor(list(itertools.accumulate(lens)), device=x.device) - 1
        return self._logits(x[last]).cpu()

    def decode(self, cache: KVCache, seq_ids: Sequence[SeqId],
               token_ids: Sequence[int]) -> torch.Tensor:
        """Self-driven: append one slot per sequence (copy-on-write done first, all or
        nothing), then :meth:`forward_decode`; fp32 CPU ``[S, V]`` next-token logits."""
        self.check_cache(cache)
        if len(seq_ids) != len(token_ids):
            raise ValueError(f"{len(seq_ids)} sequence ids but {len(token_ids)} tokens")
        return self.forward_decode(cache, seq_ids, token_ids, cache.append_slots(seq_ids))

    def forward_decode(self, cache: KVCache, seq_ids: Sequence[SeqId],
                       token_ids: Sequence[int], slots: torch.Tensor) -> torch.Tensor:
        """Plan-driven: feed one new token per sequence into ``slots`` (int64 ``[S]``),
        which the allocator already appended (and whose copy-on-write copies already ran,
        as :class:`pagedsim.kernels.executor.RealExecutor` does); fp32 CPU ``[S, V]`` logits."""
        self.check_cache(cache)
        if len(seq_ids) != len(token_ids):
            raise ValueError(f"{len(seq_ids)} sequence ids but {len(token_ids)} tokens")
        if slots.shape != (len(seq_ids),):
            raise ValueError(f"slots must have shape ({len(seq_ids)},), got {tuple(slots.shape)}")
        block_tables, seq_lens = cache.attention_metadata(seq_ids)
        positions = (seq_lens - 1).long()  # [S] the new token's position
        x = self.embed[self._tokens(token_ids)]  # [S, E]
        for li, layer in enumerate(self.layers):
            q, k, v = qkv(layer, x, positions, self.config)
            cache.write(li, k, v, slots)
            attn = cache.attend(li, q, block_tables, seq_lens, self.config.window(li))
            x = finish_layer(layer, x, attn, self.config.rms_norm_eps)
        return self._logits(x).cpu()

    # ------------------------------------------------------------------ generate
    def generate(self, prompt_token_ids: Sequence[int], max_new_tokens: int, n: int = 1,
                 temperature: float = 0.0, seed: int = 0, cache: KVCache | None = None,
                 keep_in_cache: bool = False) -> Generation:
        """``n`` continuations of one prompt, each ``max_new_tokens`` tokens long.

        The prompt is prefilled once; then ``n - 1`` children are forked from it
        (parallel sampling: a paged cache shares the prompt's blocks and copy-on-write
        splits the last one on the first decode; a contiguous cache copies the prompt).
        Without ``cache`` a paged cache just big enough is made. The samples' ids are
        ``(request_number, i)``; they are freed at the end unless ``keep_in_cache``.
        """
        if max_new_tokens < 1 or n < 1:
            raise ValueError("max_new_tokens and n must be >= 1")
        prompt = list(prompt_token_ids)
        final_len = len(prompt) + max_new_tokens
        if cache is None:
            block_size = 16
            cache = self.make_cache(n * (-(-final_len // block_size) + 1), block_size)
        request = next(self._request_ids)
        seq_ids = tuple((request, i) for i in range(n))
        sampler = Sampler(temperature, seed)

        logits = self.prefill(cache, seq_ids[:1], [prompt], [final_len])  # [1, V]
        for child in seq_ids[1:]:
            cache.fork(seq_ids[0], child)
        step_logits = [logits.expand(n, -1).clone()]
        tokens = [[t] for t in sampler.pick(step_logits[-1])]
        for _ in range(max_new_tokens - 1):
            step_logits.append(self.decode(cache, seq_ids, [seq[-1] for seq in tokens]))
            for seq, t in zip(tokens, sampler.pick(step_logits[-1]), strict=True):
                seq.append(t)
        if not keep_in_cache:
            for seq_id in seq_ids:
                cache.free(seq_id)
        return Generation(tokens, step_logits, seq_ids)

    # ------------------------------------------------------------------ reference
    def forward_dense(self, token_ids: Sequence[int]):
        """Full recompute, no cache: fp32 CPU logits ``[T, V]`` and each layer's ``(k, v)``,
        ``[T, KVH, D]`` (the K/V a cache should hold for these tokens)."""
        c = self.config
        x = self.embed[self._tokens(token_ids)]  # [T, E]
        t = x.shape[0]
        positions = torch.arange(t, device=x.device)
        group = c.num_heads // c.num_kv_heads
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        kvs = []
        for li, layer in enumerate(self.layers):
            q, k, v = qkv(layer, x, positions, self.config)
            window = c.window(li)
            seen = causal if window is None else causal & ~causal.tril(diagonal=-window)
            kvs.append((k, v))
            kh = k.float().repeat_interleave(group, dim=1)  # [T, H, D]
            vh = v.float().repeat_interleave(group, dim=1)
            scores = torch.einsum("thd,shd->hts", q.float(), kh) / math.sqrt(c.head_dim)
            probs = scores.masked_fill(~seen, float("-inf")).softmax(dim=-1)  # [H, T, T]
            attn = torch.einsum("hts,shd->thd", probs, vh).to(x.dtype)  # [T, H, D]
            x = finish_layer(layer, x, attn, self.config.rms_norm_eps)
        return self._logits(x).cpu(), kvs

    def generate_dense(self, prompt_token_ids: Sequence[int], max_new_tokens: int, n: int = 1,
                       temperature: float = 0.0, seed: int = 0) -> Generation:
        """``generate`` by full recompute: the reference the cached paths must match."""
        if max_new_tokens < 1 or n < 1:
            raise ValueError("max_new_tokens and n must be >= 1")
        sampler = Sampler(temperature, seed)
        seqs = [list(prompt_token_ids) for _ in range(n)]
        step_logits = []
        for _ in range(max_new_tokens):
            step_logits.append(torch.stack([self.forward_dense(s)[0][-1] for s in seqs]))
            for seq, t in zip(seqs, sampler.pick(step_logits[-1]), strict=True):
                seq.append(t)
        prompt_len = len(prompt_token_ids)
        return Generation([s[prompt_len:] for s in seqs], step_logits)
