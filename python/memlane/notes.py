"""OrcBot's long-term files as memlane records: ``JOURNAL.md``, ``LEARNING.md``, ``USER.md``,
``WORLD.md`` and ``MEMORY.md``.

OrcBot keeps its journal, what it learned, its user profile, its world state
and its curated long-term facts as five markdown files. Here each entry (a
``## `` section of a file) is one record in the ``notes`` table, of type
``journal``, ``learning``, ``user``, ``world`` or ``memory``, with metadata
``file``, ``title`` and ``position``; so notes are searched, scoped and
exported like any record, and still read and written as files:

- :meth:`NotesMixin.export_notes` writes the five files, each entry a section
  headed by its date (``## 2026-05-01 09:30:00``, then `` · title`` when it
  has one), in the order the entries were imported.
- :meth:`NotesMixin.import_notes` reads them back. A heading that starts with
  a date dates the entry; text before the first heading is an entry of its
  own. The files are the truth for their kind: a file that matches the stored
  notes changes nothing (importing twice stores nothing new), a changed file
  replaces that kind's notes of the scope in one transaction (entries that did
  not change keep their dates), a file that is absent leaves its kind alone.
  Every file is read and checked before anything is written.

:func:`notes_context` is the long-term notes section of
:func:`~memlane.agent.build_context`, with OrcBot's context limits
(:data:`NOTE_LIMITS`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from memlane._memory import coerce, times
from memlane.errors import InvalidArgumentError, NotFoundError, StorageError
from memlane.records import SCOPE_FIELDS
from memlane.scoping import exact_scope

if TYPE_CHECKING:
    from memlane._memory.store import MemoryStore
    from memlane.records import MemoryRecord

__all__ = ["NOTES", "NOTE_FILES", "NOTE_LIMITS", "NotesMixin", "notes_context"]

#: The table notes live in.
NOTES = "notes"
#: File name -> the kind (record type) of its entries, in OrcBot's order.
NOTE_FILES: dict[str, str] = {
    "JOURNAL.md": "journal",
    "LEARNING.md": "learning",
    "USER.md": "user",
    "WORLD.md": "world",
    "MEMORY.md": "memory",
}
#: Characters of each kind's newest entries in the context, as OrcBot reads its files:
#: MEMORY.md up to ``memoryExtendedContextLimit`` (2,000), JOURNAL.md and LEARNING.md up
#: to ``journalContextLimit`` and ``learningContextLimit`` (1,500 each; WORLD.md shares
#: the learning limit), USER.md up to ``userContextLimit`` (1,500 in its documented
#: configuration). Like OrcBot, which takes the tail of each file, the newest entries
#: are kept.
NOTE_LIMITS: dict[str, int] = {
    "journal": 1500,
    "learning": 1500,
    "user": 1500,
    "world": 1500,
    "memory": 2000,
}
_TITLES = {
    "journal": "Journal",
    "learning": "Learning",
    "user": "User",
    "world": "World",
    "memory": "Memory",
}
_DATED = re.compile(
    r"(\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r"(?:\s*[·|\u2014\u2013-]\s*(.*))?"
)
_STAMP = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True, slots=True)
class _Entry:
    """One section of a notes file: its date (None when the heading has none), title, text."""

    date: float | None
    title: str
    text: str


def _date(text: str) -> float | None:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _heading(line: str) -> tuple[float | None, str]:
    heading = line[3:].strip()
    m = _DATED.fullmatch(heading)
    if m is not None and (when := _date(m.group(1))) is not None:
        return when, (m.group(2) or "").strip()
    return None, heading


def _parse(text: str) -> list[_Entry]:
    """The entries of a notes file: its ``## `` sections (the ``# `` title line skipped,
    text before the first section an entry of its own, empty sections dropped)."""
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    entries: list[_Entry] = []
    date: float | None = None
    title = ""
    body: list[str] = []

    def close() -> None:
        joined = "\n".join(body).strip()
        if joined:
            entries.append(_Entry(date, title, joined))

    for line in lines:
        if line.startswith("## "):
            close()
            (date, title), body = _heading(line), []
        else:
            body.append(line)
    close()
    return entries


def _read(path: Path) -> list[_Entry]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise StorageError(f"cannot read {path.name}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InvalidArgumentError(
            f"{path.name} is not UTF-8 text (byte {e.start} cannot be decoded)"
        ) from None
    entries = _parse(text)
    for i, entry in enumerate(entries):
        coerce.clean(entry.text, f"{path.name} entry {i + 1}")
        coerce.clean(entry.title, f"{path.name} entry {i + 1}'s heading")
    return entries


def _directory(dir: str | Path, *, create: bool) -> Path:
    if not isinstance(dir, str | os.PathLike):
        raise InvalidArgumentError(f"dir must be a path, got {type(dir).__name__}")
    path = Path(dir)
    if path.exists() and not path.is_dir():
        raise InvalidArgumentError(f"{str(path)!r} is not a directory")
    if not path.exists():
        if not create:
            raise NotFoundError(f"no directory {str(path)!r}")
        try:
            path.mkdir(parents=True)
        except OSError as e:
            raise StorageError(f"cannot create {str(path)!r}: {e.strerror or e}") from None
    return path


def _render(kind: str, records: list[MemoryRecord]) -> str:
    parts = [f"# {_TITLES[kind]}"]
    for rec in records:
        stamp = times.stamp(rec.created_at, _STAMP)
        title = str(rec.metadata.get("title") or "")
        parts.append(f"## {stamp} · {title}" if title else f"## {stamp}")
        parts.append(rec.text)
    return "\n\n".join(parts) + "\n"


def _ordered(records: list[MemoryRecord]) -> list[MemoryRecord]:
    return sorted(records, key=lambda r: (int(r.metadata.get("position", 0)), r.created_at))


def _same(entry: _Entry, rec: MemoryRecord) -> bool:
    return (
        entry.text == rec.text
        and entry.title == str(rec.metadata.get("title") or "")
        and (entry.date is None or entry.date == rec.created_at)
    )


def _scope(*given: str | None) -> dict[str, str | None]:
    return dict(zip(SCOPE_FIELDS, given, strict=True))


def _notes(
    mem: MemoryStore, kind: str, fields: dict[str, Any], only: dict[str, Any]
) -> list[MemoryRecord]:
    total = mem.count(NOTES, type=kind, filters=only, **fields)
    return _ordered(mem.list(NOTES, limit=max(total, 1), type=kind, filters=only, **fields))


class NotesMixin:
    """OrcBot's long-term files (see :mod:`memlane.notes`) for :class:`~memlane.Memory`."""

    def _store(self) -> MemoryStore:
        return cast("MemoryStore", self)  # mixed into memlane.Memory, a MemoryStore

    def export_notes(
        self,
        dir: str | Path,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, int]:
        """Writes ``JOURNAL.md``, ``LEARNING.md``, ``USER.md``, ``WORLD.md`` and
        ``MEMORY.md`` into ``dir`` (created if missing) from the notes of exactly this
        scope; returns the entries written per file.

        Each entry is a section headed by its date (and `` · title``), in the order
        they were imported; a kind without notes is a file with its title only. Each
        file is written aside, then renamed over the old one, so a reader never sees
        half a file.
        """
        mem = self._store()
        fields, only = exact_scope(
            mem, _scope(agent_id, user_id, room_id, world_id, session_id, namespace)
        )
        path = _directory(dir, create=True)
        notes = {name: _notes(mem, kind, fields, only) for name, kind in NOTE_FILES.items()}
        for name, records in notes.items():
            target, aside = path / name, path / f".{name}.tmp"
            try:
                aside.write_text(_render(NOTE_FILES[name], records), encoding="utf-8")
                os.replace(aside, target)
            except OSError as e:
                raise StorageError(f"cannot write {name}: {e.strerror or e}") from None
        return {name: len(records) for name, records in notes.items()}

    def import_notes(
        self,
        dir: str | Path,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, int]:
        """Reads the notes files in ``dir`` into the notes of exactly this scope; returns
        the entries stored per file read (0 where the file matched the stored notes).

        ``dir`` may hold any of the five files and nothing else. A file replaces its
        kind's notes when it differs from them; an entry whose heading has no date
        keeps the date of the same stored entry, or gets now's. Raises
        :class:`~memlane.errors.InvalidArgumentError` (a path that is not a directory,
        a file that is not UTF-8 text, an unknown file) before anything is stored.
        """
        mem = self._store()
        fields, only = exact_scope(
            mem, _scope(agent_id, user_id, room_id, world_id, session_id, namespace)
        )
        path = _directory(dir, create=False)
        unknown = sorted(
            p.name for p in path.iterdir() if p.name not in NOTE_FILES or not p.is_file()
        )
        if unknown:
            raise InvalidArgumentError(
                f"unknown file(s) {unknown} in {str(path)!r}; notes files are {list(NOTE_FILES)}"
            )
        parsed = {n: _read(path / n) for n in NOTE_FILES if (path / n).exists()}
        now = float(int(datetime.now(UTC).timestamp()))  # whole seconds, as exported
        stored: dict[str, int] = {}
        for name, entries in parsed.items():
            kind = NOTE_FILES[name]
            current = _notes(mem, kind, fields, only)
            if len(current) == len(entries) and all(map(_same, entries, current)):
                stored[name] = 0
                continue
            dates = {(r.text, str(r.metadata.get("title") or "")): r.created_at for r in current}
            items = [
                {
                    "text": e.text,
                    "table": NOTES,
                    "type": kind,
                    "metadata": {"file": name, "title": e.title, "position": i},
                    "created_at": e.date
                    if e.date is not None
                    else dates.get((e.text, e.title), now),
                    **fields,
                }
                for i, e in enumerate(entries)
            ]
            mem.replace(items, NOTES, type=kind, filters=only, **fields)
            stored[name] = len(items)
        return stored


