"""The calendar dates a query's text names, as the time intervals they cover.

A question such as "what did Maria donate in December 2023?" or "what did John say on
7 July, 2023?" names when the memory it looks for was made; the engine's date pass
(``date_weight`` of a search) favours the candidates created in or near those
intervals. Only absolute dates are read, in English: a day with its month and year
("7 July 2023", "July 7th, 2023", "2023-07-07"), a month and year ("July 2023", "Jul
2023"), a year after a word that makes it one ("in 2023", "during 2023") and a range of
two of these ("between 11 and 15 August 2023", "from 2009 to 2014"). The parse is
strict so that numbers that are not dates are not taken: a day must exist in its month,
a year has four digits from 1900 to 2199, and a bare number is never a date. Relative
dates ("last Friday", "in June") name no year, so none is read from them. Times are
read as UTC, as a store's ``created_at`` is compared.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime

__all__ = ["MAX_INTERVALS", "named_intervals"]

#: How many intervals a query names at most (the first ones in its text).
MAX_INTERVALS = 8

_MONTHS: dict[str, int] = {}
for _i, _name in enumerate(calendar.month_name):
    if _name:
        _MONTHS[_name.lower()] = _i
        _MONTHS[_name[:3].lower()] = _i
_MONTHS["sept"] = 9
# Longest first, so that "sept" is tried before "sep".
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
# A month name, its abbreviation with or without a full stop; never a longer word.
_M = rf"(?:{_MONTH})\.?(?![a-z])"
_DAY = r"(?:[0-2]?[1-9]|[123]0|31)(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20|21)\d\d"
# A day, month and year in either order ("7 July 2023", "July 7th, 2023"), or ISO.
_DMY = rf"(?P<d1>{_DAY})(?:\s+of)?\s+(?P<m1>{_M}),?\s*(?P<y1>{_YEAR})"
_MDY = rf"(?P<m2>{_M})\s+(?P<d2>{_DAY}),?\s*(?P<y2>{_YEAR})"
_ISO = rf"(?P<y3>{_YEAR})-(?P<m3>0?[1-9]|1[0-2])-(?P<d3>0?[1-9]|[12]\d|3[01])"
_MY = rf"(?P<m4>{_M}),?\s+(?P<y4>{_YEAR})"
# A year alone is one only after a word that makes it a time.
_Y = rf"(?:in|during|since|from|until|before|after)\s+(?P<y5>{_YEAR})"
_DATE = re.compile(rf"(?<!\w)(?:{_DMY}|{_MDY}|{_ISO}|{_MY}|{_Y})(?!\w|-\d)", re.IGNORECASE)
# Between two dates, what makes them one range ("May 2020 to June 2021").
_JOIN = re.compile(r"\s*(?:-|\u2013|to|until|through)\s*$", re.IGNORECASE)
# What may come before a date to make a range of days: "between 11 and", "August 11 to",
# "11-" (the month and the year that the date after it gives).
_D = rf"(?:(?P<dX>{_DAY})(?:(?:\s+of)?\s+(?P<mX>{_M}))?|(?P<nX>{_M})\s+(?P<eX>{_DAY}))"
_HEAD = re.compile(
    rf"(?:\bbetween\s+{_D.replace('X', '1')},?\s+and"
    rf"|(?<!\w){_D.replace('X', '2')},?\s*(?:-|\u2013|to|until|through))\s*$",
    re.IGNORECASE,
)
# "from 2009 to 2014", "2009-2014": two years.
_YEAR_RANGE = re.compile(
    rf"(?<![\w-])(?P<a>{_YEAR})\s*(?:-|\u2013|to|and|until|through)\s*(?P<b>{_YEAR})(?![\w-])",
    re.IGNORECASE,
)
# Every date read names its year: a text without one is left at once.
_ANY_YEAR = re.compile(rf"(?<!\d){_YEAR}(?!\d)")


def _at(year: int, month: int, day: int = 1) -> float:
    return datetime(year, month, day, tzinfo=UTC).timestamp()


def _next_month(year: int, month: int) -> float:
    return _at(year + month // 12, month % 12 + 1)


def _interval(m: re.Match[str]) -> tuple[float, float] | None:
    g = m.groupdict()
    for d, mo, y in (("d1", "m1", "y1"), ("d2", "m2", "y2")):
        if g[d] is not None:
            month = _MONTHS[g[mo].rstrip(".").lower()]
            return _day(int(g[y]), month, int(g[d].rstrip("stndrh")))
    if g["y3"] is not None:
        return _day(int(g["y3"]), int(g["m3"]), int(g["d3"]))
    if g["y4"] is not None:
        year, month = int(g["y4"]), _MONTHS[g["m4"].rstrip(".").lower()]
        return _at(year, month), _next_month(year, month)
    year = int(g["y5"])
    return _at(year, 1), _at(year + 1, 1)


def _day(year: int, month: int, day: int) -> tuple[float, float] | None:
    if day > calendar.monthrange(year, month)[1]:
        return None  # "31 February": no such day
    start = _at(year, month, day)
    return start, start + 86400.0


def named_intervals(text: str) -> list[tuple[float, float]]:
    """The intervals ``[start, end)`` (unix seconds, UTC) of the dates ``text`` names, in
    the order named, at most ``MAX_INTERVALS``; a range of two dates is one interval."""
    if _ANY_YEAR.search(text) is None:
        return []  # most queries stop here
    out: list[tuple[float, float]] = []
    taken: list[tuple[int, int]] = []
    for m in _YEAR_RANGE.finditer(text):
        a, b = sorted((int(m["a"]), int(m["b"])))
        out.append((_at(a, 1), _at(b + 1, 1)))
        taken.append(m.span())
        if len(out) == MAX_INTERVALS:
            return out  # no date read after the ranges comes before them
    last = -1  # where the previous date ended, if it was read
    for m in _DATE.finditer(text):
        if any(m.start() < e and s < m.end() for s, e in taken):
            continue
        span = _interval(m)
        if span is None:
            last = -1
            continue
        if last >= 0 and _JOIN.match(text, last, m.start()) and out[-1][0] < span[1]:
            out[-1] = (out[-1][0], span[1])
        else:
            if len(out) == MAX_INTERVALS:
                break  # what follows is cut: the text is read no further
            out.append(_from_head(text, m, span))
        last = m.end()
    return out


def _from_head(text: str, m: re.Match[str], span: tuple[float, float]) -> tuple[float, float]:
    """``span`` widened back to the day a range's head names before the date ``m``
    ("between 11 and 15 August 2023": from the 11th), if it does and is earlier."""
    g = m.groupdict()
    year = next((g[y] for y in ("y1", "y2", "y3") if g[y] is not None), None)
    if year is None:
        return span  # a month or a year: no day to begin a range of days
    head = _HEAD.search(text, max(0, m.start() - 40), m.start())
    if head is None:
        return span
    h = {k[:-1]: v for k, v in head.groupdict().items() if v is not None}
    month = h.get("m") or h.get("n")
    if month is not None:
        number = _MONTHS[month.rstrip(".").lower()]
    else:
        number = int(g["m3"]) if g["m3"] else _MONTHS[(g["m1"] or g["m2"]).rstrip(".").lower()]
    first = _day(int(year), number, int((h.get("d") or h["e"]).rstrip("stndrh")))
    if first is None or first[0] >= span[0]:
        return span
    return first[0], span[1]
