"""OrcBot's long-term files as memlane records: ``JOURNAL.md``, ``LEARNING.md``, ``USER.md``,
``WORLD.md`` and ``MEMORY.md``.

OrcBot keeps its journal, what it learned, its user profile, its world state
and its curated long-term facts as five markdown files. Here each entry (a
``## `` section of a file) is one record in the ``notes`` table, of type
``journal``, ``learning``, ``user``, ``world`` or ``memory``, with metadata
``file``, ``title`` and ``position``; so notes are searched, scoped and
exported like any record, and still read and written as files:

- ``memlane.Memory.export_notes`` writes the five files, each entry a section
  headed by its date (``## 2026-05-01 09:30:00``, then `` · title`` when it
  has one), in the order the entries were imported. A file replaced keeps its
  permissions (a private ``USER.md`` stays private), and the folder is synced
  after the files are renamed into it.
- ``memlane.Memory.import_notes`` reads them back. A heading that starts with
  a date dates the entry; text before the first heading is an entry of its
  own. An entry is its section's lines without the blank lines around them and
  the blanks that end them; the first line keeps its indentation (an indented
  ``## `` line is text, and is exported as it was). The files are the truth for
  their kind: a file that matches the stored notes changes nothing (importing
  twice stores nothing new), a changed file replaces that kind's notes of the
  scope (entries that did not change keep their dates), a file that is absent
  leaves its kind alone. Every file is read and checked before anything is
  written (a link named like a notes file, or a heading's date outside the
  years 1 to 9999 in UTC, is refused naming the file), and the changed files
  are stored in one transaction: all of them or none.

The files' format, and their export and import, are ``memlane.notes_files``'.
``notes_context`` is the long-term notes section of
``build_context``, with OrcBot's context limits
(``NOTE_LIMITS``).

``Notebook`` lets the model write them, as Letta's core memory tools do
for blocks: ``append`` adds a dated entry to a file,
``replace`` rewrites text in its entries (an entry left empty is
removed). No edit stores an entry with a line starting with ``## `` (its text
stripped as it is stored), which the export would write as a heading. A file
keeps within its limit: its size is what its entries take in the context
(``[date] text`` lines, as ``notes_context`` shows them), so a file within its
limit is shown whole; an edit that would take it past the limit is refused with
``NoteLimitError``, saying by how much. A rewrite keeps the entry's id and date
(the old wording stays in the store's history).

The limit holds however many writers edit a file at once, on either backend: each
edit reads the file's head (a record of its own, ``HEADS``)
and then its entries, checks the limit against them, and stores its change in one
transaction that replaces the head, only if the head is still the one it read
(``write_entries``). An edit that another writer got ahead of
is made again over what that writer left: two appends at once both land if the file
has room for both, and two writers rewriting one entry both land, the later on the
earlier's text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlane import coerce, edits
from memlane.errors import ConflictError, InvalidArgumentError, UnknownIdError, shown
from memlane.notes_files import (
    NOTE_FILES,
    NOTE_LIMITS,
    NOTES,
    check_text,
    entry_line,
    file_size,
    head_token,
    kind_notes,
    position,
    record_line,
    unsuperseded,
    write_entries,
)
from memlane.scoping import AGENT_FIELDS, exact_scope

if TYPE_CHECKING:
    from memlane.records import MemoryRecord
    from memlane.store import MemoryStore

__all__ = [
    "NOTES",
    "NOTE_FILES",
    "NOTE_LIMITS",
    "NoteEdit",
    "NoteLimitError",
    "Notebook",
    "notes_context",
]

#: The most characters a notes file may show in a context (a file's entries are read
#: whole, so the limit bounds the read).
MAX_LIMIT = 1_000_000
#: The fewest characters an entry takes in the context: its date and the line's end.
_SHORTEST_LINE = len(entry_line(0.0, "", "")) + 1


def check_limits(limits: object) -> dict[str, int]:
    """``limits`` (``{kind: characters}``) if they are limits a context can show notes in."""
    if not isinstance(limits, Mapping):
        raise InvalidArgumentError(
            f"limits must be a {{kind: characters}} dict, got {shown(limits)}"
        )
    unknown = set(limits) - set(NOTE_LIMITS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown note kind(s) {sorted(map(str, unknown))}; kinds are {list(NOTE_LIMITS)}"
        )
    for kind, limit in limits.items():
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_LIMIT:
            raise InvalidArgumentError(
                f"limits[{kind!r}] must be an int from 0 to {MAX_LIMIT}, got {shown(limit)}"
            )
    return dict(limits)


def scope_notes(
    mem: MemoryStore, scope: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The filter of the current notes shown in ``scope``: those of the scope and of every
    broader one of the same agent (its ``agent_id`` and ``namespace``, or none: an agent
    without them is an agent of its own, whose notes another agent never reads); and the
    scope arguments a read of them takes, the fields the store's ``default_scope`` sets
    (as ``scope`` sets them: a read without them is confined to the default's). A scope
    field left unset has the engine's list of the records without it, so the notes a
    conversation shows are read from its own fields' records, not from every note of
    the store."""
    fields, only = exact_scope(mem, scope)
    agent = {f: v for f, v in fields.items() if f in AGENT_FIELDS}
    broader = [{"$or": [{f: v}, {f: None}]} for f, v in fields.items() if f not in AGENT_FIELDS]
    flt = unsuperseded({"$and": [only | agent, *broader]} if broader else only | agent)
    return flt, {f: fields[f] for f in mem.default_scope if f in fields}


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
    check_limits(limits)
    flt, kwargs = scope_notes(mem, scope)
    if not any(limits.values()) or not mem.count(NOTES, filters=flt, **kwargs):
        return "", []
    blocks, shown = ["## Long-term notes"], []
    for name, kind in NOTE_FILES.items():
        room = limits.get(kind, 0)
        if room <= 0:
            continue
        lines: list[str] = []
        # As many entries as the shortest lines could fill the room with, and the one
        # cut: a file within its limit is shown whole, however short its entries.
        most = room // _SHORTEST_LINE + 1
        for rec in mem.list(NOTES, limit=most, type=kind, filters=flt, **kwargs):  # newest first
            line = record_line(rec)
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


