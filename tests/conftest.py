"""Shared test configuration: one thread per worker for torch, and hypothesis profiles.

Each pytest-xdist worker is one process per core, so torch in it (and in the notebook
kernels and subprocesses it starts) runs its operations on one thread
(``OMP_NUM_THREADS=1``, unless set already): with its default of a thread per core, two
workers' tiny tensor operations wait on each other's threads, and a kernel test took ten
times as long.

``ci`` (the default) is what ``python -m pytest`` and ``.ci/run`` use: derandomized, so
every run of the same commit draws the same examples and gives the same result (no
example database is read or written either), and sized so the whole suite stays within a
few minutes on a 2-core machine. ``fresh`` draws new examples on every run with the same
sizes (``--hypothesis-seed=N`` repeats one such run); ``dev`` explores much more, with
fresh examples and the example database in ``.hypothesis/``. Choose with
``HYPOTHESIS_PROFILE=fresh python -m pytest`` (tests/README.md says more). A failure a
fresh run finds goes into its test as an explicit ``@example``, so ``ci`` keeps it.

The test files that hold tests marked ``slow`` run first, those with the most of them
before the others (each file's own order kept):
with pytest-xdist's ``--dist loadfile`` (pyproject's addopts) the long files start at
once on every worker, and the many short ones fill in behind them, so no worker is
left with a long file at the end.
"""

from __future__ import annotations

import os
from collections import Counter

# Before anything imports torch (it reads this once, at import).
os.environ.setdefault("OMP_NUM_THREADS", "1")

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

PROFILE_ENV = "HYPOTHESIS_PROFILE"

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,  # the examples follow from each test's own code: same commit, same run
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fresh",
    settings.get_profile("ci"),
    derandomize=False,
    database=None,
)
# Every field that differs from hypothesis's defaults is set here, not inherited: with CI
# set in the environment, hypothesis loads its own "ci" profile first (derandomized, no
# database), and a profile registered without a value would take that one.
settings.register_profile(
    "dev",
    max_examples=500,
    deadline=None,
    derandomize=False,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get(PROFILE_ENV, "ci"))


def pytest_collection_modifyitems(session, config, items):
    """Files with ``slow`` tests first, those with the most of them before the others;
    otherwise the order collected (a stable sort)."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


def pytest_report_header(config):
    """The profile in the header (hypothesis prints its own only with -v)."""
    current = settings.default
    how = ("derandomized: the same examples on every run" if current.derandomize
           else "fresh examples on every run (--hypothesis-seed=N repeats one)")
    return (f"hypothesis profile {settings.get_current_profile_name()!r} "
            f"(max_examples={current.max_examples}, {how}; set {PROFILE_ENV} to change)")
