"""Daily logs (as OrcBot keeps them): each day's turns of a room become one dated record.

When ``after`` runs on a new day (by its clock, in
``DailyLog.tz``), each earlier day of the last ``DailyLog.lookback`` days that
has messages in the room's history and no log yet gets one: a record in the ``daily``
table, in the room's history scope, under an id derived from that scope and the date, so
a day has one log however many writers (agents, processes) take the room's first turn
of the next day at once: the store refuses the second, which takes the day as logged.
(The id can be computed by anyone: held by a record that is not that log, another
scope's, it is not taken for the log, which is then stored under the next of its spare
ids, ``derived_ids.derived_ids``, tried in order so that it is still stored once. With
all of them held, the day's log is refused, reported in ``TurnReport.failures``, and
tried again the next day.) A room's logs, entries and messages are exactly those of its
history scope: not those of a narrower scope (another namespace's), nor another agent's
in the same room when this one has no ``agent_id``. The log
has ``metadata["date"]`` (ISO ``YYYY-MM-DD``),
``created_at`` at the start of that day, ``metadata["messages"]`` (the day's message
count) and ``metadata["method"]``:

``"llm"``
    the LLM's summary of the day (topics, facts learned, decisions, what is
    open), at most ``DailyLog.max_chars`` characters. A failing LLM (or a
    longer answer) stores nothing, is reported in ``TurnReport.failures`` as
    ``"daily"``, and the day is tried again at the next turn.
``"extract"``
    without an LLM: the day's messages themselves, one line each (cut at 200
    characters with "…"), oldest first, until ``DailyLog.max_chars``; the
    log then says how many messages it leaves out. No summary is made up; the
    messages stay in the history either way. ``extract=False``: no log without
    an LLM.

An agent appends entries of its own to a day's log with ``append_daily`` (OrcBot's
``appendToDaily(content, category)``): records of type ``"daily_entry"`` in the same
table, with ``metadata["date"]`` and ``metadata["category"]``; the day's summary
(type ``"daily_log"``) has the category ``"daily log"``. ``export_daily`` writes a
room's days as OrcBot keeps them, ``memory/YYYY-MM-DD.md`` in its data folder (beside
the files ``export_notes`` writes), each entry under a
``## [time] category`` heading. A record's day there is its ``metadata["date"]`` only
when that is a real ``YYYY-MM-DD`` date (the metadata is any writer's of the scope, and
names the file), else ``created_at``'s day: no file is written outside ``memory/``.

``build_context`` shows the newest ``DailyLog.days`` records of the room's daily
table, logs and entries (its ``daily`` section).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlane import coerce, times
from memlane.agent.callers import Caller
from memlane.agent.llm import ChatMessage, LLMError
from memlane.agent.parsing import answer_text
from memlane.agent.reports import TriggerFailure, TurnReport
from memlane.derived_ids import add_derived
from memlane.errors import InvalidArgumentError, StorageError, shown
from memlane.notes_files import DAILY_FOLDER, write_file
from memlane.replaced_files import sync_folder
from memlane.scoping import EventScope, exact_scope

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = ["DAILY", "DailyLog", "append_daily", "daily_line", "export_daily", "recent_logs"]

log = logging.getLogger("memlane.agent")

#: The table daily logs live in.
DAILY = "daily"
#: The table the room's history lives in (``memlane.agent.history.MESSAGES``, which
#: imports this module).
_MESSAGES = "messages"
_LINE = 200
#: The category of a day's summary (the entries an agent appends name their own).
LOG_CATEGORY = "daily log"
#: The longest ``DailyLog.lookback``: ten years, longer than any pause after which a
#: room's missing logs are still wanted, while each day back costs a count of the room's
#: messages at the first turn of a day. Unbounded, a lookback reaches before year 1,
#: where no ``date`` exists, and every turn's log would fail.
MAX_LOOKBACK = 3650
#: A day as ``metadata["date"]`` holds it and as a file of ``export_daily`` is named.
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")

_SYSTEM = (
    "You keep an AI agent's daily log. Summarise the day's conversation below in at most "
    "{chars} characters: the topics, what was learned about the people, decisions made and "
    "what remains open. Answer with the log only."
)


@dataclass(frozen=True, slots=True)
class DailyLog:
    """OrcBot's daily logs (see the module docs).

    Attributes:
        days: logs shown in the context block, newest first (3; 0: none).
        lookback: days back a missing log is still written (7; at most 3,650).
        max_messages: a day's messages given to the LLM, its first ones (200).
        max_chars: the longest log (1,500 characters; at least 300).
        max_output_tokens: the LLM's answer budget (500).
        extract: without an LLM, an extractive log of the day's messages (True);
            False: no log without an LLM.
        tz: where days begin and end (UTC).
        enabled: False writes no logs (stored ones still go into the context).
    """

    days: int = 3
    lookback: int = 7
    max_messages: int = 200
    max_chars: int = 1500
    max_output_tokens: int = 500
    extract: bool = True
    tz: tzinfo = UTC
    enabled: bool = True

    def __post_init__(self) -> None:
        coerce.count(self.days, "DailyLog.days", 0)
        coerce.count(self.lookback, "DailyLog.lookback", 1, MAX_LOOKBACK)
        coerce.count(self.max_messages, "DailyLog.max_messages", 1)
        coerce.count(self.max_chars, "DailyLog.max_chars", 300)
        coerce.count(self.max_output_tokens, "DailyLog.max_output_tokens", 1)
        _zone(self.tz, "DailyLog.tz")


def _zone(tz: object, label: str) -> tzinfo:
    if not isinstance(tz, tzinfo):
        raise InvalidArgumentError(
            f"{label} must be a tzinfo (e.g. datetime.UTC or zoneinfo.ZoneInfo), got {shown(tz)}"
        )
    try:  # one that gives no offset (the abstract tzinfo), or one past a day, fails here
        datetime.now(UTC).astimezone(tz)
    except (NotImplementedError, TypeError, ValueError, OverflowError) as e:
        raise InvalidArgumentError(f"{label} gives no usable UTC offset: {e}") from None
    return tz


def recent_logs(mem: Memory, scope: Mapping[str, str], days: int) -> list[MemoryRecord]:
    """The newest ``days`` daily logs and entries of exactly ``scope`` (a room's history
    scope), newest first."""
    fields, only = exact_scope(mem, scope)
    return mem.list(DAILY, limit=days, filters=only, **fields)


def daily_line(rec: MemoryRecord) -> str:
    """A log or an entry as one context line: ``[date] (category) text``."""
    category = rec.metadata.get("category")
    kind = f" ({category})" if category and rec.type != "daily_log" else ""
    return f"[{rec.metadata.get('date', '?')}]{kind} {' '.join(rec.text.split())}"


def append_daily(
    mem: Memory,
    text: str,
    scope: EventScope,
    *,
    category: str | None = None,
    created_at: float | None = None,
    tz: tzinfo = UTC,
) -> MemoryRecord:
    """Appends an entry to the day's log of the event's room (OrcBot's ``appendToDaily``):
    ``category`` names what it is (``"task"``, ``"decision"``, ...; None: none), the day
    is ``created_at``'s (default now) in ``tz``."""
    if category is not None and (not isinstance(category, str) or not category.strip()):
        raise InvalidArgumentError(
            f"category must be a non-empty str or None, got {shown(category)}"
        )
    when = time.time() if created_at is None else coerce.timestamp(created_at, "created_at")
    meta = {"date": times.moment(when, _zone(tz, "tz")).date().isoformat(), "category": category}
    fields: dict[str, Any] = dict(_history(scope))
    return mem.add(text, table=DAILY, type="daily_entry", metadata=meta, created_at=when, **fields)


def export_daily(
    mem: Memory, dir: str | Path, scope: EventScope, *, tz: tzinfo = UTC
) -> list[Path]:
    """Writes the room's daily logs and entries as OrcBot keeps them: one
    ``memory/YYYY-MM-DD.md`` per day under ``dir`` (``# Daily Memory Log - date``, then
    each record oldest first under ``## [ISO time] category``, ended by ``---``). A day's
    file is replaced whole (written aside under a random name, synced, renamed over the
    old one, keeping its permissions; the folder is synced after the last rename);
    returns the files written, oldest day first.

    A record's day is its ``metadata["date"]`` when that is a real ``YYYY-MM-DD`` date;
    any other (missing, or set by a writer of the room's scope to a path such as
    ``"../USER"``) is ignored and the day is ``created_at``'s in ``tz``: every file stays
    in ``memory/``, and one such record does not keep the others from being exported."""
    if dir == "":  # Path("") is the working directory: never meant
        raise InvalidArgumentError("dir must be a path, got ''")
    root = coerce.path(dir, "dir")
    _zone(tz, "tz")
    fields, only = exact_scope(mem, _history(scope))
    folder = root / DAILY_FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(f"cannot create {str(folder)!r}: {e.strerror or e}") from None
    days: dict[str, list[str]] = {}
    for rec in _all(mem, fields, only):
        day = _day(rec.metadata.get("date")) or times.moment(rec.created_at, tz).date().isoformat()
        category = LOG_CATEGORY if rec.type == "daily_log" else rec.metadata.get("category")
        stamp = times.moment(rec.created_at, tz).isoformat()
        heading = f"## [{stamp}] {category}" if category else f"## [{stamp}]"
        days.setdefault(day, []).append(f"{heading}\n\n{rec.text.strip()}\n\n---\n\n")
    written = []
    for day in sorted(days):
        # Renamed over the old file: a reader sees the old file or the new one.
        write_file(folder, f"{day}.md", f"# Daily Memory Log - {day}\n\n" + "".join(days[day]))
        written.append(folder / f"{day}.md")
    sync_folder(folder)  # once, after every rename
    return written


def _day(value: object) -> str | None:
    """``value`` if it is a day as ``metadata["date"]`` holds one (``YYYY-MM-DD``, a real
    date), else None: the metadata is anyone's who writes the scope, and names a file."""
    if not isinstance(value, str) or not _DAY.fullmatch(value):
        return None
    try:
        date.fromisoformat(value)
    except ValueError:
        return None
    return value


def _all(
    mem: Memory, fields: dict[str, Any], filters: dict[str, Any], type: str | None = None
) -> list[MemoryRecord]:
    """Every record of the room's daily table (``fields``: its scope as stored) that
    ``filters`` admit, oldest first."""
    out: list[MemoryRecord] = []
    while page := mem.list(
        DAILY, limit=500, offset=len(out), order="asc", type=type, filters=filters, **fields
    ):
        out += page
    return out


def _history(scope: EventScope) -> Mapping[str, str]:
    if not isinstance(scope, EventScope):
        raise InvalidArgumentError(f"scope must be an EventScope, got {type(scope).__name__}")
    return scope.history


def _log_id(scope: Mapping[str, str], day: str) -> str:
    key = json.dumps([DAILY, sorted(scope.items()), day])
    return "daily-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def _add_log(
    mem: Memory, text: str, meta: dict[str, Any], start: float, scope: dict[str, Any]
) -> MemoryRecord | None:
    """Stores the log of day ``meta["date"]`` under its id (``scope``: the room's history
    scope as stored); None when another writer logged the day first."""
    log: dict[str, Any] = {"table": DAILY, "type": "daily_log", "metadata": meta}

    def mine(held: MemoryRecord) -> MemoryRecord | None:
        same = held.table == DAILY and held.type == "daily_log" and held.scope == scope
        return held if same and held.metadata.get("date") == meta["date"] else None

    rec, new = add_derived(
        mem,
        _log_id(scope, meta["date"]),
        lambda rid: mem.add(text, **log, created_at=start, id=rid, **scope),
        mine,
        f"the daily log of {meta['date']}",
    )
    return rec if new else None