# -- the model's edits ------------------------------------------------------------------------


class NoteLimitError(InvalidArgumentError):
    """An edit would take a notes file past its limit (see ``Notebook``)."""

    def __init__(self, file: str, limit: int, size: int, new_size: int) -> None:
        self.file, self.limit, self.size, self.new_size = file, limit, size, new_size
        super().__init__(
            f"{file} is limited to {limit} characters (as its entries show in the context, "
            f"dates included): it holds {size}, and the edit would make it {new_size}, "
            f"{self.over} over; shorten what you add, or shorten or remove older entries "
            "(replacing their text with nothing removes them)"
        )

    @property
    def over(self) -> int:
        """Characters past the limit."""
        return self.new_size - self.limit


@dataclass(frozen=True, slots=True)
class NoteEdit:
    """What an edit did: the ``file``, its ``size`` after the edit and its ``limit`` (in
    characters), the ``ids`` of the entries written, and for a replace the occurrences
    ``replaced`` and the entries ``removed`` (left empty)."""

    file: str
    size: int
    limit: int
    ids: tuple[str, ...] = ()
    replaced: int = 0
    removed: int = 0


def _content(value: object, name: str, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}")
    coerce.clean(value, name)
    if not empty and not value.strip():
        raise InvalidArgumentError(f"{name} must not be empty")
    return value


def _title(rec: MemoryRecord) -> str:
    return str(rec.metadata.get("title") or "")


def _busy(name: str) -> ConflictError:
    return ConflictError(
        f"{name} was changed by other writers {edits.ATTEMPTS} times during one edit; "
        "nothing of this edit was stored"
    )


def _words(text: str) -> re.Pattern[str]:
    """Matches ``text`` with any whitespace between its words: the context shows an entry
    with its whitespace collapsed, and the model quotes what it sees."""
    return re.compile(r"\s+".join(map(re.escape, text.split())))