def notes_context(
    mem: MemoryStore, scope: Mapping[str, Any], limits: Mapping[str, int] = NOTE_LIMITS
) -> tuple[str, list[MemoryRecord]]:
    """The long-term notes section of a context and the notes in it: per file, the newest
    entries within ``limits[kind]`` characters (the oldest of them cut from its start
    with "…" when it does not fit whole), shown oldest first.

    The notes read are those of ``scope`` and of every broader scope (an agent's
    journal is in each of its conversations; a user's profile only in that user's),
    never another agent's or user's.
    """
    unknown = set(limits) - set(NOTE_LIMITS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown note kind(s) {sorted(map(str, unknown))}; kinds are {list(NOTE_LIMITS)}"
        )
    for kind, limit in limits.items():
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidArgumentError(f"limits[{kind!r}] must be an int >= 0, got {limit!r}")
    fields, only = exact_scope(mem, scope)
    broader = [{"$or": [{f: v}, {f: None}]} for f, v in fields.items()]
    flt = {"$and": [only, *broader]} if broader else only
    if not any(limits.values()) or not mem.count(NOTES, filters=flt):
        return "", []
    blocks, shown = ["## Long-term notes"], []
    for name, kind in NOTE_FILES.items():
        room = limits.get(kind, 0)
        if room <= 0:
            continue
        lines: list[str] = []
        for rec in mem.list(NOTES, limit=50, type=kind, filters=flt):  # newest first
            stamp = times.stamp(rec.created_at, "%Y-%m-%d")
            title = rec.metadata.get("title")
            line = f"[{stamp}] {title + ': ' if title else ''}{' '.join(rec.text.split())}"
            if len(line) + 1 > room:
                if room > 2:
                    lines.append("…" + line[len(line) - room + 2 :])
                    shown.append(rec)
                break
            lines.append(line)
            shown.append(rec)
            room -= len(line) + 1
        if lines:
            blocks.append("\n".join([f"### {name}", *reversed(lines)]))
    return ("\n".join(blocks) if len(blocks) > 1 else ""), shown
