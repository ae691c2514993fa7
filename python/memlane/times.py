"""Times as memlane stores them (unix seconds, a float) and the datetimes they stand for.

``check`` refuses a time a ``datetime`` cannot hold (before year 1
or after year 9999, in UTC), so every stored time can be shown as a date.
``moment`` and ``stamp`` turn a stored time into a datetime or text without
ever raising: a store written before the check existed may hold any float.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, tzinfo

from memlane.errors import InvalidArgumentError, shown

__all__ = ["END_TIME", "MIN_TIME", "check", "moment", "stamp"]

#: 0001-01-01 00:00:00 UTC, the earliest time a datetime holds.
MIN_TIME = -62135596800.0
#: 10000-01-01 00:00:00 UTC: every time before it (and not before ``MIN_TIME``) is
#: a datetime.
END_TIME = 253402300800.0
# The last float before END_TIME: its microseconds round to 9999-12-31 23:59:59.99997.
_LAST = math.nextafter(END_TIME, 0.0)


def check(seconds: float, label: str) -> float:
    """``seconds`` if a datetime can hold it (years 1 to 9999, UTC), else
    ``InvalidArgumentError`` naming ``label``."""
    if not MIN_TIME <= seconds < END_TIME:  # NaN fails too
        raise InvalidArgumentError(
            f"{label} must be a time from the year 1 to 9999 (unix seconds from "
            f"{MIN_TIME:.0f} to below {END_TIME:.0f}), got {shown(seconds)}"
        )
    return seconds


def moment(seconds: float, tz: tzinfo | None = UTC) -> datetime:
    """The datetime of unix ``seconds`` in ``tz`` (None: naive local time), clamped to the
    range a datetime holds; NaN counts as the earliest time."""
    x = MIN_TIME if seconds != seconds else min(max(seconds, MIN_TIME), _LAST)  # NaN
    try:
        return datetime.fromtimestamp(x, tz)
    except (OverflowError, ValueError, OSError):
        # At either end, the zone's offset can step past year 1 or 9999.
        edge = datetime.min if x < 0 else datetime.max
        return edge if tz is None else edge.replace(tzinfo=tz)


def stamp(seconds: float, fmt: str = "%Y-%m-%d %H:%M", tz: tzinfo | None = UTC) -> str:
    """``seconds`` formatted with ``fmt`` (a ``strftime`` format)
    in ``tz``, clamped as ``moment`` does; never raises for the time."""
    when = moment(seconds, tz)
    # strftime writes years before 1000 with fewer digits on some platforms (glibc:
    # "1-01-01"), which no longer reads back as a date.
    return when.strftime(fmt.replace("%Y", f"{when.year:04d}"))