class Notebook:
    """OrcBot's long-term files of one scope (see ``memlane.notes``), written entry by
    entry, each file within its limit.

    Args:
        memory: the store.
        scope: the scope the notes belong to, exactly (as
            ``memlane.Memory.import_notes`` takes it); notes of broader scopes are
            shown in the context but not edited here.
        limits: characters per kind (``NOTE_LIMITS``, as ``notes_context``);
            a kind left out (or 0) cannot be written.
        clock: unix seconds now, the date of an appended entry (default
            ``time.time``).
    """

    def __init__(
        self,
        memory: MemoryStore,
        scope: Mapping[str, Any] | None = None,
        *,
        limits: Mapping[str, int] = NOTE_LIMITS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if clock is not None and not callable(clock):
            raise InvalidArgumentError("clock must be a callable returning unix seconds")
        self.memory = memory
        self.scope, self._only = exact_scope(memory, scope or {})
        self.limits = check_limits(limits)
        self.clock: Callable[[], float] = clock or time.time

    @staticmethod
    def file(file: object) -> tuple[str, str]:
        """``(file name, kind)`` of a file given by its name (``"USER.md"``) or kind
        (``"user"``); raises ``InvalidArgumentError`` for another."""
        if isinstance(file, str):  # only a str: an array's == is no answer
            for name, kind in NOTE_FILES.items():
                if file in (name, kind):
                    return name, kind
            raise InvalidArgumentError(
                f"unknown notes file {file[:80]!r}; files are {list(NOTE_FILES)}"
            )
        raise InvalidArgumentError(f"a notes file is named by a str, got {shown(file)}")

    def entries(self, file: str) -> list[MemoryRecord]:
        """The entries of ``file`` in this scope, in the file's order."""
        return kind_notes(self.memory, self.file(file)[1], self.scope, self._only)

    def size(self, file: str) -> int:
        """Characters ``file``'s entries take in the context (what its limit bounds)."""
        return file_size(self.entries(file))

    def limit(self, file: str) -> int:
        """``file``'s limit in characters."""
        return self.limits.get(self.file(file)[1], 0)

    def append(self, file: str, content: str) -> NoteEdit:
        """Adds ``content`` to ``file`` as a new entry dated now.

        Raises ``NoteLimitError`` if the file would go past its limit (checked in
        the transaction that stores the entry, whoever else writes the file meanwhile)."""
        name, kind = self.file(file)
        # Checked as stored: stripped, "  ## x" starts a line with a heading.
        text = check_text(_content(content, "content").strip(), "content")
        now = coerce.timestamp(self.clock(), "clock()")
        limit = self.limits.get(kind, 0)
        # The notes are read from this process's index: on PostgreSQL, with every other
        # process's write that returned before this call began.
        self.memory.refresh()
        for _ in range(edits.ATTEMPTS):
            token = head_token(self.memory, kind, self.scope)
            current = kind_notes(self.memory, kind, self.scope, self._only)
            size = file_size(current)
            new_size = size + len(entry_line(now, "", text)) + 1
            if new_size > limit:
                raise NoteLimitError(name, limit, size, new_size)
            place = max((position(r) for r in current), default=-1) + 1
            item = {
                "text": text,
                "table": NOTES,
                "type": kind,
                "metadata": {"file": name, "title": "", "position": place},
                "created_at": now,
                **self.scope,
            }
            stored = write_entries(self.memory, kind, self.scope, token, [item])
            if stored is not None:
                return NoteEdit(name, new_size, limit, (stored[0].id,))
        raise _busy(name)

    def replace(self, file: str, old_content: str, new_content: str) -> NoteEdit:
        """Replaces every occurrence of ``old_content`` in ``file``'s entries with
        ``new_content`` (as ``replace``); whitespace
        matches any whitespace. An entry left empty is removed; the others keep their
        id and date (the old wording stays in the store's history).

        Raises ``UnknownIdError`` if ``old_content`` is in no
        entry, ``NoteLimitError`` if the edit would take the file past its limit
        (an edit that shrinks the file is always allowed)."""
        name, kind = self.file(file)
        old = _content(old_content, "old_content")
        new = _content(new_content, "new_content", empty=True)
        limit = self.limits.get(kind, 0)
        self.memory.refresh()  # as append reads them
        for _ in range(edits.ATTEMPTS):
            token = head_token(self.memory, kind, self.scope)
            current = kind_notes(self.memory, kind, self.scope, self._only)
            longest = max((len(" ".join(r.text.split())) for r in current), default=0)
            pattern = _words(old) if len(" ".join(old.split())) <= longest else None
            texts: dict[str, str] = {}
            replaced = 0
            for rec in current if pattern is not None else []:
                assert pattern is not None
                text, n = pattern.subn(lambda _: new, rec.text)
                if n:
                    # The entry as stored: a "## " the edit brings to a line's start (by
                    # what it removes or the stripping after) would be a heading.
                    label = f"{name}'s entry as this edit leaves it"
                    texts[rec.id], replaced = check_text(text.strip(), label), replaced + n
            if pattern is None or not replaced:
                raise UnknownIdError(
                    f"old_content {old[:80]!r} is not in {name}; it must match the text of "
                    "an entry exactly (without its [date] or title)"
                )
            size = file_size(current)
            new_size = sum(
                len(entry_line(r.created_at, _title(r), texts.get(r.id, r.text))) + 1
                for r in current
                if texts.get(r.id, r.text)
            )
            if new_size > limit and new_size > size:
                raise NoteLimitError(name, limit, size, new_size)
            items = [
                {
                    "text": texts[r.id],
                    "table": NOTES,
                    "type": kind,
                    "id": r.id,
                    "metadata": r.metadata,
                    "importance": r.importance,
                    "evergreen": r.evergreen,
                    "created_at": r.created_at,
                    **self.scope,
                }
                for r in current
                if texts.get(r.id)
            ]
            stored = write_entries(self.memory, kind, self.scope, token, items, list(texts))
            if stored is not None:
                removed = sum(1 for t in texts.values() if not t)
                ids = tuple(r.id for r in stored)
                return NoteEdit(name, new_size, limit, ids, replaced, removed)
        raise _busy(name)

    def __repr__(self) -> str:
        return f"Notebook(scope={self.scope!r})"
