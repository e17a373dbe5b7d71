"""Model and GPU specifications: per-layer KV specs, Hugging Face configs,
presets, and the KV budget (as the seed computes it, and as vLLM v1 does)."""
