"""The parameter count from the architecture (pagedsim.models.param_count) against
published counts, a config.json against the preset of the same model, and MoE weight
streaming by the experts a step's tokens touch."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pagedsim.cli import main
from pagedsim.engine.cost import CostModel
from pagedsim.models.hf_config import load_config
from pagedsim.models.param_count import ParamCount
from pagedsim.models.specs import get_gpu, get_model

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"

#: Published parameter counts (billions) and where they are published. ``total``: every
#: parameter; ``active``: per token (MoE); ``non_embedding``: total less the input
#: embeddings and the LM head; ``active_no_embedding``: active less the input embedding
#: table (gpt-oss's card counts the unembedding but not the embedding as active).
#: ``digits``: the decimals the source gives; the tolerance is 1% plus half its last
#: digit (Qwen3-30B-A3B's 3.3B activated is 3.353B counted, DeepSeek-V3's 37B 37.55B:
#: their cards cut the figure short).
PUBLISHED = [
    ("llama-3.1-8b.json", "total", 8.03, 2,
     "https://huggingface.co/meta-llama/Llama-3.1-8B (model page: 8.03B params)"),
    ("qwen3-8b.json", "total", 8.2, 1,
     "https://huggingface.co/Qwen/Qwen3-8B (model card: 8.2B parameters)"),
    ("qwen3-8b.json", "non_embedding", 6.95, 2,
     "https://huggingface.co/Qwen/Qwen3-8B (model card: 6.95B non-embedding)"),
    ("qwen3-14b.json", "total", 14.8, 1,
     "https://huggingface.co/Qwen/Qwen3-14B (model card: 14.8B parameters)"),
    ("qwen3-14b.json", "non_embedding", 13.2, 1,
     "https://huggingface.co/Qwen/Qwen3-14B (model card: 13.2B non-embedding)"),
    ("qwen2-7b-instruct.json", "total", 7.62, 2,
     "https://huggingface.co/Qwen/Qwen2-7B-Instruct (model page: 7.62B params)"),
    ("mistral-7b-v0.1.json", "total", 7.24, 2,
     "https://huggingface.co/mistralai/Mistral-7B-v0.1 (model page: 7.24B params)"),
    ("mixtral-8x7b-v0.1.json", "total", 46.7, 1,
     "https://mistral.ai/news/mixtral-of-experts (46.7B total parameters)"),
    ("mixtral-8x7b-v0.1.json", "active", 12.9, 1,
     "https://mistral.ai/news/mixtral-of-experts (12.9B parameters per token)"),
    ("qwen3-30b-a3b.json", "total", 30.5, 1,
     "https://huggingface.co/Qwen/Qwen3-30B-A3B (model card: 30.5B in total)"),
    ("qwen3-30b-a3b.json", "active", 3.3, 1,
     "https://huggingface.co/Qwen/Qwen3-30B-A3B (model card: 3.3B activated)"),
    ("qwen3-30b-a3b.json", "non_embedding", 29.9, 1,
     "https://huggingface.co/Qwen/Qwen3-30B-A3B (model card: 29.9B non-embedding)"),
    ("gpt-oss-120b.json", "total", 116.83, 2,
     "gpt-oss-120b & gpt-oss-20b model card, arXiv:2508.10925, Table 1 (116.83B)"),
    ("gpt-oss-120b.json", "active_no_embedding", 5.13, 2,
     "gpt-oss model card, arXiv:2508.10925, Table 1 (5.13B active per token)"),
    ("gpt-oss-20b.json", "total", 20.91, 2,
     "gpt-oss model card, arXiv:2508.10925, Table 1 (20.91B)"),
    ("gpt-oss-20b.json", "active_no_embedding", 3.61, 2,
     "gpt-oss model card, arXiv:2508.10925, Table 1 (3.61B active per token)"),
    ("deepseek-v3.json", "total", 671, 0,
     "DeepSeek-V3 Technical Report, arXiv:2412.19437, abstract (671B total; the 685B on "
     "its model page adds the 14B multi-token-prediction module)"),
    ("deepseek-v3.json", "active", 37, 0,
     "DeepSeek-V3 Technical Report, arXiv:2412.19437, abstract (37B activated per token)"),
]


def _count(p: ParamCount, kind: str) -> int:
    return {"total": p.total, "active": p.active,
            "non_embedding": p.total - p.embedding * 2,  # all these have untied heads
            "active_no_embedding": p.active - p.embedding}[kind]


@pytest.mark.parametrize(("config", "kind", "billions", "digits", "source"), PUBLISHED)
def test_architecture_count_matches_the_published_one(config: str, kind: str,
                                                      billions: float, digits: int,
                                                      source: str) -> None:
    params = load_config(CONFIGS / config).params
    assert params is not None, config
    got = _count(params, kind) / 1e9
    tolerance = 0.01 * billions + 0.5 * 10.0 ** -digits
    assert abs(got - billions) <= tolerance, f"{config} {kind}: {got:.3f}B vs {source}"


def test_exact_counts_of_two_dense_models() -> None:
    """Summed by hand from the configs (embeddings 128256 x 4096 twice, 32 layers of
    attention 41,943,040 + MLP 176,160,768 + norms 8,192, final norm 4,096), and Qwen3-14B
    x 2 bytes = its safetensors index's total_size, 29,536,614,400."""
    assert load_config(CONFIGS / "llama-3.1-8b.json").params.total == 8_030_261_248
    assert load_config(CONFIGS / "qwen3-14b.json").params.total * 2 == 29_536_614_400


