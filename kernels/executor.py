"""The real executor: carry out the scheduler's step plans on a decoder and a KV cache.

The simulator's executor only advances a cost model. This one runs the small Llama-style
decoder (:class:`pagedsim.kernels.model.Decoder`) for real: prefills write K/V through
``write_kv``, decodes read it through ``paged_attention``, copy-on-write and contiguous
fork copies run through ``copy_blocks``, swaps move tensors to the CPU and back. The
scheduler and the cache share *one* allocator object, so every block id the scheduler
hands out is the block the kernels read and write.

Freed memory is scrubbed: the allocator reports every released run of slots
(``on_release``) and the executor refills it with the NaN sentinel before anything
else writes there. So at every step, the slots that are not NaN are exactly the slots
holding a live token's K/V, plus those of prefix-cached blocks, which
:mod:`pagedsim.kernels.measure` counts and holds against the simulator's accounting.

Prefix caching (``prefix-cache`` and the other caching schemes of the ``paged`` family):
a prefill item's ``start`` tokens are already in the cache, so only tokens ``start ..``
are computed and written, attending to the cached ones (the same path serves the later
chunks of a chunked prefill). A prefix cache does not report a full block when its
request frees it: the block keeps its K/V, reusable, until the allocator evicts it to
hand it out again, and reports it then. Evictions happen while the scheduler plans, so
an evicted block is scrubbed in step 1 below, before this step's prefills or decodes
write into it, even when it is handed out again in the same step. A prefix cache may
also hand out a block in the same step as the prefill that computes it (two requests of
one group admitted together); the model writes every prefill's K/V of a layer before
any prefill reads it back. Token ids come from the request's content
(:func:`pagedsim.workloads.prompts.prompt_tokens`, folded into the model's vocabulary), so equal
pieces are equal tokens; outputs that the content names (a multi-turn chat, whose next
turn repeats them) are taken from it rather than sampled, else a later turn's cache hit
would be K/V of other tokens.

Order of work in a step (see :mod:`pagedsim.engine.plan`): scrub released memory (except what
this step swaps out or writes back to a host tier), fork copies, read swap-outs to the CPU
and scrub them, the host tier's copies in order (write-backs of evicted blocks, loads of
host hits; then the written-back blocks are scrubbed unless a load filled them),
copy-on-write copies, swap-ins, then the model (prefills, then decodes), then the host
tier's write-throughs of what the model computed (:mod:`pagedsim.kernels.host_cache`). Forks come
first because the scheduler forks before it preempts: a fork writes only into memory
it held before any preemption of this step, and a group may fork and be swapped out in
the same step (its children's K/V must be in place when the swap-out reads it).
Swap-out reads come before every write into memory this step's preemptions released.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

import torch

from pagedsim.engine.plan import StepPlan
from pagedsim.engine.scheduler import Scheduler
from pagedsim.workloads.prompts import named_tokens, prompt_tokens
from pagedsim.workloads.workload import Request

from .host_cache import HostKV
from .kv_cache import KVCache, SwappedKV
from .model import Decoder

SeqId = Hashable


class RealExecutor:
    """Runs plans on ``decoder`` with ``cache``; build the scheduler on ``cache.allocator``.

    Prompt token ids are drawn per request from a generator seeded with
    ``(seed, request_id)``; new tokens are sampled at ``temperature`` (0 = greedy) from
    a seeded generator, so a run is reproducible.
    """

    def __init__(self, decoder: Decoder, cache: KVCache, seed: int = 0,
                 temperature: float = 1.0) -> None:
        decoder.check_cache(cache)
        self.decoder = decoder
        self.cache = cache
        self.seed = seed
        self.temperature = temperature
        self.gen = torch.Generator().manual_seed(seed)
        self.tokens: dict[SeqId, list[int]] = {}  # token ids whose K/V is in the cache
        self.request_of: dict[SeqId, Request] = {}  # the request each sequence serves
        self.pending: dict[SeqId, int] = {}  # sampled, K/V written by the next decode
        self.last_logits: dict[SeqId, torch.Tensor] = {}  # fp32 CPU [V]
        #: What the last step computed: ``(request_id, seq_id, position, logits)`` for each
        #: sequence that got a next token (logits fp32 CPU ``[V]`` predict ``position``).
        self.step_logits: list[tuple[int, SeqId, int, torch.Tensor]] = []
        self.swapped: dict[int, SwappedKV] = {}  # id(SwappedGroup) -> its CPU copy
        self._released: list[tuple[int, int]] = []  # (start_slot, num_slots)
        self._contents: dict[int, list[int]] = {}  # request id -> token ids it names
        cache.allocator.on_release = self._on_release
        self.num_steps = 0
        #: The host tier's blocks on the CPU, when the allocator has a host tier.
        self.host = (HostKV(cache) if getattr(cache.allocator, "host", None) is not None
                     else None)

    def _on_release(self, start_slot: int, num_slots: int) -> None:
        self._released.append((start_slot, num_slots))

    # ---------------------------------------------------------------- helpers
    def _flat(self, t: torch.Tensor) -> torch.Tensor:
        c = self.cache.config
        return t.view(c.num_blocks * c.block_size, c.num_kv_heads, c.head_dim)  # [slots, KVH, D]

    def _prompt(self, request_id: int, prompt_len: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + request_id)
        vocab = self.decoder.config.vocab_size
        return torch.randint(0, vocab, (prompt_len,), generator=g).tolist()

    def _content(self, request: Request) -> list[int]:
        """The token ids the request's content names: its prompt, then the outputs its
        pieces name (``output_in_pieces``, as :func:`pagedsim.workloads.prompts.block_key` reads
        them), folded into the model's vocabulary. Equal pieces give equal ids, which is
        what makes a prefix cache's shared K/V the right K/V. A request without pieces
        holds prompt ids of its own, seeded by ``(seed, request_id)``."""
        toks = self._contents.get(request.request_id)
        if toks is None:
            if request.prompt_pieces is None:
                toks = self._prompt(request.request_id, request.prompt_len)
            else:
                named = named_tokens(request)  # the tokens its pieces name (block_key's)
                ids = prompt_tokens(replace(request, prompt_len=named, output_in_pieces=False))
                toks = (ids.astype("int64") % self.decoder.config.vocab_size).tolist()
            self._contents[request.request_id] = toks
        return toks

    def _next_token(self, request: Request, position: int, logits: torch.Tensor) -> int:
        """The token at ``position`` of a sequence of ``request``: the one its content
        names when the workload says what it outputs (a multi-turn chat's next turn
        repeats this output, so the cache must hold these tokens' K/V), else sampled."""
        content = self._content(request)
        if position < len(content):
            return content[position]
        return self._sample(logits)

    def _sample(self, logits: torch.Tensor) -> int:
        """One token from fp32 ``[V]`` logits."""
        if self.temperature == 0:
            return int(logits.argmax())
        probs = torch.softmax(logits / self.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.gen))

    def _scrub(self, runs: list[tuple[int, int]], keep: set[int] | None = None,
               only: set[int] | None = None) -> None:
        """Refill released slots with the NaN sentinel in every layer: all of ``runs``
        except the slots in ``keep``, or only those in ``only``."""
        slots = [s for start, n in runs for s in range(start, start + n)]
        if keep:
            slots = [s for s in slots if s not in keep]
        if only is not None:
            slots = [s for s in slots if s in only]
        if not slots:
            return
        idx = torch.tensor(slots, dtype=torch.int64, device=self.cache.config.device)
        for k_cache, v_cache in zip(self.cache.k_caches, self.cache.v_caches, strict=True):
            self._flat(k_cache)[idx] = float("nan")
            self._flat(v_cache)[idx] = float("nan")

    def _slot_index(self, runs: list[tuple[int, int]]) -> torch.Tensor:
        idx = [s for start, n in runs for s in range(start, start + n)]
        return torch.tensor(idx, dtype=torch.int64, device=self.cache.config.device)

    # ------------------------------------------------------------------- step
    def on_step(self, scheduler: Scheduler, plan: StepPlan) -> None:
        """Hook for :func:`pagedsim.simulate` (``on_step=executor.on_step``)."""
        self.execute(scheduler, plan)

    @torch.no_grad()
    def execute(self, scheduler: Scheduler, plan: StepPlan) -> None:
        """Carry out one plan; the scheduler has already updated the allocator."""
        cache = self.cache
        self.num_steps += 1
        self.step_logits = []
        # Swap-out sources are released memory too; they are scrubbed after being read.
        swap_src = {c.src_slot + i for g in plan.swap_outs for c in g.out_copies
                    for i in range(c.num_slots)}
        swapped_ids = {s for g in plan.swap_outs for s in g.seq_ids}
        # Evicted blocks a host tier writes back are read at 3b, then scrubbed, unless a
        # load has filled them again by then.
        bs = cache.config.block_size
        backs = {c.gpu_block * bs + i for c in plan.host_copies if c.to_host for i in range(bs)}
        loads = {c.gpu_block * bs + i for c in plan.host_copies if not c.to_host
                 for i in range(bs)}
        # 1. Scrub memory released since the last step (finished requests, dropped beams,
        #    recomputed groups); this step's forks and appends may already reuse it.
        self._scrub(self._released, keep=swap_src | backs)
        # 2. Forks: the child gets the parent's tokens (copied where the scheme does not
        #    share) and samples its own next token from the parent's last logits. They run
        #    before the swap-out reads: a group may fork and be swapped out in one step.
        #    A child recomputed in this same step is gone: its copy would only leave
        #    garbage in freed memory.
        for fork in plan.forks:
            if fork.child_id in cache or fork.child_id in swapped_ids:
                cache.run_copies(fork.copies)
            self.tokens[fork.child_id] = list(self.tokens[fork.parent_id])
            self.request_of[fork.child_id] = self.request_of[fork.parent_id]
            logits = self.last_logits[fork.parent_id]
            self.last_logits[fork.child_id] = logits
            self.pending[fork.child_id] = self._sample(logits)
        # 3. Swap-outs: read the K/V out (the blocks are already free in the allocator and
        #    may be handed out again below), then scrub them.
        for group in plan.swap_outs:
            self.swapped[id(group)] = cache.read_swapped(group)
        self._scrub(self._released, only=swap_src - backs)
        # 3b. The host tier: write-backs and loads, in the order the allocator made them.
        if plan.host_copies:
            assert self.host is not None
            self.host.run(plan.host_copies)
            self._scrub(self._released, only=backs - loads)
        self._released.clear()
        # 4. Copy-on-write copies of this step's appends.
        cache.run_copies(plan.cow_copies)
        # 5. Swap-ins: CPU buffers into the new slots.
        for group, copies in plan.swap_ins:
            cache.write_swapped(self.swapped.pop(id(group)), copies)
        # 6. The model: prefills (new prompts, or prompt + generated tokens to recompute),
        #    each from its ``start``: tokens before it are in the cache already (a prefix
        #    cache's hit, or earlier chunks), so only the rest is computed and written.
        if plan.prefills:
            seq_ids, token_lists, starts, fulls = [], [], [], []
            for item in plan.prefills:
                request = scheduler.groups[item.request_id].request
                if item.recompute:  # its K/V and tokens change only once the prefill ends
                    full = self.tokens[item.seq_id] + [self.pending[item.seq_id]]
                else:
                    full = self._content(request)[:request.prompt_len]
                end = item.start + item.num_tokens
                if end > len(full) or (item.last and end != len(full)):
                    raise AssertionError(f"sequence {item.seq_id!r}: plan prefills tokens "
                                         f"{item.start}..{end - 1} ({'last' if item.last else 'a'}"
                                         f" chunk), executor has {len(full)} tokens")
                seq_ids.append(item.seq_id)
                token_lists.append(full[item.start:end])
                starts.append(item.start)
                fulls.append(full)
            logits = self.decoder.forward_prefill(cache, seq_ids, token_lists, starts)  # [S, V]
            for item, full, row in zip(plan.prefills, fulls, logits, strict=True):
                if not item.last:  # a chunk: the next token is sampled after the last one
                    continue
                request = scheduler.groups[item.request_id].request
                self.tokens[item.seq_id] = full
                self.request_of[item.seq_id] = request
                self.last_logits[item.seq_id] = row
                self.pending[item.seq_id] = self._next_token(request, len(full), row)
                self.step_logits.append((request.request_id, item.seq_id, len(full), row))
        # 7. Decodes: each sequence's pending token goes into the slot the plan gave it.
        if plan.decode_seq_ids:
            ids = plan.decode_seq_ids
            toks = [self.pending[s] for s in ids]
            slots = torch.tensor(plan.decode_slots, dtype=torch.int64,
                                 device=cache.config.device)
            logits = self.decoder.forward_decode(cache, ids, toks, slots)  # [S, V]
            for seq_id, tok, row in zip(ids, toks, logits, strict=True):
                self.tokens[seq_id].append(tok)
                self.last_logits[seq_id] = row
                request = self.request_of[seq_id]
                self.pending[seq_id] = self._next_token(request, len(self.tokens[seq_id]), row)
                self.step_logits.append((request.request_id, seq_id, len(self.tokens[seq_id]),
                                         row))
        # 8. The host tier's write-throughs: blocks the model has just computed.
        if plan.host_writes:
            assert self.host is not None
            self.host.run(plan.host_writes)
        # Forget finished requests' sequences (their memory is freed next step) and
        # rejected ones' (already freed by the scheduler).
        for rid in (*plan.finished, *plan.rejected):
            self._contents.pop(rid, None)
            for seq_id in scheduler.groups[rid].seq_ids:
                self.tokens.pop(seq_id, None)
                self.request_of.pop(seq_id, None)
                self.pending.pop(seq_id, None)
                self.last_logits.pop(seq_id, None)
