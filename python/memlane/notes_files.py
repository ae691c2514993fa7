"""OrcBot's long-term files as notes (see ``memlane.notes``): the five files, their
kinds and context limits, an entry's format in a file and in the context, and a scope's
files written from its notes and read back into them (the work behind
``memlane.Memory.export_notes`` and ``import_notes``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from memlane import coerce, times
from memlane.derived_ids import derived_ids, held
from memlane.errors import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    StorageError,
    shown,
)
from memlane.replaced_files import keep_owner, sync_folder
from memlane.scoping import exact_scope

if TYPE_CHECKING:
    from memlane.records import MemoryRecord
    from memlane.store import MemoryStore

__all__ = [
    "DAILY_FOLDER",
    "HEADS",
    "NOTES",
    "NOTE_FILES",
    "NOTE_LIMITS",
    "Head",
    "check_text",
    "entry_line",
    "export_notes",
    "file_size",
    "head_token",
    "import_notes",
    "kind_notes",
    "record_line",
    "unsuperseded",
    "write_entries",
    "write_file",
]

#: The table notes live in.
NOTES = "notes"
#: The table of the files' heads: one record per scope and file (its name as text) whose
#: metadata ``token`` every change of the file's entries replaces, in the change's own
#: transaction (see ``write_entries``).
HEADS = "notes_heads"
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
#: A file ``export_notes`` writes aside before renaming it over one of the five (and one
#: that a killed export left behind): ``.JOURNAL.md.<random hex>.tmp``, or
#: ``.JOURNAL.md.tmp`` as earlier versions named it. ``import_notes`` skips them.
_ASIDE = re.compile(
    r"\.(?:" + "|".join(re.escape(n) for n in NOTE_FILES) + r")(?:\.[0-9a-f]+)?\.tmp"
)


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
    text before the first section an entry of its own, empty sections dropped), each
    without the blank lines around it and the blanks that end it."""
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    entries: list[_Entry] = []
    date: float | None = None
    title = ""
    body: list[str] = []

    def close() -> None:
        # The first line keeps its indentation: "   ## x" is text here, and stripped it
        # would be exported as a heading, which reads back as another entry.
        start = next((i for i, line in enumerate(body) if line.strip()), len(body))
        joined = "\n".join(body[start:]).rstrip()
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


def check_text(text: str, label: str) -> str:
    """``text`` (an entry's text as stored) with every line break written ``\n``, if no
    line of it starts with ``## ``, else ``InvalidArgumentError`` naming ``label``: the
    export would write that line as a heading, and the file would read back as other
    entries (re-dated, re-titled). The file is read by lines, and ``\r``, ``\f`` or
    ``\u2028`` end one as ``\n`` does: kept, the entry would come back changed."""
    lines = text.splitlines()
    if any(line.startswith("## ") for line in lines):
        raise InvalidArgumentError(
            f"{label} has a line starting with '## ', which would start a new entry of the "
            "file; write it without the heading"
        )
    return "\n".join(lines)


def _not_regular(path: Path) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{path.name} is a symbolic link or not a regular file; notes are read only from "
        "regular files in the folder, never through a link (which could point anywhere)"
    )


def _read_bytes(path: Path) -> bytes:
    """The bytes of the regular file ``path``; a link is refused, not followed."""
    if path.is_symlink():
        raise _not_regular(path)
    # O_NOFOLLOW: a link put in its place after the check above is still not followed;
    # O_NONBLOCK: nor does a named pipe put there stop the import (waiting for a writer).
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if path.is_symlink():
            raise _not_regular(path) from None
        raise StorageError(f"cannot read {path.name}: {e.strerror or e}") from None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise _not_regular(path)
        try:
            return f.read()
        except OSError as e:
            raise StorageError(f"cannot read {path.name}: {e.strerror or e}") from None


