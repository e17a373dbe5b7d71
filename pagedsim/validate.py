"""Small argument checks shared by configs and allocators (one-line errors naming the value)."""

from __future__ import annotations

from numbers import Integral


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    """Return ``value`` as an int, or raise naming the bad value and what is valid."""
    if type(value) is int:  # the common case, without the slow abstract-class check
        if minimum is not None and value < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_fraction(name: str, value: object) -> float:
    """Return ``value``, a fraction in [0, 1) (a watermark: the share of a pool kept free),
    or raise naming the bad value and what is valid."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number in [0, 1), got {value!r}")
    if not 0 <= value < 1:  # (NaN fails this too)
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return value


def check_choice(name: str, value: object, choices: tuple[str, ...] | list[str]) -> str:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(map(str, choices))}")
    return str(value)


def shown_value(value: object) -> str:
    """``repr(value)`` for an error message, cut short: a 4,000-digit number is shown by
    its digit count, anything else at most 60 characters."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return f"a {len(str(abs(value))):,}-digit number"
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."
