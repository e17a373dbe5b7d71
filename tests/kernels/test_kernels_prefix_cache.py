"""The real kernels with prefix caching (issue 11, item 7): schemes ``prefix-cache``,
``prefix-cache-dedup`` and ``radix``.

* Measured vs simulated: with ``prefix-cache`` the slots the scan finds written are the
  live tokens' plus the cached blocks', at every step, hits and evictions included
  (:mod:`pagedsim.kernels.measure`'s module docstring says why).
* Logits: requests that hit the cache produce the same logits (fp32, atol 1e-5) as the
  same requests run with plain ``paged``, which computes every token itself: the K/V a
  hit reuses is the right K/V.

Tiny models on the torch backend with one thread (the Triton interpreter is covered by
one small run); each test takes seconds.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kernels_helpers import kernel_settings, one_thread, tiny_model  # noqa: E402, F401

import pagedsim  # noqa: E402
from pagedsim.kernels import KVCacheConfig, PagedKVCache  # noqa: E402
from pagedsim.kernels.executor import RealExecutor  # noqa: E402
from pagedsim.kernels.measure import (  # noqa: E402
    MeasureConfig,
    main,
    measure_scheme,
    model_spec,
    requests_for,
)
from pagedsim.kernels.model import Decoder, ModelConfig  # noqa: E402
from pagedsim.memory.block_manager import BlockManager  # noqa: E402
from pagedsim.memory.schemes import kv_cache_class  # noqa: E402
from pagedsim.workloads.prompts import prompt_tokens  # noqa: E402
from pagedsim.workloads.sharing_workloads import (  # noqa: E402
    MultiTurnConfig,
    SystemPromptConfig,
    generate_multi_turn,
    generate_system_prompt,
)

BS = 4  # block size
MAX_LEN = 64
ATOL = 1e-5


def config(**kw) -> MeasureConfig:
    base = dict(workload="system-prompt", num_requests=24, num_blocks=40, block_size=BS,
                backend="torch", max_model_len=MAX_LEN)
    base.update(kw)
    return MeasureConfig(**base)


# ------------------------------------------------------------ measured vs simulated
@pytest.mark.parametrize("scheme, kw", [
    ("prefix-cache", dict()),
    ("prefix-cache", dict(workload="few-shot", policy="chunked", preemption="swap",
                          max_num_batched_tokens=8)),
    ("prefix-cache-dedup", dict(n=2)),
    ("prefix-cache", dict(workload="multi-turn", prefix_groups=6, prompt_len_range=(2, 6),
                          output_len_range=(2, 6), num_blocks=12)),
    ("radix", dict(workload="few-shot", policy="chunked", max_num_batched_tokens=8)),
    ("radix", dict(workload="multi-turn", prefix_groups=6, prompt_len_range=(2, 6),
                   output_len_range=(2, 6), num_blocks=12)),
])
def test_scan_equals_token_plus_cached_at_every_step(scheme, kw):
    m = measure_scheme(config(**kw), scheme, progress=False)
    f = m.frame
    # The run exercised what could go wrong: hits, cached blocks, evictions (an evicted
    # block is always handed out again in the step that evicts it), preemption.
    assert m.prefix_hit_tokens > 0 and m.evictions > 0
    assert (f["sim_cached"] > 0).any() and (f["evictions"] > 0).any()
    assert f["preemptions"].sum() > 0
    assert (f["meas_token_slots"] == f["sim_token"] + f["sim_cached"]).all()
    assert (f["meas_cached_slots"] == f["sim_cached"]).all()
    assert m.max_token_gap_slots == 0 and m.max_cached_gap_slots == 0


def test_paged_scheme_has_no_cached_slots_on_a_sharing_workload():
    m = measure_scheme(config(num_requests=12), "paged", progress=False)
    f = m.frame
    assert m.prefix_hit_tokens == 0 and (f["sim_cached"] == 0).all()
    assert (f["meas_token_slots"] == f["sim_token"]).all() and m.max_cached_gap_slots == 0


def test_swap_in_in_a_step_that_runs_nothing_else_is_carried_out():
    """Regression: a plan whose only work is a swap-in was not shown to ``on_step``, so the
    real executor never copied the K/V back and the next decode read NaN."""
    cfg = config(n=3, num_requests=12, seed=0)
    lonely = []

    def record(sched, plan) -> None:
        if plan.is_empty and plan.swap_ins:
            lonely.append(plan.step)

    alloc = pagedsim.make_allocator("paged", cfg.capacity_slots, BS, MAX_LEN)
    cost = pagedsim.CostModel(model_spec(cfg.model, MAX_LEN), pagedsim.get_gpu("a100-40gb"))
    sched = pagedsim.SchedulerConfig(preemption=cfg.preemption,
                                     cpu_swap_slots=cfg.cpu_swap_slots, seed=cfg.seed)
    pagedsim.simulate(requests_for(cfg), alloc, cost, sched, progress=False, on_step=record)
    assert lonely, "the workload no longer produces a swap-in alone; pick another seed"
    assert measure_scheme(cfg, "paged", progress=False).max_token_gap_slots == 0


class _CachedAsFree(BlockManager):
    """Planted bug: cached blocks counted as free (their K/V forgotten by the account)."""

    def usage(self, final_lens=None):
        u = super().usage(final_lens)
        return pagedsim.SlotUsage(u.token_slots, u.reserved_slots, u.internal_frag_slots,
                                  u.physical_blocks, u.logical_blocks)

    @property
    def num_free_slots(self) -> int:
        return len(self.pool.free) * self.block_size


class _CachedAsToken(BlockManager):
    """Planted bug: cached blocks counted as tokens (as if a request still held them)."""

    def usage(self, final_lens=None):
        u = super().usage(final_lens)
        return pagedsim.SlotUsage(u.token_slots + u.cached_slots, u.reserved_slots,
                                  u.internal_frag_slots, u.physical_blocks, u.logical_blocks)


def test_cached_counted_as_free_is_caught():
    def plant(alloc) -> None:
        alloc.__class__ = _CachedAsFree

    m = measure_scheme(config(num_requests=12), "prefix-cache", progress=False,
                       corrupt_accounting=plant)
    assert (m.frame["sim_cached"] == 0).all()  # the planted account
    assert (m.frame["token_gap_slots"] > 0).any()  # the scan finds the cached K/V


def test_cached_counted_as_token_is_caught_by_the_cached_scan():
    """token + cached is unchanged by this bug: only splitting the scan by block tables
    sees it."""
    def plant(alloc) -> None:
        alloc.__class__ = _CachedAsToken

    m = measure_scheme(config(num_requests=12), "prefix-cache", progress=False,
                       corrupt_accounting=plant)
    assert m.max_token_gap_slots == 0
    assert m.max_cached_gap_slots > 0


def test_cli_measures_a_sharing_workload(tmp_path, capsys):
    rc = main(["--schemes", "prefix-cache", "--workload", "system-prompt", "--num-requests",
               "8", "--shared-tokens", "12", "--prefix-groups", "2", "--backend", "torch",
               "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "prefix hits" in out and "largest gap: 0 token slots" in out
    assert (tmp_path / "measured_vs_simulated.csv").stat().st_size > 0


def test_cli_bad_workload_is_one_line(capsys):
    assert main(["--workload", "nonsense", "--backend", "torch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nonsense" in err[0]
    with pytest.raises(ValueError, match="workload"):
        MeasureConfig(workload="nonsense")


# ----------------------------------------------------------------- the caches
def test_make_cache_and_for_scheme_accept_the_caching_schemes():
    decoder = Decoder(tiny_model())
    schemes = ("prefix-cache", "prefix-cache-dedup", "radix")
    for scheme in schemes:
        cache = decoder.make_cache(8, BS, scheme=scheme)
        assert isinstance(cache, PagedKVCache)
        assert type(cache.allocator) is type(pagedsim.make_allocator(scheme, 8 * BS, BS))
        assert kv_cache_class(scheme) is PagedKVCache
        built = PagedKVCache.for_scheme(KVCacheConfig(2, 2, 32, 8, BS), scheme)
        assert built.allocator.num_blocks == 8 and built.allocator.block_size == BS
    assert decoder.make_cache(8, BS, scheme="prefix-cache").allocator.kind == "prefix-cache"
    assert MeasureConfig(schemes=("paged", *schemes)).schemes


def _tokens(request: pagedsim.Request, vocab: int) -> list[int]:
    return (prompt_tokens(request).astype("int64") % vocab).tolist()


@given(seed=st.integers(0, 2**31 - 1))
@kernel_settings(max_examples=3)
def test_self_driven_prefill_shares_blocks_and_matches_dense(seed):
    """Decoder.prefill with contents: the second prompt finds the first's two full blocks,
    computes only its own tail, and its logits are the dense reference's."""
    decoder = Decoder(tiny_model(seed))
    cache = decoder.make_cache(8, BS, scheme="prefix-cache")
    a = pagedsim.Request(0, 0.0, 11, 1, prompt_pieces=(7, 8, 9), prompt_piece_tokens=BS)
    b = pagedsim.Request(1, 0.0, 10, 1, prompt_pieces=(7, 8, 10), prompt_piece_tokens=BS)
    ta, tb = _tokens(a, 256), _tokens(b, 256)
    assert ta[:8] == tb[:8] and ta[8:10] != tb[8:10]
    la = decoder.prefill(cache, ["a"], [ta], requests=[a])
    lb = decoder.prefill(cache, ["b"], [tb], requests=[b])
    assert cache.allocator.prefix_hit_tokens("b") == 8
    assert cache.block_table("b")[:2] == cache.block_table("a")[:2]
    for logits, toks in ((la, ta), (lb, tb)):
        want = decoder.forward_dense(toks)[0][-1]
        torch.testing.assert_close(logits[0], want, atol=ATOL, rtol=0)
    # The shared blocks hold the K/V the dense pass computes for those tokens.
    _, kvs = decoder.forward_dense(tb)
    for layer, (k, v) in enumerate(kvs):
        got_k, got_v = cache.gather(layer, "b")
        torch.testing.assert_close(got_k, k, atol=ATOL, rtol=0)
        torch.testing.assert_close(got_v, v, atol=ATOL, rtol=0)


