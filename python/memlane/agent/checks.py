"""Argument checks shared by the agent loop's settings, limits and adapters."""

from __future__ import annotations

from memlane._memory import coerce
from memlane.errors import InvalidArgumentError


def _int(value: object, label: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(f"{label} must be an int >= {minimum}, got {value!r}")


def _seconds(value: object, label: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidArgumentError(f"{label} must be a number of seconds >= 0, got {value!r}")


def _time(value: object, label: str) -> float:
    """Unix seconds (a number or an aware datetime) that a datetime can hold: years 1
    to 9999 in UTC, as every time the agent stores or shows must be a date."""
    return coerce.timestamp(value, label)
