"""The real kernels with a host tier behind the prefix cache (issue 23, part 5).

* Measured vs simulated over both tiers (:mod:`pagedsim.kernels.host_measure`): the GPU
  scan equals the account's token + cached slots, and the host blocks written equal the
  entries the tier holds, at every step, with hits from the host, write-backs and
  evictions happening; a planted executor that skips the loads or the write-backs is
  caught.
* Logits: a decoder run whose hits come from the host tier gives the logits (fp32, atol
  1e-5) of the same requests run with plain ``paged``, which computes every token.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernels_helpers import one_thread, tiny_model  # noqa: E402, F401

import pagedsim  # noqa: E402
from pagedsim.kernels import KVCacheConfig  # noqa: E402
from pagedsim.kernels import host_cache as host_cache_module  # noqa: E402
from pagedsim.kernels.executor import RealExecutor  # noqa: E402
from pagedsim.kernels.host_cache import HostKV, host_tier_cache  # noqa: E402
from pagedsim.kernels.host_measure import measure_host_tier  # noqa: E402
from pagedsim.kernels.measure import MeasureConfig, model_spec  # noqa: E402
from pagedsim.kernels.model import Decoder, ModelConfig  # noqa: E402
from pagedsim.workloads.sharing_workloads import MultiTurnConfig, generate_multi_turn  # noqa: E402

BS = 4
MAX_LEN = 64
ATOL = 1e-5


def config(**kw) -> MeasureConfig:
    # Six conversations over a 12-block pool: turns evict each other's history, which
    # the next turn finds again in the host tier.
    base = dict(workload="multi-turn", num_requests=24, prefix_groups=6,
                prompt_len_range=(2, 6), output_len_range=(2, 6), num_blocks=12,
                block_size=BS, backend="torch", max_model_len=MAX_LEN)
    base.update(kw)
    return MeasureConfig(**base)


@pytest.mark.parametrize("scheme", ["prefix-cache", "radix"])
@pytest.mark.parametrize("write_through", [False, True])
def test_both_tiers_measured_equal_simulated_at_every_step(scheme, write_through):
    m = measure_host_tier(config(), scheme, 32, write_through)
    f = m.frame
    assert m.host_hit_tokens > 0 and m.loaded_blocks * BS == m.host_hit_tokens
    assert m.offloaded_blocks > 0 and f["evictions"].sum() > 0
    assert (f["meas_host_blocks"] == f["sim_host_blocks"]).all()
    assert (f["meas_token_slots"] == f["sim_token"] + f["sim_cached"]).all()
    assert m.max_token_gap_slots == m.max_cached_gap_slots == m.max_host_gap_blocks == 0


@pytest.mark.parametrize("skip", ["loads", "write-backs"])
def test_an_executor_that_skips_host_copies_is_caught(skip, monkeypatch):
    run = HostKV.run
    keep_to_host = skip == "loads"
    monkeypatch.setattr(host_cache_module.HostKV, "run", lambda self, copies: run(
        self, [c for c in copies if c.to_host == keep_to_host]))
    m = measure_host_tier(config(), "prefix-cache", 32)
    assert m.max_token_gap_slots > 0  # the blocks it should have loaded read back as NaN
    if skip == "write-backs":
        assert m.max_host_gap_blocks > 0


def test_a_run_with_no_step_is_measured_not_a_nan_traceback():
    """Was: 'cannot convert float NaN to integer' (no step to take a max over). A pool
    of 1 block fits no request: every one is rejected, and no step runs."""
    m = measure_host_tier(config(num_blocks=1, prompt_len_range=(5, 6)), "prefix-cache", 4)
    assert m.frame.empty
    assert m.max_token_gap_slots == m.max_cached_gap_slots == m.max_host_gap_blocks == 0


def test_a_cache_without_a_host_tier_has_no_host_blocks():
    decoder = Decoder(tiny_model())
    with pytest.raises(ValueError, match="no host tier"):
        HostKV(decoder.make_cache(8, BS, scheme="prefix-cache"))
    with pytest.raises(ValueError, match="no prefix cache"):
        host_tier_cache(KVCacheConfig(2, 2, 32, 8, BS), "paged", 4)


# ---------------------------------------------------------------- logits equality
def _requests(seed: int) -> list[pagedsim.Request]:
    return generate_multi_turn(MultiTurnConfig(
        conversations=6, turns=3, message_len_range=(2, 6), output_len_range=(2, 5),
        rate_per_s=100.0, seed=seed, piece_tokens=BS, max_model_len=MAX_LEN))


def _logits(requests, scheme: str, model: ModelConfig, host_blocks: int = 0,
            num_blocks: int = 14):
    """Greedy run on the real executor: ``{(request_id, position): logits}`` (first
    computation of each) and the prompt tokens loaded from the host tier."""
    decoder = Decoder(model)
    if host_blocks:
        c = decoder.config
        cache = host_tier_cache(KVCacheConfig(c.num_layers, c.num_kv_heads, c.head_dim,
                                              num_blocks, BS), scheme, host_blocks,
                                max_model_len=MAX_LEN)
    else:
        cache = decoder.make_cache(num_blocks, BS, scheme, MAX_LEN)
    cache.backend = "torch"
    executor = RealExecutor(decoder, cache, seed=0, temperature=0.0)
    logits: dict[tuple[int, int], torch.Tensor] = {}
    loaded = [0]

    def on_step(sched, plan) -> None:
        executor.execute(sched, plan)
        loaded[0] += plan.prefix_host_hit_tokens
        for rid, _seq, position, row in executor.step_logits:
            logits.setdefault((rid, position), row)

    gpu = pagedsim.get_gpu("h200-141gb")
    cost = pagedsim.CostModel(model_spec(model, MAX_LEN), gpu,
                              host_link_bytes_per_s=gpu.host_link_bytes_per_s)
    pagedsim.simulate(requests, cache.allocator, cost, pagedsim.SchedulerConfig(),
                      scheme=scheme, progress=False, on_step=on_step)
    return logits, loaded[0]


@pytest.mark.parametrize("scheme", ["prefix-cache", "radix"])
@pytest.mark.parametrize("seed", [0, 1])
def test_hits_from_the_host_give_the_logits_of_computing_everything(scheme, seed):
    requests = _requests(seed)
    model = tiny_model(seed)
    plain, _ = _logits(requests, "paged", model)
    cached, loaded = _logits(requests, scheme, model, host_blocks=48)
    assert loaded > 0  # some hits came from the host tier
    assert cached.keys() == plain.keys()
    for key, row in plain.items():
        torch.testing.assert_close(cached[key], row, atol=ATOL, rtol=0,
                                   msg=lambda m, key=key: f"request, position {key}: {m}")
