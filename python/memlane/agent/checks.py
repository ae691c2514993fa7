"""Argument checks shared by the agent loop's settings, limits and adapters."""

from __future__ import annotations

from memlane.errors import InvalidArgumentError


def _int(value: object, label: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(f"{label} must be an int >= {minimum}, got {value!r}")


def _seconds(value: object, label: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidArgumentError(f"{label} must be a number of seconds >= 0, got {value!r}")