def _start(day: date, tz: tzinfo) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=tz).timestamp()


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _lines(msgs: list[MemoryRecord], tz: tzinfo) -> list[str]:
    return [
        f"[{times.stamp(r.created_at, '%H:%M', tz)}] "
        f"{r.metadata.get('role', 'user')}: {_cut(r.text, _LINE)}"
        for r in msgs
    ]


def _extract(lines: list[str], total: int, max_chars: int) -> str:
    """The lines that fit in ``max_chars`` with a note of how many messages are left out."""
    reserve = len(f"\n(+{total} more messages)")
    kept: list[str] = []
    used = -1  # no newline before the first line
    for i, line in enumerate(lines):
        room = max_chars - (reserve if i + 1 < total else 0)
        if used + 1 + len(line) > room:
            break
        kept.append(line)
        used += 1 + len(line)
    if total > len(kept):
        kept.append(f"(+{total - len(kept)} more messages)")
    return "\n".join(kept)


class DailyLogger:
    """Writes a room's missing logs; remembers per room the day it last completed, so
    the store is asked once a day per room (and again at each turn while a log fails)."""

    def __init__(self, cfg: DailyLog) -> None:
        self.cfg = cfg
        self._done: dict[tuple[tuple[str, str], ...], date] = {}
        self._busy: set[tuple[tuple[str, str], ...]] = set()
        self._lock = threading.Lock()

    def due(self, history: Mapping[str, str], call: Caller | None, now: float) -> bool:
        """Whether the room of ``history`` may have days to log (not done today)."""
        cfg = self.cfg
        if not cfg.enabled or (call is None and not cfg.extract):
            return False
        key = tuple(sorted(history.items()))
        with self._lock:
            return self._done.get(key) != times.moment(now, cfg.tz).date()

    def run(
        self,
        mem: Memory,
        event: EventScope,
        report: TurnReport,
        call: Caller | None,
        now: float,
    ) -> None:
        cfg = self.cfg
        if not cfg.enabled or (call is None and not cfg.extract):
            return
        key = tuple(sorted(event.history.items()))
        today = times.moment(now, cfg.tz).date()
        with self._lock:
            if self._done.get(key) == today or key in self._busy:
                return
            self._busy.add(key)
        try:
            if self._write(mem, event, report, call, today):
                with self._lock:
                    self._done[key] = today
        finally:
            with self._lock:
                self._busy.discard(key)

    def _write(
        self,
        mem: Memory,
        event: EventScope,
        report: TurnReport,
        call: Caller | None,
        today: date,
    ) -> bool:
        """Logs each missing day; False when one failed (it is tried again next turn)."""
        cfg = self.cfg
        scope, only = exact_scope(mem, event.history)
        first = today - timedelta(days=cfg.lookback)
        days = [first + timedelta(days=n) for n in range(cfg.lookback)]
        # The days asked for themselves, not a number of logs: a store written before log
        # ids were derived may hold a day's log twice, which would crowd out another day.
        wanted = {"$and": [only, {"date": {"$in": [day.isoformat() for day in days]}}]}
        logged = {r.metadata.get("date") for r in _all(mem, scope, wanted, "daily_log")}
        ok = True
        for day in days:
            if day.isoformat() in logged:
                continue
            start, end = _start(day, cfg.tz), _start(day + timedelta(days=1), cfg.tz)
            total = mem.count(_MESSAGES, start=start, end=end, filters=only, **scope)
            if total == 0:
                continue
            msgs = mem.list(_MESSAGES, start, end, cfg.max_messages, "asc", filters=only, **scope)
            lines = _lines(msgs, cfg.tz)
            if call is None:
                text, method = _extract(lines, total, cfg.max_chars), "extract"
            else:
                try:
                    text, method = self._summary(call, day, event, lines), "llm"
                except Exception as e:  # nothing stored: the day stays due
                    report.failures.append(TriggerFailure("daily", f"{type(e).__name__}: {e}"))
                    ok = False
                    continue
            meta = {
                "date": day.isoformat(),
                "messages": total,
                "method": method,
                "category": LOG_CATEGORY,
            }
            try:
                rec = _add_log(mem, text, meta, start, scope)
            except InvalidArgumentError as e:
                # Not tried again at every turn (each would summarise the day again) while
                # records that are not the log hold its ids: the next day's run tries it.
                report.failures.append(TriggerFailure("daily", str(e)))
                continue
            if rec is not None:
                report.daily_logs.append(rec)
        return ok

    def _summary(self, call: Caller, day: date, event: EventScope, lines: list[str]) -> str:
        where = f" in {event.room_id}" if event.room_id else ""
        prompt: list[ChatMessage] = [
            {"role": "system", "content": _SYSTEM.replace("{chars}", str(self.cfg.max_chars))},
            {
                "role": "user",
                "content": f"The conversation of {day.isoformat()}{where}, oldest first:\n\n"
                + "\n".join(lines),
            },
        ]
        # Text the store can keep, or the summary failed and the day stays due: a log
        # the store refused would have been taken for ids another scope holds.
        text = answer_text(call(prompt, self.cfg.max_output_tokens), "the model's answer")
        if len(text) > self.cfg.max_chars:
            raise LLMError(f"the log has {len(text)} characters (1 to {self.cfg.max_chars} wanted)")
        return text