# ---------------------------------------------------------------- logits equality
def run_logits(requests, scheme: str, model: ModelConfig, policy: str = "v0",
               backend: str = "torch", num_blocks: int = 24):
    """Greedy run of ``requests`` on the real executor: ``{(request_id, position):
    logits}`` (first computation of each) and totals: prefix-hit tokens, prefill tokens
    computed, prefill chunks that were not a prompt's last. ``chunked`` runs 8 tokens a
    step, so prompts are split."""
    decoder = Decoder(model)
    cache = decoder.make_cache(num_blocks, BS, scheme, MAX_LEN)
    cache.backend = backend
    executor = RealExecutor(decoder, cache, seed=0, temperature=0.0)
    logits: dict[tuple[int, int], torch.Tensor] = {}
    totals = {"hits": 0, "computed": 0, "chunks": 0}

    def on_step(sched, plan) -> None:
        executor.execute(sched, plan)
        totals["hits"] += plan.prefix_hit_tokens
        totals["computed"] += plan.num_prefill_tokens
        totals["chunks"] += sum(not item.last for item in plan.prefills)
        for rid, _seq, position, row in executor.step_logits:
            logits.setdefault((rid, position), row)

    cost = pagedsim.CostModel(model_spec(model, MAX_LEN), pagedsim.get_gpu("a100-40gb"))
    sched = pagedsim.SchedulerConfig(policy=policy,
                                     max_num_batched_tokens=8 if policy == "chunked" else 2048)
    pagedsim.simulate(requests, cache.allocator, cost, sched, scheme=scheme, progress=False,
                      on_step=on_step)
    return logits, totals


