"""A model's parameter count from its architecture (a Hugging Face config.json), and the
weights one serving step streams from it (dense models: all; MoE: the experts its tokens
activate).

Counted as Hugging Face's transformers builds the model (``sum(p.numel() for p in
model.parameters())``), per decoder layer:

* attention: the q, k, v and o projections, ``h x (heads + 2 kv_heads) x head_dim +
  heads x head_dim x h`` (GQA: fewer kv heads); biases where the family has them (Qwen2:
  q, k, v; gpt-oss: all four, and one attention sink per head); Qwen3's and Gemma 3's
  per-head q and k norms (``2 x head_dim``). MLA (DeepSeek-V2/V3, Kimi-K2): the query
  projection (``q_lora_rank`` down, its norm, up to ``heads x (qk_nope + qk_rope)``; or
  one matrix without ``q_lora_rank``), the joint KV down-projection to ``kv_lora_rank +
  qk_rope_head_dim``, its norm, the up-projection to ``heads x (qk_nope + v_head_dim)``,
  and the output from ``heads x v_head_dim``;
* MLP: a gated MLP of three ``h x intermediate`` matrices (SwiGLU/GeGLU: every family
  read here); a MoE layer has ``E`` routed experts of three ``h x moe_intermediate``
  matrices (gpt-oss: ``intermediate_size``, with biases), a router ``h x E`` (gpt-oss:
  with bias; DeepSeek-V3: with a per-expert score-correction bias), and shared experts
  (DeepSeek: ``n_shared_experts x moe_intermediate`` wide; Qwen2-MoE: one of
  ``shared_expert_intermediate_size`` and its gate ``h x 1``). DeepSeek's first
  ``first_k_dense_replace`` layers are dense (``intermediate_size``), then every
  ``moe_layer_freq``-th; Qwen-MoE's every ``decoder_sparse_step``-th outside
  ``mlp_only_layers``;
* norms: 2 x h a layer (Gemma 2 and 3: 4 x h), one final norm of h;

plus the token embeddings ``vocab x h`` and the LM head ``vocab x h`` unless
``tie_word_embeddings`` (the families' defaults: tied for Gemma, untied otherwise).
DeepSeek-V3's multi-token-prediction layer (``num_nextn_predict_layers``) is in its
checkpoint (hence 685B on its model page) but not in the model transformers or vLLM
serve, so it is not counted; nor is a multimodal model's vision tower (Gemma 3: only
``text_config`` is read).

A step of ``t`` tokens passes each token through ``k`` (``num_experts_per_tok``) of the
``E`` routed experts of every MoE layer. The weights it streams from HBM are the dense
ones and the experts at least one token chose. With routing independent and uniform
(each token picks ``k`` distinct experts; a given expert is missed by one token with
probability ``1 - k/E``), the expected number of distinct experts touched per layer is
``E x (1 - (1 - k/E) ** t)``: ``k`` at one token, all ``E`` at large batches (Mixtral,
``k/E`` = 1/4: 99% of the experts by 16 tokens; Qwen3-30B-A3B, 8 of 128: 87% at 32
tokens, 99.98% at 128). Real routers are skewed toward popular experts, which touches
fewer; this is the uniform bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..validate import check_int

#: Families whose embeddings are tied to the LM head unless the config says otherwise.
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3", "gemma3_text")
#: Families with per-head q and k RMS norms (``head_dim`` each).
QK_NORM_FAMILIES = ("qwen3", "qwen3_moe", "gemma3", "gemma3_text")
#: Families with four norms a layer (before and after attention and MLP).
FOUR_NORM_FAMILIES = ("gemma2", "gemma3", "gemma3_text")

#: ``field(key, default, least)``: the config's whole number at ``key`` (range-checked
#: by the caller), ``default`` when absent (None: unknown).
FieldReader = Callable[[str, "int | None", int], "int | None"]


@dataclass(frozen=True, slots=True)
class ParamCount:
    """Parameters of a model, split by what a step reads (counts, not bytes).

    ``dense``: every parameter each token meets (embeddings, LM head, attention, norms,
    dense MLPs, shared experts, routers); ``expert``: one routed expert of one MoE layer;
    ``moe_layers`` layers of ``num_experts`` routed experts, of which each token uses
    ``experts_per_token``; ``embedding``: the input embedding table (part of ``dense``;
    a token only looks up its row, which is why some model cards leave it out of the
    active count)."""

    dense: int
    expert: int = 0
    moe_layers: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    embedding: int = 0

    def __post_init__(self) -> None:
        check_int("dense", self.dense, minimum=1)
        for name in ("expert", "moe_layers", "num_experts", "experts_per_token", "embedding"):
            check_int(name, getattr(self, name), minimum=0)
        moe = (self.expert, self.moe_layers, self.num_experts, self.experts_per_token)
        if any(moe) and not all(moe):
            raise ValueError(f"a MoE count needs expert, moe_layers, num_experts and "
                             f"experts_per_token all > 0, got {moe}")
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) exceeds "
                             f"num_experts ({self.num_experts})")

    @property
    def is_moe(self) -> bool:
        return self.moe_layers > 0

    @property
    def total(self) -> int:
        """Every parameter (what Hugging Face counts, and what the checkpoint holds)."""
        return self.dense + self.moe_layers * self.num_experts * self.expert

    @property
    def active(self) -> int:
        """Parameters one token passes through: the dense ones and ``experts_per_token``
        experts a MoE layer (embedding included)."""
        return self.dense + self.moe_layers * self.experts_per_token * self.expert

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct routed experts a MoE layer runs for ``tokens`` tokens, under
        uniform independent routing: ``E x (1 - (1 - k/E) ** tokens)`` (the module
        docstring); 0 for a dense model or no tokens."""
        if not self.is_moe or tokens <= 0:
            return 0.0
        e, k = self.num_experts, self.experts_per_token
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def streamed_fraction(self, tokens: int) -> float:
        """The share of :attr:`total` a step of ``tokens`` tokens streams: the dense
        parameters and the experts touched (1 for a dense model)."""
        if not self.is_moe:
            return 1.0
        touched = self.moe_layers * self.expert * self.experts_touched(tokens)
        return (self.dense + touched) / self.total


