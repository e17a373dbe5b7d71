"""``python -m pagedsim.kernels``: say which backend the kernels use, and why."""

import argparse

from . import INFO

if __name__ == "__main__":
    argparse.ArgumentParser(
        prog="python -m pagedsim.kernels",
        description="Print which kernel backend pagedsim.kernels uses (Triton on CUDA, "
                    "Triton's CPU interpreter, or pure torch) and why. Choose one with "
                    "PAGEDSIM_KERNEL_BACKEND=triton|torch.").parse_args()
    print(f"backend={INFO.name} device={INFO.device} interpreter={INFO.interpreter}: {INFO.reason}")
