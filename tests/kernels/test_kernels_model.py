"""The decoder through paged and contiguous caches against the dense (no-cache) reference."""

from __future__ import annotations

import pytest
import torch

from pagedsim.kernels.model import Decoder, Generation, ModelConfig, Sampler

PROMPT = [5, 17, 300, 42, 7, 99, 1, 2, 3]  # 9 tokens: the last block of 4 is partly full
NEW_TOKENS = 17  # 1 token from the prefill + 16 decode steps
BLOCK_SIZE = 4
LOGITS_TOL = 1e-4


@pytest.fixture(scope="module")
def model() -> Decoder:
    return Decoder(ModelConfig(seed=1))


@pytest.fixture(scope="module")
def dense_greedy(model: Decoder) -> Generation:
    return model.generate_dense(PROMPT, NEW_TOKENS, n=3)


def make_cache(model: Decoder, kind: str):
    if kind == "paged":
        return model.make_cache(num_blocks=24, block_size=BLOCK_SIZE)
    return model.make_cache(num_blocks=3 * 8, block_size=BLOCK_SIZE,
                            scheme="contiguous-oracle-first-fit", max_model_len=64)


def assert_matches(got: Generation, want: Generation) -> None:
    assert len(got.logits) == len(want.logits) == NEW_TOKENS
    for step, (a, b) in enumerate(zip(got.logits, want.logits, strict=True)):
        err = float((a.double() - b.double()).norm() / b.double().norm())
        assert err < LOGITS_TOL, f"step {step}: logits rel err {err}"
    assert got.token_ids == want.token_ids


def assert_blocks_hold_the_right_kv(model: Decoder, cache, gen: Generation) -> None:
    """Every cached token, found through the allocator's block table, is the dense K/V."""
    bs = cache.config.block_size
    for seq_id, new_tokens in zip(gen.seq_ids, gen.token_ids, strict=True):
        cached_tokens = PROMPT + new_tokens[:-1]  # the last sampled token was never fed
        assert cache.seq_len(seq_id) == len(cached_tokens)
        _, kvs = model.forward_dense(cached_tokens)
        table = cache.block_table(seq_id)
        for layer, (k, v) in enumerate(kvs):
            for i in range(len(cached_tokens)):
                block, offset = table[i // bs], i % bs
                torch.testing.assert_close(cache.k_caches[layer][block, offset], k[i],
                                           rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(cache.v_caches[layer][block, offset], v[i],
                                           rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["paged", "contiguous"])
def test_greedy_parallel_sampling_matches_dense(model, dense_greedy, kind: str) -> None:
    cache = make_cache(model, kind)
    got = model.generate(PROMPT, NEW_TOKENS, n=3, cache=cache, keep_in_cache=True)
    assert_matches(got, dense_greedy)
    assert_blocks_hold_the_right_kv(model, cache, got)
    if kind == "paged":
        # the prompt's 2 full blocks stay shared by all three; the partial third block was
        # copied on write by the first two samples to decode (the third writes in place)
        tables = [cache.block_table(s) for s in got.seq_ids]
        assert tables[0][:2] == tables[1][:2] == tables[2][:2]
        assert len({t[2] for t in tables}) == 3
        assert cache.num_copied_blocks == 2
        assert cache.usage().physical_blocks < cache.usage().logical_blocks
    else:
        assert cache.num_copied_blocks == 2 * 3  # each fork copies the prompt's 3 blocks
    cache.allocator.check_invariants()
    for seq_id in got.seq_ids:
        cache.free(seq_id)
    assert cache.usage().token_slots == 0


def test_temperature_sampling_matches_dense(model) -> None:
    cache = make_cache(model, "paged")
    got = model.generate(PROMPT, NEW_TOKENS, n=3, temperature=1.0, seed=3, cache=cache,
                         keep_in_cache=True)
    want = model.generate_dense(PROMPT, NEW_TOKENS, n=3, temperature=1.0, seed=3)
    assert_matches(got, want)
    assert len({tuple(t) for t in got.token_ids}) > 1, "samples should differ at T = 1"
    assert_blocks_hold_the_right_kv(model, cache, got)


def test_step_api_batches_sequences_of_different_lengths(model) -> None:
    # What an executor does: prefill two prompts together, then decode both together.
    cache = model.make_cache(num_blocks=16, block_size=BLOCK_SIZE)
    prompts = {"a": [1, 2, 3, 4, 5, 6, 7], "b": [9, 8]}
    logits = model.prefill(cache, list(prompts), list(prompts.values()))
    for i, prompt in enumerate(prompts.values()):
        dense, _ = model.forward_dense(prompt)
        torch.testing.assert_close(logits[i], dense[-1], rtol=1e-4, atol=1e-4)
    next_tokens = [11, 12]
    logits = model.decode(cache, list(prompts), next_tokens)
    for i, (prompt, t) in enumerate(zip(prompts.values(), next_tokens, strict=True)):
        dense, _ = model.forward_dense(prompt + [t])
        torch.testing.assert_close(logits[i], dense[-1], rtol=1e-4, atol=1e-4)
    # swap "a" out and back in: decoding continues as if nothing happened
    swapped = cache.swap_out(["a"])
    cache.swap_in(swapped)
    logits = model.decode(cache, ["a"], [13])
    dense, _ = model.forward_dense(prompts["a"] + [11, 13])
    torch.testing.assert_close(logits[0], dense[-1], rtol=1e-4, atol=1e-4)


def test_forward_prefill_runs_sequences_the_executor_allocated(model) -> None:
    cache = model.make_cache(num_blocks=8, block_size=BLOCK_SIZE)
    cache.add("x", 3, final_len=10)
    model.forward_prefill(cache, ["x"], [[4, 5, 6]])
    with pytest.raises(ValueError, match="holds 3 slots"):
        model.forward_prefill(cache, ["x"], [[4, 5, 6, 7]])
    with pytest.raises(ValueError, match="already in the cache"):  # prefill drives itself
        model.prefill(cache, ["x"], [[4, 5, 6]])


def test_failed_prefill_leaves_the_cache_as_it_was(model) -> None:
    cache = model.make_cache(num_blocks=8, block_size=BLOCK_SIZE)
    before = cache.allocator.snapshot()
    with pytest.raises(ValueError):  # the second prompt's token is out of the vocabulary
        model.prefill(cache, ["a", "b"], [[1, 2], [model.config.vocab_size]])
    assert cache.allocator.snapshot() == before


def test_cache_must_fit_the_model(model) -> None:
    other = Decoder(ModelConfig(num_layers=1))
    cache = other.make_cache(num_blocks=8, block_size=BLOCK_SIZE)
    with pytest.raises(ValueError, match="model needs"):
        model.prefill(cache, ["x"], [[1, 2]])


def test_bad_token_ids_and_config(model) -> None:
    cache = model.make_cache(num_blocks=8, block_size=BLOCK_SIZE)
    with pytest.raises(ValueError):
        model.prefill(cache, ["x"], [[model.config.vocab_size]])
    with pytest.raises(ValueError):
        ModelConfig(num_heads=3, num_kv_heads=2)
    with pytest.raises(ValueError):
        Sampler(temperature=-1.0, seed=0)


def test_weights_are_seeded() -> None:
    a, b, c = Decoder(ModelConfig(seed=5)), Decoder(ModelConfig(seed=5)), Decoder(
        ModelConfig(seed=6))
    assert torch.equal(a.lm_head, b.lm_head) and not torch.equal(a.lm_head, c.lm_head)
