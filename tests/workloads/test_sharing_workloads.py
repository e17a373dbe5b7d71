"""pagedsim.workloads.sharing_workloads: the sharing structure each generator promises, seen through
the block hashes a prefix cache keys on, and its wiring into experiments and the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pagedsim.cli import main
from pagedsim.experiments import WORKLOAD_NAMES, Experiment
from pagedsim.experiments.cache_replay import replay
from pagedsim.workloads.prompts import block_hashes, prompt_tokens
from pagedsim.workloads.sharing_workloads import (
    SHARING_WORKLOAD_NAMES,
    FewShotConfig,
    MultiTurnConfig,
    SystemPromptConfig,
    few_shot,
    multi_turn,
    sharing_workload,
    system_prompt,
)
from pagedsim.workloads.workload import WorkloadConfig, generate_workload

BLOCK = 16


def _common(a: list[int], b: list[int]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


@pytest.mark.parametrize("system_tokens", [96, 100, 15, 16, 17])
def test_system_prompt_shares_exactly_the_full_system_blocks(system_tokens: int) -> None:
    reqs = system_prompt(groups=3, per_group=5, system_tokens=system_tokens,
                         user_len_range=(20, 60), output_len_range=(1, 50), rate_per_s=2.0,
                         seed=1)
    assert len(reqs) == 15 and [r.request_id for r in reqs] == list(range(15))
    shared = system_tokens // BLOCK
    by_group: dict[int, list] = {}
    for r in reqs:
        by_group.setdefault(r.prefix_id, []).append(block_hashes(r, BLOCK))
    assert sorted(by_group) == [0, 1, 2] and all(len(v) == 5 for v in by_group.values())
    for g, hashes in by_group.items():
        for a in hashes:
            for b in hashes:
                if a is not b:
                    assert _common(a, b) == shared  # exactly: none after
                    assert not set(a[shared:]) & set(b)
        for other, hashes2 in by_group.items():
            if other != g:
                assert not set(hashes[0]) & set(hashes2[0])  # groups share nothing


def test_system_prompt_tokens_agree_with_pieces() -> None:
    a, b = [r for r in system_prompt(1, 2, 48, (5, 5), (1, 1), 1.0, 0)]
    assert (prompt_tokens(a)[:48] == prompt_tokens(b)[:48]).all()
    assert (prompt_tokens(a)[48:] != prompt_tokens(b)[48:]).any()


def test_multi_turn_prompt_starts_with_previous_prompt_and_output() -> None:
    reqs = multi_turn(conversations=6, turns=4, message_len_range=(1, 40),
                      output_len_range=(1, 40), rate_per_s=3.0, seed=2)
    assert len(reqs) == 24
    convs: dict[int, list] = {}
    for r in reqs:  # in arrival order, so in turn order
        convs.setdefault(r.prefix_id, []).append(r)
    assert all(len(v) == 4 for v in convs.values())
    for turns in convs.values():
        for prev, cur in zip(turns, turns[1:], strict=False):
            history = prev.prompt_len + prev.output_len
            assert cur.prompt_len > history
            # prev's prompt + output, as a prompt of its own: a true prefix of cur
            whole_prev = replace(prev, prompt_len=history, output_len=1,
                                 prompt_pieces=cur.prompt_pieces)
            want = block_hashes(whole_prev, BLOCK)
            assert block_hashes(cur, BLOCK)[:len(want)] == want
            assert block_hashes(cur, BLOCK)[:prev.prompt_len // BLOCK] == \
                block_hashes(prev, BLOCK)
            assert (prompt_tokens(cur)[:prev.prompt_len] == prompt_tokens(prev)).all()
    first = [t[0] for t in convs.values()]
    for a in first:
        for b in first:
            if a is not b:
                assert not set(block_hashes(a, BLOCK)) & set(block_hashes(b, BLOCK))


@pytest.mark.parametrize("shot_tokens,shots", [(32, 4), (10, 3)])
def test_few_shot_shares_the_shots(shot_tokens: int, shots: int) -> None:
    reqs = few_shot(num_requests=12, shot_tokens=shot_tokens, shots=shots,
                    question_len_range=(8, 30), output_len_range=(1, 20), rate_per_s=1.0,
                    seed=3)
    shared = shot_tokens * shots // BLOCK
    hashes = [block_hashes(r, BLOCK) for r in reqs]
    for i, a in enumerate(hashes):
        for b in hashes[i + 1:]:
            assert _common(a, b) == shared
            assert not set(a[shared:]) & set(b)


def test_few_shot_tasks_share_within_a_task_only() -> None:
    reqs = few_shot(40, 32, 2, (1, 10), (1, 10), 1.0, 0, tasks=3)
    assert {r.prefix_id for r in reqs} == {0, 1, 2}
    for a in reqs:
        for b in reqs:
            if a is not b:
                k = _common(block_hashes(a, BLOCK), block_hashes(b, BLOCK))
                assert k == (4 if a.prefix_id == b.prefix_id else 0)


@pytest.mark.parametrize("name", SHARING_WORKLOAD_NAMES)
def test_deterministic_and_rate_keeps_content(name: str) -> None:
    a = sharing_workload(name, 120, rate_per_s=2.0, seed=5)
    assert a == sharing_workload(name, 120, rate_per_s=2.0, seed=5)
    assert a != sharing_workload(name, 120, rate_per_s=2.0, seed=6)
    b = sharing_workload(name, 120, rate_per_s=7.0, seed=5)
    assert [replace(r, arrival_s=0.0) for r in a] == [replace(r, arrival_s=0.0) for r in b]
    assert len(a) == 120 and [r.request_id for r in a] == list(range(120))
    arrivals = [r.arrival_s for r in a]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    assert all(r.final_len <= 2048 for r in a)


@pytest.mark.parametrize("name", SHARING_WORKLOAD_NAMES)
def test_default_means_are_sharegpt_sized(name: str) -> None:
    reqs = sharing_workload(name, 2000)
    mean_prompt = sum(r.prompt_len for r in reqs) / len(reqs)
    assert 140 < mean_prompt < 185  # ShareGPT's 161


def test_piece_ids_of_roles_are_disjoint_and_unique_where_unshared() -> None:
    reqs = sharing_workload("system-prompt", 200)
    owner: dict[int, int] = {}
    for r in reqs:
        for p in r.prompt_pieces[96 // 16:]:  # past the 96-token system part
            assert p not in owner, "a request's own piece appears twice"
            owner[p] = r.request_id


@pytest.mark.parametrize("name", SHARING_WORKLOAD_NAMES)
def test_replay_hits(name: str) -> None:
    assert replay(sharing_workload(name, 300), BLOCK).hit_rate > 0


def test_replay_sharegpt_hits_nothing() -> None:
    reqs = generate_workload(WorkloadConfig(num_requests=300))
    assert replay(reqs, BLOCK).hit_rate == 0


@pytest.mark.parametrize("config,kwargs,needle", [
    (SystemPromptConfig, {"groups": 0}, "groups must be >= 1, got 0"),
    (SystemPromptConfig, {"system_tokens": 2000}, "over max_model_len 2048"),
    (SystemPromptConfig, {"user_len_range": (5, 2)}, "low <= high"),
    (SystemPromptConfig, {"rate_per_s": 0}, "rate_per_s must be >= 1e-06 requests/s"),
    (MultiTurnConfig, {"turns": 40}, "multi-turn workload: longest request"),
    (MultiTurnConfig, {"piece_tokens": 0}, "piece_tokens must be >= 1, got 0"),
    (FewShotConfig, {"shots": -1}, "shots must be >= 1, got -1"),
    (FewShotConfig, {"n": 2, "beam_width": 2}, "cannot both exceed 1"),
])
def test_config_errors(config: type, kwargs: dict, needle: str) -> None:
    with pytest.raises((ValueError, TypeError), match=needle.replace("(", r"\(")):
        config(**kwargs)


def test_experiment_names_them() -> None:
    assert set(SHARING_WORKLOAD_NAMES) <= set(WORKLOAD_NAMES)
    exp = Experiment(workload="multi-turn", num_requests=40)
    assert not exp.is_trace
    reqs = exp.requests()
    assert len(reqs) == 40 and reqs[0].prompt_pieces is not None


def test_cli_compare_system_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--workload", "system-prompt", "--num-requests", "50",
                 "--jobs", "1", "--no-write", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and rows and "scheme" in rows[0]


@pytest.mark.parametrize("name", SHARING_WORKLOAD_NAMES)
def test_cli_cache_replay_by_name(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache-replay", name, "--num-requests", "200", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["num_requests"] == 200 and row["block_size"] == 16 and row["hit_rate"] > 0


def test_cli_cache_replay_bad_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache-replay", "few-shot", "--num-requests", "0"]) != 0
    assert "--num-requests" in capsys.readouterr().err


def test_readme_quotes_the_hit_rates_this_code_computes() -> None:
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    quoted = re.search(r"system-prompt hits ([\d.]+)%, multi-turn ([\d.]+)%, few-shot "
                       r"([\d.]+)% \(ShareGPT: 0%\)", readme)
    assert quoted, "README's sharing-workload sentence changed shape"
    computed = [round(100 * replay(sharing_workload(n, 2000, seed=0), 16).hit_rate, 1)
                for n in ("system-prompt", "multi-turn", "few-shot")]
    assert [float(x) for x in quoted.groups()] == computed


@pytest.mark.parametrize("make, needle", [
    (lambda: SystemPromptConfig(groups=10**6, per_group=10**6), "groups x per_group"),
    (lambda: MultiTurnConfig(conversations=10**7, turns=4), "conversations x turns"),
    (lambda: FewShotConfig(num_requests=2**53), "num_requests"),
])
def test_more_requests_than_a_run_simulates_is_refused_before_allocating(make, needle):
    """Issue 22: a config of 10**12 requests would ask numpy for terabytes; it is refused
    with the 10M limit compare, sweep and cache-replay share."""
    with pytest.raises(ValueError, match=f"{needle} must be <= 10,000,000"):
        make()
