"""``python -m pagedsim.kernels``: say which backend the kernels use, and why."""

from . import INFO

if __name__ == "__main__":
    print(f"backend={INFO.name} device={INFO.device} interpreter={INFO.interpreter}: {INFO.reason}")
