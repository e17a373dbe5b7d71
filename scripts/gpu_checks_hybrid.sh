#!/usr/bin/env bash
# The GPU checks of issue 24 (hybrid models) in one command, kept small (NUM_REQUESTS,
# default 100) so that it leaves room beside scripts/gpu_checks.sh in one device slot.
# Written without a GPU at hand: its first run on one is still to come.
#   bash scripts/gpu_checks_hybrid.sh [OUT_DIR]
# 1. the sliding-window and hybrid-cache kernel tests on CUDA (the GPU-only bf16 case runs
#    instead of skipping),
# 2. measured vs simulated on a ~1B-parameter random-weight decoder with gpt-oss's layer
#    pattern (sliding window 128 on every other layer), schemes hybrid and all-full: the gap
#    must be 0 slots at every step while the sliding group gives blocks back.
# Outputs are named with the GPU and the date, beside scripts/gpu_checks.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
gpu=$(python -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
day=$(date -u +%Y-%m-%d)
out=${1:-figures/gpu/${gpu}_${day}_hybrid}
mkdir -p "$out"
echo "GPU: $gpu  date: $day  out: $out"
${TESTS_TIMEOUT:+timeout $TESTS_TIMEOUT} python -m pytest -q --tb=line -rfE \
    tests/kernels/test_kernels_sliding.py tests/kernels/test_kernels_hybrid.py \
    2>&1 | tee "$out/kernel_tests.txt" || echo "kernel tests: not all passed (see kernel_tests.txt)"
windows=$(python -c "print(','.join('128' if i % 2 == 0 else '0' for i in range(16)))")
python -m pagedsim.kernels.measure --schemes hybrid,all-full \
    --num-requests "${NUM_REQUESTS:-100}" --workload sharegpt --rate 20 --max-model-len 2048 \
    --layers 16 --windows "$windows" --hidden 2048 --heads 16 --kv-heads 4 --head-dim 128 \
    --intermediate 5632 --vocab 32000 --dtype bfloat16 --num-blocks 2048 --block-size 16 \
    --out "$out" | tee "$out/measure.txt"
