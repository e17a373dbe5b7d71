"""Bad input raises a clear ValueError before any kernel runs; the backend choice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from kernels_helpers import BACKENDS, device_for, make_paged_batch

from pagedsim import kernels

REPO = Path(__file__).resolve().parents[2]


def good_args(backend_name: str) -> dict:
    b = make_paged_batch([5, 12], num_kv_heads=2, group=2, head_dim=32, block_size=4,
                         dtype=torch.float32, seed=0, device=device_for(backend_name))
    return dict(q=b.q, k_cache=b.k_cache, v_cache=b.v_cache, block_tables=b.block_tables,
                seq_lens=b.seq_lens)


def with_(args: dict, **changes) -> dict:
    return {**args, **changes}


BAD_ATTENTION_INPUTS = {
    "k/v shape": lambda a: with_(a, v_cache=a["v_cache"][:-1]),
    "q/cache dtype": lambda a: with_(a, q=a["q"].half()),
    "k/v dtype": lambda a: with_(a, v_cache=a["v_cache"].double()),
    "int dtype": lambda a: with_(a, q=a["q"].long(), k_cache=a["k_cache"].long(),
                                 v_cache=a["v_cache"].long()),
    "head_dim mismatch": lambda a: with_(a, q=torch.cat([a["q"], a["q"]], dim=2)),
    "head_dim not a power of two": lambda a: with_(
        a, q=a["q"][..., :24], k_cache=a["k_cache"][..., :24], v_cache=a["v_cache"][..., :24]),
    "heads not a multiple": lambda a: with_(a, q=a["q"][:, :3]),
    "seq count": lambda a: with_(a, seq_lens=a["seq_lens"][:1]),
    "table dtype": lambda a: with_(a, block_tables=a["block_tables"].long()),
    "seq_lens dtype": lambda a: with_(a, seq_lens=a["seq_lens"].long()),
    "q rank": lambda a: with_(a, q=a["q"][0]),
    "block table out of range": lambda a: with_(
        a, block_tables=a["block_tables"].clone().index_fill_(1, torch.tensor([0]).to(
            a["block_tables"].device), a["k_cache"].shape[0])),
    "negative block id": lambda a: with_(
        a, block_tables=a["block_tables"].clone().index_fill_(1, torch.tensor([0]).to(
            a["block_tables"].device), -1)),
    "seq_len longer than its table": lambda a: with_(
        a, seq_lens=a["seq_lens"] + a["block_tables"].shape[1] * a["k_cache"].shape[1]),
    "seq_len zero": lambda a: with_(a, seq_lens=a["seq_lens"] * 0),
    "device": lambda a: with_(a, q=a["q"].to("meta")),
    "not a tensor": lambda a: with_(a, q=a["q"].tolist()),
}


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("problem", sorted(BAD_ATTENTION_INPUTS))
def test_bad_attention_input_raises_before_running(backend_name: str, problem: str) -> None:
    args = good_args(backend_name)
    kernels.paged_attention(**args, backend=backend_name)  # the unmodified inputs are fine
    bad = BAD_ATTENTION_INPUTS[problem](args)
    q = bad["q"]
    out = None
    if isinstance(q, torch.Tensor) and q.device.type != "meta" and q.dtype.is_floating_point:
        out = torch.full_like(q, float("nan"))
    with pytest.raises(ValueError):
        kernels.paged_attention(**bad, out=out, backend=backend_name)
    if out is not None:
        assert out.isnan().all(), "a kernel ran before the error was raised"


def test_out_of_range_message_names_the_entry() -> None:
    args = good_args(BACKENDS[-1])
    tables = args["block_tables"].clone()
    tables[1, 2] = 999
    with pytest.raises(ValueError, match=r"block_tables\[1, 2\] = 999"):
        kernels.paged_attention(**with_(args, block_tables=tables))


def test_unused_table_entries_are_not_checked() -> None:
    # past a sequence's last block the table may hold anything (vLLM pads with -1 or 0)
    args = good_args(BACKENDS[-1])
    assert (args["block_tables"][0, 2:] == -1).all()  # seq 0 has 5 tokens = 2 blocks of 4
    kernels.paged_attention(**args)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_bad_write_kv_input(backend_name: str) -> None:
    device = device_for(backend_name)
    k_cache = torch.randn(4, 4, 2, 32, device=device)
    v_cache = torch.randn_like(k_cache)
    k = torch.randn(3, 2, 32, device=device)
    v = torch.randn_like(k)
    before = k_cache.clone()
    slots = torch.tensor([0, 5, 15], device=device)
    cases = [
        (k_cache, v_cache, k, v, torch.tensor([0, 5, 16], device=device)),  # past the end
        (k_cache, v_cache, k, v, torch.tensor([0, 5, -2], device=device)),  # only -1 skips
        (k_cache, v_cache, k, v, torch.tensor([0, 5, 5], device=device)),  # one slot twice
        (k_cache, v_cache, k, v, slots[:2]),  # count mismatch
        (k_cache, v_cache, k, v, slots.float()),  # dtype
        (k_cache, v_cache, k.half(), v.half(), slots),  # dtype vs cache
        (k_cache, v_cache, k[:, :1], v[:, :1], slots),  # kv heads
        (k_cache, v_cache[:, :2], k, v, slots),  # cache shapes
    ]
    for case in cases:
        with pytest.raises(ValueError):
            kernels.write_kv(*case, backend=backend_name)
    assert torch.equal(k_cache, before)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_bad_copy_blocks_input(backend_name: str) -> None:
    device = device_for(backend_name)
    k_cache = torch.randn(4, 4, 2, 32, device=device)
    v_cache = torch.randn_like(k_cache)
    before = k_cache.clone()
    for pairs in ([(0, 4)], [(-1, 2)], [(0, 1), (2, 1)], [(0, 1), (1, 2)], [[0, 1, 2]]):
        with pytest.raises(ValueError):
            kernels.copy_blocks(k_cache, v_cache, pairs, backend=backend_name)
    with pytest.raises(ValueError):  # a non-contiguous cache view
        kernels.copy_blocks(k_cache[:, :, :1], v_cache[:, :, :1], [(0, 1)], backend=backend_name)
    assert torch.equal(k_cache, before)


def test_unknown_backend_argument() -> None:
    args = good_args(BACKENDS[-1])
    with pytest.raises(ValueError, match="backend"):
        kernels.paged_attention(**args, backend="cuda")


def _import_kernels_with(env_value: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PAGEDSIM_KERNEL_BACKEND": env_value}
    env.pop("TRITON_INTERPRET", None)
    code = ("import os; from pagedsim import kernels; "
            "print(kernels.BACKEND, kernels.DEVICE, os.environ.get('TRITON_INTERPRET'))")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_environment_variable_overrides_backend() -> None:
    done = _import_kernels_with("torch")
    assert done.returncode == 0, done.stderr
    name, device, interpret = done.stdout.split()
    assert name == "torch"
    assert device == ("cuda" if torch.cuda.is_available() else "cpu")
    if kernels.INFO.triton_installed and not torch.cuda.is_available():
        assert interpret == "1"  # still set, so backend="triton" works per call

    bad = _import_kernels_with("tpu")
    assert bad.returncode != 0 and "PAGEDSIM_KERNEL_BACKEND" in bad.stderr


def test_default_backend_reports_itself() -> None:
    assert kernels.backend_name() == kernels.BACKEND in kernels.BACKENDS
    if kernels.INFO.triton_installed:
        assert os.environ.get("PAGEDSIM_KERNEL_BACKEND") or kernels.BACKEND == "triton"
        assert kernels.INFO.interpreter == (not torch.cuda.is_available())
    else:
        assert kernels.BACKEND == "torch"


def test_without_triton_the_torch_backend_works() -> None:
    # As on macOS: triton cannot be imported (a None entry in sys.modules blocks it).
    code = "\n".join([
        "import sys; sys.modules['triton'] = None",
        "import torch",
        "from pagedsim import kernels",
        "from pagedsim.kernels.model import Decoder, ModelConfig",
        "assert kernels.BACKEND == 'torch' and not kernels.INFO.triton_installed",
        "m = Decoder(ModelConfig(device='cpu'))",
        "g = m.generate([1, 2, 3], 3, n=2)",
        "d = m.generate_dense([1, 2, 3], 3, n=2)",
        "assert g.token_ids == d.token_ids, (g.token_ids, d.token_ids)",
        "try:",
        "    kernels.backend.resolve('triton')",
        "except ValueError:",
        "    print('refused')",
    ])
    env = {k: v for k, v in os.environ.items() if k != "PAGEDSIM_KERNEL_BACKEND"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"
    notes = [ln for ln in done.stderr.splitlines() if "triton is not installed" in ln]
    assert len(notes) == 1  # one clear line, once