def system_prompt_requests(seed: int, count: int = 12) -> list[pagedsim.Request]:
    # 13-token system prompts: 3 full blocks shared, the 4th block partly the user's own.
    return generate_system_prompt(SystemPromptConfig(
        groups=2, per_group=count // 2, system_tokens=13, user_len_range=(2, 10),
        output_len_range=(2, 8), rate_per_s=400.0, seed=seed, piece_tokens=BS,
        max_model_len=MAX_LEN))


def multi_turn_requests(seed: int) -> list[pagedsim.Request]:
    return generate_multi_turn(MultiTurnConfig(
        conversations=3, turns=3, message_len_range=(2, 8), output_len_range=(2, 6),
        rate_per_s=100.0, seed=seed, piece_tokens=BS, max_model_len=MAX_LEN))


def assert_same_logits(cached: dict, plain: dict) -> None:
    assert cached.keys() == plain.keys()  # same greedy tokens, so the same positions ran
    for key, row in plain.items():
        torch.testing.assert_close(cached[key], row, atol=ATOL, rtol=0,
                                   msg=lambda m, key=key: f"request, position {key}: {m}")


@pytest.mark.parametrize("scheme", ["prefix-cache", "prefix-cache-dedup", "radix"])
@pytest.mark.parametrize("policy", ["v0", "chunked"])
@given(seed=st.integers(0, 2**31 - 1))
@kernel_settings(max_examples=2)
def test_hits_give_the_logits_of_computing_everything(scheme, policy, seed):
    """The reference is ``paged`` under ``v0``: every prompt computed whole, in one
    prefill, the path the dense tests cover; the cached run may also split prompts."""
    requests = system_prompt_requests(seed % 1000)
    model = tiny_model(seed)
    plain, plain_totals = run_logits(requests, "paged", model)
    cached, totals = run_logits(requests, scheme, model, policy)
    assert plain_totals["hits"] == 0 and totals["hits"] > 0
    assert totals["computed"] < plain_totals["computed"]  # the hits were not computed
    assert (totals["chunks"] > 0) == (policy == "chunked")
    assert_same_logits(cached, plain)


