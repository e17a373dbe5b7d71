"""The README's `python -m pytest` gives the same result on every run of the same commit
(issue 37, item 7): the default hypothesis profile is derandomized and reads no example
database, and the exploring profiles stay available."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

HYPOTHESIS_PROFILE = "HYPOTHESIS_PROFILE"


def test_the_default_profile_is_derandomized_and_keeps_no_database() -> None:
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None
    if "HYPOTHESIS_PROFILE" not in os.environ:
        assert settings.get_current_profile_name() == "ci"


def test_the_exploring_profiles_draw_fresh_examples() -> None:
    fresh, dev = settings.get_profile("fresh"), settings.get_profile("dev")
    assert not fresh.derandomize and fresh.max_examples == settings.get_profile("ci").max_examples
    assert not dev.derandomize and dev.max_examples > fresh.max_examples


def _profiles_under(env: dict[str, str]) -> str:
    """The three profiles as a fresh interpreter registers them from tests/conftest.py."""
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('conftest', sys.argv[1])\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "from hypothesis import settings\n"
        "for name in ('ci', 'fresh', 'dev'):\n"
        "    p = settings.get_profile(name)\n"
        "    print(name, p.derandomize, p.max_examples, type(p.database).__name__)\n"
    )
    conftest = Path(__file__).resolve().parents[1] / "conftest.py"
    done = subprocess.run([sys.executable, "-c", code, str(conftest)], env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout


def test_the_profiles_do_not_depend_on_a_ci_variable() -> None:
    """CI machines set CI=true, and hypothesis then loads its own derandomized profile
    first; a profile that inherited a value would change under it (a CI run failed so)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("CI", "TF_BUILD", "GITHUB_ACTIONS", HYPOTHESIS_PROFILE)}
    plain, under_ci = _profiles_under(base), _profiles_under({**base, "CI": "true"})
    assert plain == under_ci
    assert "dev False 500 DirectoryBasedExampleDatabase" in plain