def count_params(text: dict, field: FieldReader) -> tuple[ParamCount | None, str]:
    """The :class:`ParamCount` of a config's language model (``text``: the config, or its
    ``text_config``), and ``""``; or ``(None, what is missing)`` when the config lacks a
    field the count needs (trimmed configs). ``field`` reads and range-checks a whole
    number (see :data:`FieldReader`)."""
    family = str(text.get("model_type", ""))
    need = {}
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        need[key] = field(key, None, 1)
    missing = [k for k, v in need.items() if v is None]
    if missing:
        return None, f"no {', '.join(missing)}"
    vocab, h, layers, heads = (need[k] for k in need)
    assert vocab and h and layers and heads  # for the type checker: all found
    kv_heads = field("num_key_value_heads", heads, 1) or heads
    head_dim = field("head_dim", None, 1) or h // heads

    # Attention, one layer.
    if text.get("kv_lora_rank") is not None:
        kv_rank = field("kv_lora_rank", None, 1) or 0
        rope = field("qk_rope_head_dim", None, 0) or 0
        nope = field("qk_nope_head_dim", None, 0)
        v_dim = field("v_head_dim", None, 1)
        if nope is None or v_dim is None:
            return None, "an MLA config without qk_nope_head_dim or v_head_dim"
        q_rank = field("q_lora_rank", None, 1) if text.get("q_lora_rank") is not None else None
        q_out = heads * (nope + rope)
        q = h * q_out if q_rank is None else h * q_rank + q_rank + q_rank * q_out
        attn = (q + h * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v_dim)
                + heads * v_dim * h)
    else:
        q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
        attn = h * (q_dim + 2 * kv_dim) + q_dim * h
        if family in ("qwen2", "qwen2_moe"):
            attn += q_dim + 2 * kv_dim  # q, k, v biases
        elif text.get("attention_bias") is True or family == "gpt_oss":
            attn += q_dim + 2 * kv_dim + h
        if family == "gpt_oss":
            attn += heads  # attention sinks
        if family in QK_NORM_FAMILIES:
            attn += 2 * head_dim
    norms = (4 if family in FOUR_NORM_FAMILIES else 2) * h

    # MLP: which layers are MoE, and their experts.
    num_experts = next((field(k, None, 0) for k in ("num_local_experts", "num_experts",
                                                     "n_routed_experts")
                        if text.get(k) is not None), None) or None  # 0 experts: dense
    dense_inter = field("intermediate_size", None, 1)
    if num_experts is None:
        if dense_inter is None:
            return None, "no intermediate_size"
        per_layer = attn + norms + 3 * h * dense_inter
        return _done(ParamCount(dense=layers * per_layer + h + _embeddings(text, vocab, h,
                                                                              family),
                                embedding=vocab * h))
    top_k = next((field(k, None, 1) for k in ("num_experts_per_tok", "experts_per_token")
                  if text.get(k) is not None), None)
    if top_k is None:
        return None, "a MoE config without num_experts_per_tok"
    if top_k > num_experts:
        return None, f"num_experts_per_tok {top_k} exceeds the {num_experts} experts"
    if family == "gpt_oss":
        if dense_inter is None:
            return None, "no intermediate_size"
        expert = 3 * h * dense_inter + 2 * dense_inter + h  # gate_up and down, with biases
        router = h * num_experts + num_experts
    else:
        moe_inter = field("moe_intermediate_size", None, 1)
        if moe_inter is None:
            if family != "mixtral" or dense_inter is None:
                return None, "no moe_intermediate_size"
            moe_inter = dense_inter  # Mixtral's experts are intermediate_size wide
        expert = 3 * h * moe_inter
        router = h * num_experts
        if text.get("topk_method") == "noaux_tc":
            router += num_experts  # DeepSeek-V3's e_score_correction_bias
    shared = 0
    if text.get("n_shared_experts") is not None:
        shared = 3 * h * (field("moe_intermediate_size", None, 1) or 0) \
            * (field("n_shared_experts", None, 0) or 0)
    elif text.get("shared_expert_intermediate_size") is not None:
        shared = 3 * h * (field("shared_expert_intermediate_size", None, 1) or 0) + h
    moe_flags = _moe_layers(text, field, layers)
    num_moe = sum(moe_flags)
    if num_moe < layers and dense_inter is None:
        return None, "no intermediate_size (for the dense layers)"
    dense = (layers * (attn + norms) + num_moe * (router + shared)
             + (layers - num_moe) * 3 * h * (dense_inter or 0)
             + h + _embeddings(text, vocab, h, family))
    if num_moe == 0:
        return _done(ParamCount(dense=dense, embedding=vocab * h))
    return _done(ParamCount(dense=dense, expert=expert, moe_layers=num_moe,
                            num_experts=num_experts, experts_per_token=top_k,
                            embedding=vocab * h))