def _read(path: Path) -> list[_Entry]:
    """The entries of the notes file ``path``, each checked as the store and the
    export need it, so that a bad entry is refused before any file is imported."""
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InvalidArgumentError(
            f"{path.name} is not UTF-8 text (byte {e.start} cannot be decoded)"
        ) from None
    entries = _parse(text)
    for i, entry in enumerate(entries):
        label = f"{path.name} entry {i + 1}"
        coerce.clean(entry.text, label)
        coerce.clean(entry.title, f"{label}'s heading")
        if entry.date is not None:
            # A date fromisoformat reads may still be outside years 1..9999 in UTC
            # (0001-01-01T00:00+14:00), which the store refuses.
            times.check(entry.date, f"{label}'s date")
    return entries


def _directory(dir: str | Path, *, create: bool) -> Path:
    if not isinstance(dir, str | os.PathLike) or dir == "":
        raise InvalidArgumentError(f"dir must be a path, got {shown(dir)}")
    path = coerce.path(dir, "dir")  # no NUL, no lone surrogate
    try:
        exists = path.exists()
        if exists and not path.is_dir():
            raise InvalidArgumentError(f"{str(path)!r} is not a directory")
    except OSError as e:  # a name longer than the system takes, a folder it hides
        raise StorageError(f"cannot look at {str(path)!r}: {e.strerror or e}") from None
    if not exists:
        if not create:
            raise NotFoundError(f"no directory {str(path)!r}")
        try:
            path.mkdir(parents=True)
        except OSError as e:
            raise StorageError(f"cannot create {str(path)!r}: {e.strerror or e}") from None
    return path


def _exportable(rec: MemoryRecord, name: str) -> None:
    """Refuses a note that its file would not give back: one written to the notes table
    by ``Memory.add``, not through a ``Notebook``, may hold a line the export would write
    as a heading, or a title of several lines, and the file would read back as other
    entries (split, re-dated, re-titled)."""
    label = f"note {rec.id!r} of {name}"
    check_text(rec.text, label)
    if len(f"{rec.metadata.get('title') or ''}x".splitlines()) > 1:
        raise InvalidArgumentError(
            f"{label} has a title of several lines, which its heading cannot hold"
        )


def _render(kind: str, records: list[MemoryRecord]) -> str:
    parts = [f"# {_TITLES[kind]}"]
    for rec in records:
        stamp = times.stamp(rec.created_at, _STAMP)
        title = str(rec.metadata.get("title") or "")
        parts.append(f"## {stamp} · {title}" if title else f"## {stamp}")
        parts.append(rec.text)
    return "\n\n".join(parts) + "\n"


