"""Planted bugs of lab 8's reference (never released): each is a misconception of
notebook 09 or a slip students make, and each must cost points in at least one of the
tasks named in ``caught_by``."""

from pagedsim.labs.mutants import Mutant

MUTANTS = [
    # "The formula's heads are attention heads": GQA ignored.
    Mutant(name="attention-heads", file="sizing_lab.py",
           old='int_field(text, "num_key_value_heads", default=num_heads)',
           new='int_field(text, "num_attention_heads")',
           caught_by=("lab8_1", "lab8_2")),
    # The head width taken as hidden_size / heads even where head_dim is given (Qwen3,
    # gpt-oss and Gemma 3 set a head_dim that is not that quotient).
    Mutant(name="head-dim-from-hidden-size", file="sizing_lab.py",
           old='head_dim = text.get("head_dim")', new='head_dim = None',
           caught_by=("lab8_1",)),
    # "MLA stores K and V": the latent counted twice.
    Mutant(name="mla-k-and-v", file="sizing_lab.py",
           old="return head_dim * dtype_bytes", new="return 2 * head_dim * dtype_bytes",
           caught_by=("lab8_2",)),
    # fp8 ignored: every value 2 bytes.
    Mutant(name="fp8-ignored", file="sizing_lab.py",
           old='"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}',
           new='"fp8": 2, "fp8_e4m3": 2, "fp8_e5m2": 2}',
           caught_by=("lab8_2",)),
    # "More GPUs always means more KV per GPU": heads divided past one (a fraction of a
    # head per GPU).
    Mutant(name="tp-splits-below-one-head", file="sizing_lab.py",
           old="max(1, kv_heads // tensor_parallel_size)",
           new="kv_heads / tensor_parallel_size",
           caught_by=("lab8_2",)),
    # The MLA latent split over the GPUs like the heads' values.
    Mutant(name="tp-splits-the-latent", file="sizing_lab.py",
           old='if kind == "mla" or tensor_parallel_size == 1:\n        return layer',
           new='if kind == "mla":\n        return (kind, 1, head_dim // tensor_parallel_size, 0)'
               '\n    if tensor_parallel_size == 1:\n        return layer',
           caught_by=("lab8_2",)),
    # "A sliding window saves memory on every layer".
    Mutant(name="window-on-every-layer", file="sizing_lab.py",
           old='kept = min(num_tokens, layer[3]) if layer[0] == "sliding" else num_tokens',
           new="kept = min(num_tokens, max(w for _, _, _, w in gpu_layers(config, 1)) or "
               "num_tokens)",
           caught_by=("lab8_3",)),
    # The window forgotten: sliding layers keep every token.
    Mutant(name="window-ignored", file="sizing_lab.py",
           old='kept = min(num_tokens, layer[3]) if layer[0] == "sliding" else num_tokens',
           new="kept = num_tokens",
           caught_by=("lab8_3",)),
    # A hybrid model taken as one group of all its layers.
    Mutant(name="hybrid-one-group", file="sizing_lab.py",
           old="    if len(by_kind) == 1:\n        return counts[0], list(by_kind.values())",
           new="    if True:\n        return len(layers), [list(range(len(layers)))]",
           caught_by=("lab8_4",)),
    # Every group's slots counted as the cache's tokens (gpt-oss's line doubles).
    Mutant(name="tokens-ignore-groups", file="sizing_lab.py",
           old="num_blocks // len(groups) * block_size", new="num_blocks * block_size",
           caught_by=("lab8_4",)),
    # A sliding group's request taken as long as a full group's.
    Mutant(name="sliding-request-full-length", file="sizing_lab.py",
           old='        if kind == "sliding":\n            return cdiv(min(',
           new='        if kind == "never":\n            return cdiv(min(',
           caught_by=("lab8_4",)),
    # The group size always the fewest layers of a kind (vLLM's 1.5x rule forgotten).
    Mutant(name="group-size-always-fewest", file="sizing_lab.py",
           old="if max(counts) < min(counts) * GROUP_SIZE_RATIO:",
           new="if False:",
           caught_by=("lab8_4",)),
]