def _done(count: ParamCount) -> tuple[ParamCount, str]:
    return count, ""


def _embeddings(text: dict, vocab: int, h: int, family: str) -> int:
    """The input embeddings, and the LM head unless tied to them."""
    tied = text.get("tie_word_embeddings")
    if not isinstance(tied, bool):
        tied = family in TIED_BY_DEFAULT
    return vocab * h * (1 if tied else 2)


def _moe_layers(text: dict, field: FieldReader, layers: int) -> list[bool]:
    """Which layers are MoE: DeepSeek's after ``first_k_dense_replace`` every
    ``moe_layer_freq``-th; Qwen-MoE's every ``decoder_sparse_step``-th outside
    ``mlp_only_layers``; all of them otherwise (Mixtral, gpt-oss)."""
    if text.get("n_routed_experts") is not None:
        first = field("first_k_dense_replace", 0, 0) or 0
        freq = field("moe_layer_freq", 1, 1) or 1
        return [i >= first and i % freq == 0 for i in range(layers)]
    if text.get("num_experts") is not None:
        step = field("decoder_sparse_step", 1, 1) or 1
        given = text.get("mlp_only_layers")
        only = {i for i in given if isinstance(i, int)} if isinstance(given, list) else set()
        return [i not in only and (i + 1) % step == 0 for i in range(layers)]
    return [True] * layers
