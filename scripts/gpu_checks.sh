#!/usr/bin/env bash
# Every GPU check in one command, sized for a ~10-minute slot on one NVIDIA GPU:
#   bash scripts/gpu_checks.sh [OUT_DIR]
# 1. the kernel tests on CUDA (the GPU-only ones run instead of skipping),
# 2. the decode-attention benchmark (paged vs contiguous tables vs SDPA) -> CSV + PNG,
# 3. measured vs simulated on a ~1B-parameter random-weight decoder, several hundred
#    requests, with the kv_budget prediction held against torch.cuda.mem_get_info.
# Outputs are named with the GPU and the date; commit them with this command line.
set -euo pipefail
cd "$(dirname "$0")/.."
gpu=$(python -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
day=$(date -u +%Y-%m-%d)
out=${1:-figures/gpu/${gpu}_${day}}
mkdir -p "$out"
echo "GPU: $gpu  date: $day  out: $out"
# A failing kernel test must not stop the benchmarks below: its summary lands in the file.
${TESTS_TIMEOUT:+timeout $TESTS_TIMEOUT} python -m pytest -q --tb=line -rfE \
    tests/kernels/test_kernels_attention.py tests/kernels/test_kernels_cache_ops.py tests/kernels/test_kernels_bench.py \
    2>&1 | tee "$out/kernel_tests.txt" || echo "kernel tests: not all passed (see kernel_tests.txt)"
python -m pagedsim.kernels.bench --out "$out/bench.csv" --plot "$out/bench.png" --max-minutes "${BENCH_MINUTES:-4}" \
    | tee "$out/bench.txt"
python -m pagedsim.kernels.measure --schemes paged,contiguous-oracle,contiguous-max \
    --num-requests 400 --workload sharegpt --rate 20 --max-model-len 2048 \
    --layers 16 --hidden 2048 --heads 16 --kv-heads 4 --head-dim 128 --intermediate 5632 \
    --vocab 32000 --dtype bfloat16 --num-blocks 4096 --block-size 16 --budget \
    --out "$out" | tee "$out/measure.txt"
