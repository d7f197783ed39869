"""Reading numbers from the environment, with one clear error per bad value."""

from __future__ import annotations

from collections.abc import Mapping


def number(
    env: Mapping[str, str],
    name: str,
    default: float,
    *,
    minimum: float = 0,
    integer: bool = False,
    error: type[ValueError] = ValueError,
) -> float:
    """``env[name]`` as a number >= ``minimum`` (a whole one when ``integer``); unset or
    blank: ``default``. A bad value raises ``error`` naming the variable."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise error(f"{name} must be a number, got {raw!r}") from None
    if value < minimum or value != value:  # value != value: NaN
        raise error(f"{name} must be >= {minimum}, got {raw!r}")
    if integer and value != int(value):
        raise error(f"{name} must be a whole number, got {raw!r}")
    return value