#: Sample configs and the preset of the same model (every preset with a full sample).
SAME_MODEL = [("llama-3.1-8b.json", "llama-3.1-8b"), ("qwen3-8b.json", "qwen3-8b"),
              ("qwen3-14b.json", "qwen3-14b"), ("mistral-7b-v0.1.json", "mistral-7b-v0.1"),
              ("qwen3-30b-a3b.json", "qwen3-30b-a3b"), ("gpt-oss-20b.json", "gpt-oss-20b"),
              ("gpt-oss-120b.json", "gpt-oss-120b"), ("deepseek-v3.json", "deepseek-v3")]
#: Steps: (prefill tokens, decode sequences, cached tokens read).
STEPS = [(0, 1, 1000), (0, 8, 8000), (0, 64, 64_000), (0, 256, 256_000), (2048, 0, 0),
         (512, 32, 40_000)]


@pytest.mark.parametrize(("config", "preset"), SAME_MODEL)
def test_a_config_and_its_preset_give_the_same_step_times(config: str, preset: str) -> None:
    """With the same weights (the preset's, as --weights-gb gives them) every step takes
    the same time; a bf16 config without an index counts its own weights within 0.3% of
    the preset's published size."""
    cfg, pre = load_config(CONFIGS / config), get_model(preset)
    assert cfg.params == pre.params and cfg.bytes_per_token == pre.bytes_per_token
    gpu = get_gpu("h200-141gb")
    a = CostModel(replace(cfg, weights_bytes=pre.weights_bytes), gpu)
    b = CostModel(pre, gpu)
    assert [a.step_time_s(*s) for s in STEPS] == [b.step_time_s(*s) for s in STEPS]
    if cfg.weights_bytes:  # counted from the architecture (bf16, not quantized)
        assert cfg.weights_bytes == pytest.approx(pre.weights_bytes, rel=3e-3)


