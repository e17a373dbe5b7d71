"""Byte units. pagedsim counts GPU memory in binary units throughout:
1 GiB = 2**30 bytes, as ``nvidia-smi`` and the vLLM paper's arithmetic do
(an "A100-80GB" has 80 GiB; the paper's "800 KB per token" is 800 KiB).
"""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


def format_bytes(num_bytes: float) -> str:
    """Human-readable binary size, e.g. ``format_bytes(524288) == '512 KiB'``."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.4g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