def position(rec: MemoryRecord) -> int:
    """An entry's place in its file (0 where a writer of the scope gave it none usable)."""
    value = rec.metadata.get("position", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _ordered(records: list[MemoryRecord]) -> list[MemoryRecord]:
    return sorted(records, key=lambda r: (position(r), r.created_at))


def _same_date(date: float, created_at: float) -> bool:
    """Whether a heading's ``date`` is ``created_at`` as far as the file can tell: the
    export writes whole seconds, so a date of whole seconds matches every time within
    that second (stamped as the export stamps it); a finer date matches exactly."""
    if date == created_at:
        return True
    return date.is_integer() and times.stamp(date, _STAMP) == times.stamp(created_at, _STAMP)


def _as_read(rec: MemoryRecord) -> tuple[str, str]:
    """A stored entry's text and title as its file gives them back: its lines joined by
    ``\n`` without the blank lines that open it and the space that ends it, and its title
    stripped (an entry written by ``Memory.add`` may hold them; an untouched file read
    back is the same entry, not a new one)."""
    lines = rec.text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    return "\n".join(lines[start:]).rstrip(), str(rec.metadata.get("title") or "").strip()


def _same(entry: _Entry, rec: MemoryRecord) -> bool:
    return (entry.text, entry.title) == _as_read(rec) and (
        entry.date is None or _same_date(entry.date, rec.created_at)
    )


class _Dates:
    """The stored entries' dates by text and title, looked up as ``_same_date`` compares
    them: an import's entries each find theirs in one lookup, not by a pass over every
    stored entry (an edited file of thousands of entries read them all once each)."""

    def __init__(self, stored: list[MemoryRecord]) -> None:
        self._first: dict[tuple[str, str], float] = {}
        self._exact: dict[tuple[str, str, float], tuple[int, float]] = {}
        self._second: dict[tuple[str, str, str], tuple[int, float]] = {}
        for i, rec in enumerate(stored):
            key = _as_read(rec)
            self._first.setdefault(key, rec.created_at)
            self._exact.setdefault((*key, rec.created_at), (i, rec.created_at))
            stamp = times.stamp(rec.created_at, _STAMP)
            self._second.setdefault((*key, stamp), (i, rec.created_at))

    def when(self, entry: _Entry, now: float) -> float:
        """The date an imported entry is stored with: its heading's, unless a stored entry
        of the same text and title has a date the heading matches (the first such, its
        date unrounded); without a date in its heading, such an entry's date, or ``now``."""
        key = (entry.text, entry.title)
        if entry.date is None:
            return self._first.get(key, now)
        found = [self._exact.get((*key, entry.date))]
        if entry.date.is_integer():
            found.append(self._second.get((*key, times.stamp(entry.date, _STAMP))))
        return min((f for f in found if f is not None), default=(0, entry.date))[1]


def unsuperseded(flt: dict[str, Any]) -> dict[str, Any]:
    """``flt`` and "not superseded": an entry rewritten by
    ``memlane.notes.Notebook.replace`` keeps its old wording as a superseded version,
    which is not part of the file."""
    return {"$and": [flt, {"valid_to": None}]}


def kind_notes(
    store: MemoryStore, kind: str, fields: dict[str, Any], only: dict[str, Any]
) -> list[MemoryRecord]:
    """The entries of one kind's file in a scope (``fields``, matched exactly by
    ``only``), in the file's order."""
    flt = unsuperseded(only)
    total = store.count(NOTES, type=kind, filters=flt, **fields)
    return _ordered(store.list(NOTES, limit=max(total, 1), type=kind, filters=flt, **fields))


def entry_line(created_at: float, title: str, text: str) -> str:
    """An entry as the context shows it (and as a file's size counts it)."""
    stamp = times.stamp(created_at, "%Y-%m-%d")
    return f"[{stamp}] {title + ': ' if title else ''}{' '.join(text.split())}"


def record_line(rec: MemoryRecord) -> str:
    """A stored entry as the context shows it."""
    return entry_line(rec.created_at, str(rec.metadata.get("title") or ""), rec.text)


def file_size(records: list[MemoryRecord]) -> int:
    """Characters a file's entries take in the context (what its limit bounds)."""
    return sum(len(record_line(r)) + 1 for r in records)


def _head_ids(kind: str, fields: Mapping[str, Any]) -> list[str]:
    key = json.dumps([HEADS, sorted(fields.items()), kind])
    return derived_ids("notes-head-" + hashlib.sha256(key.encode()).hexdigest()[:32])


def _head_id(store: MemoryStore, kind: str, fields: Mapping[str, Any]) -> str:
    """The id of the head of one kind's file in a scope: of the ids derived from them, the
    one its head holds, else the first no record holds. Anyone can compute them and add a
    record of their own scope under one: such a record is passed over (``derived_ids``),
    read from the database, as the store decides which ids are held."""
    ids = _head_ids(kind, fields)
    free = None
    for rid in ids:
        rec = held(store, rid)
        if rec is None:
            free = free or rid
        elif rec.table == HEADS and rec.type == kind and rec.scope == fields:
            return rid
    if free is None:
        raise InvalidArgumentError(
            f"the notes file's ids {ids[0]} to {ids[-1]} are all held by records that are "
            "not its head (of another scope or kind); delete those records"
        )
    return free


def _head(rid: str, kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The file's head (under ``rid``) with a new token, as an item of ``replace``."""
    name = next(n for n, k in NOTE_FILES.items() if k == kind)
    return {
        "text": name,
        "table": HEADS,
        "type": kind,
        "id": rid,
        "metadata": {"file": name, "token": uuid.uuid4().hex},
        "evergreen": True,
        **fields,
    }


class Head(NamedTuple):
    """A file's head as an edit read it: its id, and its token (None: no head yet)."""

    id: str
    token: str | None


def head_token(store: MemoryStore, kind: str, fields: Mapping[str, Any]) -> Head:
    """The head of one kind's file in a scope as an edit reads it (``write_entries``).

    The token is read before the entries, from the index as they are: the head and the
    entries an edit reads are then at least as new as each other's last change."""
    rid = _head_id(store, kind, fields)
    found = store.list(HEADS, limit=1, filters={"id": rid}, **fields)
    return Head(rid, str(found[0].metadata.get("token")) if found else None)


def write_entries(
    store: MemoryStore,
    kind: str,
    fields: dict[str, Any],
    token: Head,
    items: Sequence[Mapping[str, Any]],
    gone: Sequence[str] = (),
) -> list[MemoryRecord] | None:
    """Stores ``items`` (entries of one kind's file in the scope ``fields``) and deletes
    the current entries of ids ``gone``, in one transaction that gives the file's head a
    new token, only if the head still has ``token`` (as ``head_token`` read it).
    Returns the records stored, or None when another writer changed the file since
    ``token`` was read (then nothing is stored).

    The condition is checked inside the transaction, after every other writer's commit:
    the head of ``token`` is deleted there if it is current, and the new head takes its id,
    which the store refuses while another head holds it. An entry of ``gone`` that another
    writer superseded is likewise not deleted, and the item that takes its id is refused."""
    head = _head(token.id, kind, fields)
    mine: list[dict[str, Any]] = [{"table": HEADS}, {"id": head["id"]}]
    mine.append({"metadata.token": token.token if token.token is not None else ""})
    flt: dict[str, Any] = {"$and": mine}
    if token.token is None:
        # The first head: one another writer made meanwhile under another of its ids (a
        # squatter of one deleted between the two reads) goes, so that one head stays.
        others = [i for i in _head_ids(kind, fields) if i != head["id"]]
        flt = {"$or": [flt, {"$and": [{"table": HEADS}, {"type": kind}, {"id": {"$in": others}}]}]}
    if gone:
        entries = [{"table": NOTES}, {"id": {"$in": list(gone)}}, {"valid_to": None}]
        flt = {"$or": [flt, {"$and": entries}]}
    try:
        _, stored = store.replace([*items, head], [NOTES, HEADS], filters=flt, **fields)
    except (InvalidArgumentError, ConflictError):
        current = unsuperseded({"id": {"$in": list(gone)}}) if gone else None
        changed = head_token(store, kind, fields) != token or (
            current is not None and store.count(NOTES, filters=current, **fields) < len(gone)
        )
        if changed:
            return None
        raise
    return stored[:-1]


def _old_file(path: Path) -> os.stat_result | None:
    """The status of the regular file ``path`` (not of a link's target), None when there
    is none."""
    try:
        was = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return was if stat.S_ISREG(was.st_mode) else None


def write_file(folder: Path, name: str, text: str) -> None:
    """Writes ``text`` as ``folder / name``: into a new file beside it (of a name no file
    had, created without following a link, so nothing outside ``folder`` is written),
    synced to disk, then renamed over the old one, whose owner (where this process may
    set it) and permissions it keeps. The new file is removed on failure. Raises
    ``StorageError`` naming ``name``; ``sync_folder`` makes the rename durable."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    # A random name: a file planted to be written through cannot be named in advance.
    aside = folder / f".{name}.{uuid.uuid4().hex[:16]}.tmp"
    try:
        was = _old_file(folder / name)
        fd = os.open(aside, flags, 0o666)
    except OSError as e:
        raise StorageError(f"cannot write {name}: {e.strerror or e}") from None
    try:
        with open(fd, "w", encoding="utf-8") as f:
            if was is not None:
                keep_owner(f.fileno(), was)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(aside, folder / name)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(aside)
        if isinstance(e, OSError):
            raise StorageError(f"cannot write {name}: {e.strerror or e}") from None
        raise


def export_notes(
    store: MemoryStore, dir: str | Path, scope: Mapping[str, str | None]
) -> dict[str, int]:
    """Writes the five files into ``dir`` (created if missing) from the notes of exactly
    ``scope``; returns the entries written per file (see ``memlane.Memory.export_notes``)."""
    fields, only = exact_scope(store, scope)
    path = _directory(dir, create=True)
    notes = {name: kind_notes(store, kind, fields, only) for name, kind in NOTE_FILES.items()}
    for name, records in notes.items():
        for rec in records:  # every entry checked before the first file is written
            _exportable(rec, name)
    for name, records in notes.items():
        write_file(path, name, _render(NOTE_FILES[name], records))
    sync_folder(path)  # once, after every rename
    return {name: len(records) for name, records in notes.items()}


#: The folder of daily logs beside the notes files (OrcBot's layout), which no import reads.
DAILY_FOLDER = "memory"


def import_notes(
    store: MemoryStore, dir: str | Path, scope: Mapping[str, str | None]
) -> dict[str, int]:
    """Reads the notes files in ``dir`` into the notes of exactly ``scope``; returns the
    entries stored per file read (see ``memlane.Memory.import_notes``)."""
    fields, only = exact_scope(store, scope)
    path = _directory(dir, create=False)
    store.refresh()  # compared with what every process stored (the index, on PostgreSQL)
    unknown = sorted(
        p.name
        for p in path.iterdir()
        # A link named like a notes file is left to _read, which refuses it by its name.
        if (p.name not in NOTE_FILES or not (p.is_symlink() or p.is_file()))
        and not _ASIDE.fullmatch(p.name)
        # OrcBot's daily logs, which export_daily writes beside the notes: not notes.
        and not (p.name == DAILY_FOLDER and p.is_dir() and not p.is_symlink())
    )
    if unknown:
        raise InvalidArgumentError(
            f"unknown file(s) {unknown} in {str(path)!r}; notes files are {list(NOTE_FILES)}"
        )
    # lexists: a broken link is refused by _read too, not skipped.
    parsed = {n: _read(path / n) for n in NOTE_FILES if os.path.lexists(path / n)}
    now = float(int(datetime.now(UTC).timestamp()))  # whole seconds, as exported
    stored: dict[str, int] = {}
    items: list[dict[str, Any]] = []
    gone: list[dict[str, Any]] = []
    for name, entries in parsed.items():
        kind = NOTE_FILES[name]
        stored_now = kind_notes(store, kind, fields, only)
        if len(stored_now) == len(entries) and all(map(_same, entries, stored_now)):
            stored[name] = 0
            continue
        dates = _Dates(stored_now)
        items += [
            {
                "text": e.text,
                "table": NOTES,
                "type": kind,
                "metadata": {"file": name, "title": e.title, "position": i},
                "created_at": dates.when(e, now),
                **fields,
            }
            for i, e in enumerate(entries)
        ]
        # The files are the truth: the head changes whatever its token, so that an edit
        # that read the notes before this import is made again over what it stored.
        rid = _head_id(store, kind, fields)
        items.append(_head(rid, kind, fields))
        gone += [{"$and": [{"table": NOTES}, {"type": kind}, only]}, {"id": rid}]
        stored[name] = len(entries)
    if gone:
        # Every changed file in one transaction: the import stores all of them or none.
        store.replace(items, [NOTES, HEADS], filters={"$or": gone}, **fields)
    return stored