@pytest.mark.parametrize("scheme", ["prefix-cache", "radix"])
@given(seed=st.integers(0, 2**31 - 1))
@kernel_settings(max_examples=2)
def test_multi_turn_hits_on_earlier_outputs_give_the_same_logits(scheme, seed):
    """A turn's prompt repeats the earlier turns' outputs: their blocks, filled during
    decode, are hits, and right only if the executor wrote the tokens the content names."""
    requests = multi_turn_requests(seed % 1000)
    model = tiny_model(seed)
    plain, _ = run_logits(requests, "paged", model, num_blocks=40)
    cached, totals = run_logits(requests, scheme, model, num_blocks=40)
    assert totals["hits"] > 0
    assert_same_logits(cached, plain)


@pytest.mark.skipif(not pagedsim.kernels.INFO.triton_installed, reason="needs Triton")
def test_hits_give_the_same_logits_through_the_triton_kernels():
    """The same check with Triton's write / copy / decode-attention kernels (the
    interpreter on a CPU: a few short requests only)."""
    requests = generate_system_prompt(SystemPromptConfig(
        groups=1, per_group=3, system_tokens=9, user_len_range=(2, 3), output_len_range=(2, 3),
        rate_per_s=50.0, seed=1, piece_tokens=BS, max_model_len=MAX_LEN))
    model = tiny_model(7)
    plain, _ = run_logits(requests, "paged", model, backend="triton")
    cached, totals = run_logits(requests, "prefix-cache", model, backend="triton")
    assert totals["hits"] > 0
    assert_same_logits(cached, plain)
