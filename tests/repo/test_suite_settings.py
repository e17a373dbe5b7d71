"""The README's `python -m pytest` gives the same result on every run of the same commit
(issue 37, item 7): the default hypothesis profile is derandomized and reads no example
database, and the exploring profiles stay available."""

from __future__ import annotations

import os

from hypothesis import settings


def test_the_default_profile_is_derandomized_and_keeps_no_database() -> None:
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None
    if "HYPOTHESIS_PROFILE" not in os.environ:
        assert settings.get_current_profile_name() == "ci"


def test_the_exploring_profiles_draw_fresh_examples() -> None:
    fresh, dev = settings.get_profile("fresh"), settings.get_profile("dev")
    assert not fresh.derandomize and fresh.max_examples == settings.get_profile("ci").max_examples
    assert not dev.derandomize and dev.max_examples > fresh.max_examples