def test_the_issue_case_config_json_streams_its_weights(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """Meta-Llama-3.1-8B's config.json with --weights-gb 14.96 gave a TPOT of 2.1 ms
    (no weights streamed) against 11.1 ms for the preset; now the runs are identical."""
    rows = []
    for model in (str(CONFIGS / "llama-3.1-8b.json"), "llama-3.1-8b"):
        assert main(["compare", "--model", model, "--gpu", "a100-80gb", "--weights-gb",
                     "14.96", "--schemes", "paged", "--rate", "4", "--num-requests", "60",
                     "--json", "--jobs", "1", "--no-write", "--quiet"]) == 0
        row = json.loads(capsys.readouterr().out)[0]
        rows.append({k: v for k, v in row.items() if k not in ("model", "label")})
    assert rows[0] == rows[1]
    assert rows[0]["mean_tpot_s"] > 0.0085  # 14.96 GiB at 2.039 TB/s is 7.9 ms, + 2 ms


def test_weights_gb_reaches_the_cost_model(capsys: pytest.CaptureFixture[str]) -> None:
    """--weights-gb sizes the pool and the weights each step streams: doubling them
    slows a memory-bound decode."""
    tpot = []
    for gib in ("15", "30"):
        assert main(["compare", "--model", "llama-3.1-8b", "--gpu", "a100-80gb",
                     "--weights-gb", gib, "--schemes", "paged", "--rate", "1",
                     "--num-requests", "20", "--json", "--jobs", "1", "--no-write",
                     "--quiet"]) == 0
        tpot.append(json.loads(capsys.readouterr().out)[0]["mean_tpot_s"])
    assert tpot[1] > 1.7 * tpot[0]


def test_moe_streams_the_experts_its_tokens_touch() -> None:
    """One token streams exactly the active parameters' share of the weights; large
    batches all of them; in between the expected distinct experts E(1 - (1 - k/E)^t)."""
    m = load_config(CONFIGS / "mixtral-8x7b-v0.1.json")
    p = m.params
    cost = CostModel(m, get_gpu("h100-80gb"))
    assert p.experts_touched(1) == pytest.approx(2)
    assert p.experts_touched(4) == pytest.approx(8 * (1 - 0.75 ** 4))
    assert cost.weights_read(1) == round(m.weights_bytes * p.active / p.total)
    assert cost.weights_read(512) == m.weights_bytes
    reads = [cost.weights_read(t) for t in (1, 2, 4, 8, 16, 64)]
    assert reads == sorted(reads) and reads[0] < 0.3 * m.weights_bytes
    # flops: a token passes through its two experts, not all eight
    assert cost.step_flops(0, 1, 0) == 2 * p.active
    dense = load_config(CONFIGS / "llama-3.1-8b.json")
    dense_cost = CostModel(dense, get_gpu("h100-80gb"))
    assert dense_cost.weights_read(1) == dense_cost.weights_read(512) == dense.weights_bytes


def test_a_quantized_config_leaves_its_weights_to_the_flag() -> None:
    """gpt-oss's MXFP4 checkpoint is not 2 bytes a parameter: the count is kept for the
    flops, the size is unknown (the budget asks for --weights-gb)."""
    m = load_config(CONFIGS / "gpt-oss-120b.json")
    assert m.weights_bytes == 0 and m.params is not None
    assert "quantization_config" in m.weights_from


def test_bad_or_absent_architecture_fields() -> None:
    """A bad field is a ConfigError naming it; zero experts is a dense model; a missing
    field leaves the count (and the weights) unknown, saying which."""
    from pagedsim.models.hf_config import ConfigError, model_from_config

    cfg = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
    with pytest.raises(ConfigError, match="vocab_size must be a whole number"):
        model_from_config({**cfg, "vocab_size": "128k"}, "x")
    dense = model_from_config({**cfg, "num_local_experts": 0}, "x")
    assert dense.params == load_config(CONFIGS / "llama-3.1-8b.json").params
    trimmed = model_from_config({k: v for k, v in cfg.items() if k != "intermediate_size"},
                                "x")
    assert trimmed.params is None and trimmed.weights_bytes == 0
    assert trimmed.weights_from == ("unknown: the config has no intermediate_size to count "
                                    "the parameters")


def test_an_index_is_compared_with_the_architecture(tmp_path: Path) -> None:
    """Beside a safetensors index the weights are the index's, and the note says how
    they compare with the architecture's count (Qwen3-14B's index: exactly 2 bytes a
    parameter; an index of half that reads as quantized)."""
    from pagedsim.models.hf_config import weights_note

    (tmp_path / "config.json").write_text((CONFIGS / "qwen3-14b.json").read_text())
    index = tmp_path / "model.safetensors.index.json"
    for total, ratio in ((29_536_614_400, "1.000x"), (14_768_307_200, "0.500x")):
        index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": {}}))
        m = load_config(tmp_path)
        assert m.weights_bytes == total and m.weights_from == "model.safetensors.index.json"
        note = weights_note(m)
        assert note is not None and f"the index holds {ratio} that" in note
        assert "14,768,307,200 parameters" in note
    assert weights_note(get_model("llama-3.1-8b")) is None  # a preset: nothing to say
