"""Export to and import from JSON Lines: one record per line, every field, then one line
per history entry (``{"history": {...the replaced version's fields, "event", "at", "by",
"next_id"}}``)."""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
import secrets
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal, NoReturn, TextIO

import numpy as np

from memlane import coerce, json_depth
from memlane._memory.access import AccessLog
from memlane._memory.embedding import embed_texts
from memlane._memory.encoding import record, validate
from memlane._memory.writer import Writer
from memlane.coerce import FloatArray
from memlane.errors import (
    CorruptFileError,
    DuplicateIdError,
    EmbedderUnavailableError,
    InvalidArgumentError,
    MemlaneError,
    NotFoundError,
    StorageError,
    shown,
)
from memlane.printable import json_text
from memlane.replaced_files import keep_owner, sync_folder
from memlane.schema import RECORD_COLUMNS
from memlane.storage import Store
from memlane.storage.base import HistoryEntry
from memlane.storage.dialect import Dialect

_EVENTS = ("update", "supersede", "delete")
# The fields a history line carries (not the vector), and those an import sets to the
# time it runs when a line leaves them out (such an entry matches a stored one whatever
# they hold there).
_CARRIED = tuple(c for c in RECORD_COLUMNS if c != "embedding")
_TIMED = frozenset({"created_at", "updated_at", "last_accessed_at", "recorded_at"})

# Records per transaction of an import.
_BATCH = 1000
# The name of a descriptor in /dev/fd or /proc/self/fd.
_FD_NAME = re.compile(r"0|[1-9][0-9]{0,8}")
# The row of an import's vectors for a record the check did not embed (skipped).
_UNMADE = np.nan
# An import's lines, with their numbers, ``_BATCH`` at a time.
_Batches = Iterator[list[tuple[int, dict[str, Any]]]]
_OnConflict = Literal["error", "skip"]


def export(db: Store, access: AccessLog, path: Path, embeddings: bool) -> int:
    """Writes the export to a file of its own beside ``path``, flushed to disk, then
    renamed over ``path`` (keeping the permissions of a file it replaces): a failed
    export (a full disk, a database error) leaves ``path`` as it was and no file behind.
    A descriptor of this process (``/dev/stdout``, ``/dev/fd/N``), a device or a named
    pipe is written into, as a shell's ``>`` does: a rename would put a file there."""
    held = _held(path)
    if held is not None:
        return _export_into(db, access, path, embeddings, lambda: os.dup(held))
    was = _status(path)
    if was is not None and not stat.S_ISREG(was.st_mode) and not stat.S_ISDIR(was.st_mode):
        fifo = stat.S_ISFIFO(was.st_mode)
        return _export_into(db, access, path, embeddings, lambda: _open_node(path, fifo))
    target = _target(path)
    fd, aside = _aside(target)
    try:
        try:
            if was is not None:
                keep_owner(fd, was)
            f = os.fdopen(fd, "w", encoding="utf-8")
        except BaseException:
            os.close(fd)
            raise
        with f:
            n = _write_state(f, db, access, embeddings)
            os.fsync(f.fileno())
        os.replace(aside, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(aside)
        _raise_unwritten(e, target)
    sync_folder(target.parent)
    return n


def _held(path: Path) -> int | None:
    """The descriptor of this process that ``path`` names, itself or through links
    (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``), else ``None``. Its file
    replaced, or opened again (at offset 0, without the append mode of ``>>``), lost
    what the file held before: the header of ``{ echo header; memlane export ...; }``."""
    folders = {os.path.realpath(d) for d in ("/dev/fd", "/proc/self/fd") if os.path.isdir(d)}
    with contextlib.suppress(OSError):  # a folder not searchable: ``_status`` names it
        for _ in range(40):  # as many links as the kernel follows
            if os.path.realpath(path.parent) in folders and _FD_NAME.fullmatch(path.name):
                return int(path.name)
            if not path.is_symlink():
                return None
            path = path.parent / os.readlink(path)
    return None


def _export_into(
    db: Store, access: AccessLog, target: Path, embeddings: bool, opened: Callable[[], int]
) -> int:
    """The export written into the descriptor ``opened`` gives: a copy of one this
    process holds (written where it stands, or at the end where it appends), or a
    device or a pipe that ``target`` names."""
    try:
        with os.fdopen(opened(), "w", encoding="utf-8") as f:
            return _write_state(f, db, access, embeddings)
    except BaseException as e:
        _raise_unwritten(e, target)


def _open_node(target: Path, fifo: bool) -> int:
    """A device or a pipe, opened by the name given (a link to a pipe names no file that
    a resolved path could), not created (a node removed meanwhile makes no file), and
    without waiting for a named pipe's reader, which waited unbounded with the store
    held: one no process reads is refused; the writes then wait for the reader."""
    nonblock = getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(target, os.O_WRONLY | nonblock | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if fifo and e.errno == errno.ENXIO:
            raise StorageError(
                f"cannot write {str(target)!r}: no process reads the named pipe"
            ) from None
        raise
    if nonblock:
        os.set_blocking(fd, True)
    return fd


def _raise_unwritten(error: BaseException, target: Path) -> NoReturn:
    """Raises ``error``, an ``OSError`` as the ``StorageError`` naming the target."""
    if isinstance(error, OSError) and not isinstance(error, MemlaneError):
        raise StorageError(f"cannot write {str(target)!r}: {error.strerror or error}") from None
    raise error


def _write_state(f: TextIO, db: Store, access: AccessLog, embeddings: bool) -> int:
    """``_write`` over one state of the database throughout: the records and history as
    one commit left them (read a page at a time, a record rewritten meanwhile came
    twice); flushed."""
    hold = db.one_state() if isinstance(db, Dialect) else contextlib.nullcontext()
    with hold:
        n = _write(f, db, access, embeddings)
        f.flush()
    return n


def _write(f: TextIO, db: Store, access: AccessLog, embeddings: bool) -> int:
    """The records not expired, then the history; a record that expired is history
    already, its last version deleted by ``"expire"`` when it expired (as the sweep
    that removes it will keep it)."""
    n, now = 0, time.time()
    expired: list[HistoryEntry] = []
    for row in db.iter_rows(embedding=embeddings):
        if row.expires_at is not None and row.expires_at <= now:
            expired.append((row, "delete", row.expires_at, "expire", None))
            continue
        rec = record(row, access.get(row), embeddings)
        f.write(json_text(rec.to_dict(embedding=embeddings)) + "\n")
        n += 1
    for row, event, at, actor, next_id in itertools.chain(db.iter_history(), expired):
        entry = record(row, None).to_dict(embedding=False)
        entry.update(event=event, at=at, by=actor, next_id=next_id)
        f.write(json_text({"history": entry}) + "\n")
    return n


def _status(path: Path) -> os.stat_result | None:
    """The status of what ``path`` names (through links), ``None`` when it names
    nothing yet."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise StorageError(f"cannot write {str(path)!r}: {e.strerror or e}") from None


def _target(path: Path) -> Path:
    """The file an export replaces: ``path``, or the file it links to."""
    if path.is_symlink():
        path = path.resolve()
    if path.is_dir():
        raise InvalidArgumentError(f"{str(path)!r} is a directory; give a file name to export to")
    folder = path.parent
    if not folder.exists():
        raise NotFoundError(f"no directory {str(folder)!r} to export into")
    if not folder.is_dir():
        raise InvalidArgumentError(f"{str(folder)!r} is not a directory")
    return path


def _aside(target: Path) -> tuple[int, Path]:
    """A new file in the target's folder (so the rename stays on one file system), with
    the permissions a plain ``open`` would give a new file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        aside = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(aside, flags, 0o666), aside
        except FileExistsError:
            continue
        except OSError as e:
            raise StorageError(
                f"cannot write in {str(target.parent)!r}: {e.strerror or e}"
            ) from None
    raise StorageError(f"cannot create a temporary file in {str(target.parent)!r}")


def load(writer: Writer, path: Path, on_conflict: _OnConflict) -> int:
    """Imports the file ``path`` names; messages name its lines ``path:N``."""
    if on_conflict not in ("error", "skip"):
        raise InvalidArgumentError(
            f"on_conflict must be one of {{'error', 'skip'}}, got {shown(on_conflict)}"
        )
    name = str(path)
    with _opened(path) as (f, copy), contextlib.ExitStack() as stack:
        # The vectors the check makes for records that come without one: the write never
        # asks the embedder, whose failure (a text it refuses, an endpoint that stops
        # answering) would come after some batches were committed.
        vectors = None if writer.embedder is None else stack.enter_context(_scratch())
        # Every line is checked before the first is stored: a bad line anywhere stores
        # nothing. A pipe's lines are checked as they are copied, so a bad one fails at
        # once, however much data follows it.
        _check(writer, _read(f, name, copy), name, on_conflict, vectors)
        source = f if copy is None else copy
        source.seek(0)
        if vectors is not None:
            vectors.seek(0)
        return _load(writer, _read(source, name), name, on_conflict, vectors)


def _load(
    writer: Writer, batches: _Batches, name: str, on_conflict: _OnConflict, vectors: BinaryIO | None
) -> int:
    """Stores the lines ``_check`` passed, the records without an embedding with the
    vector it made (from ``vectors``): the records ``_BATCH`` per transaction, then the
    history entries the store does not hold, in one."""
    added = 0
    history: list[tuple[HistoryEntry, tuple[int, ...]]] = []
    for lines in batches:
        batch = []
        for lineno, item in lines:
            if "history" in item:
                entry, given = _history(item, _at(name, lineno)), item["history"]
                history.append((entry, _compared(given)))
            else:
                batch.append(item)
        if vectors is not None:  # before any is skipped: the check made a row for each
            _give_vectors(batch, vectors, writer.sync.dim or 0, name)
        if on_conflict == "skip":
            taken = writer.db.existing_ids([str(b.get("id")) for b in batch], time.time())
            batch = [b for b in batch if str(b.get("id")) not in taken]
        for b in batch:
            b.pop("content_hash", None)  # recomputed from the text
        if batch:
            added += len(writer.add(batch, importing=True))
    entries = _new_history(writer.db, history)
    if entries:
        with writer.db.transaction() as conn:
            writer.db.insert_history(conn, entries)
    return added


def _give_vectors(batch: list[dict[str, Any]], vectors: BinaryIO, dim: int, name: str) -> None:
    """Gives each record of ``batch`` without an embedding the next row of ``vectors``,
    unless that row is ``_UNMADE``; the writer stores it as it stores a vector it made."""
    todo = [item for item in batch if item.get("embedding") is None]
    data = vectors.read(len(todo) * dim * 4)
    if len(data) != len(todo) * dim * 4:
        raise StorageError(f"{name!r} changed while it was imported: it has more records")
    rows = np.frombuffer(data, dtype=np.float32).reshape(len(todo), dim)
    for item, row in zip(todo, rows, strict=True):
        if not np.isnan(row[0]):
            item["embedding"] = row


def _new_history(
    db: Store, history: list[tuple[HistoryEntry, tuple[int, ...]]]
) -> list[HistoryEntry]:
    """The entries of ``history`` (each with the places ``_compared`` names) the store
    does not hold yet, compared with the stored history of their ids (read ``_BATCH``
    ids at a time): importing a file again (``on_conflict="skip"``) adds none, and the
    retry of an import killed before its history (written last) was committed adds it,
    for the records the first one stored too. A stored entry stands for one line."""
    lines: dict[str, list[int]] = {}  # id -> its entries' places in ``history``
    for i, (entry, _) in enumerate(history):
        lines.setdefault(entry[0].id, []).append(i)
    ids, held = list(lines), set[int]()
    for start in range(0, len(ids), _BATCH):
        stored: dict[str, list[tuple[Any, ...]]] = {}
        for found in db.history(ids[start : start + _BATCH]):
            stored.setdefault(found[0].id, []).append(_fields(found))
        for record_id, kept in stored.items():
            for i in lines.get(record_id, ()):
                entry, compared = history[i]
                want = [_fields(entry)[c] for c in compared]
                match = next((k for k in kept if [k[c] for c in compared] == want), None)
                if match is not None:
                    kept.remove(match)
                    held.add(i)
    return [entry for i, (entry, _) in enumerate(history) if i not in held]


def _fields(entry: HistoryEntry) -> tuple[Any, ...]:
    """A history entry's fields of ``_CARRIED``, then its change: compared as values (a
    stored REAL equals an int read)."""
    row, event, at, actor, next_id = entry
    return (*(getattr(row, c) for c in _CARRIED), event, at, actor, next_id)


def _compared(given: dict[str, Any]) -> tuple[int, ...]:
    """The places of ``_fields`` compared for a history line holding ``given`` (its
    fields, checked by ``_history``): all but the times it leaves to the import."""
    absent = _TIMED.difference(given)
    kept = [i for i, c in enumerate(_CARRIED) if c not in absent]
    return (*kept, *range(len(_CARRIED), len(_CARRIED) + 4))


def _check(
    writer: Writer, batches: _Batches, name: str, on_conflict: _OnConflict, vectors: BinaryIO | None
) -> None:
    """Raises for the first line the import would refuse (naming it), storing nothing:
    each record and history entry as ``load`` stores it, its embedding, an id given
    twice in the file, (``on_conflict="error"``) an id already stored, and a record
    without an embedding whose text the store's embedder does not embed. ``vectors``
    (with an embedder) is given a row per record without an embedding, in line order."""
    now, dim = time.time(), writer.sync.dim
    first_line: dict[str, int] = {}  # id -> the line that gives it
    # A store confined to a tenant (row-level security) refuses another's rows only as
    # they are written, a batch after others were committed: checked here first.
    field, _, who = writer.db.tenant.partition(":")
    for lines in batches:
        given: list[tuple[int, str]] = []
        vectors_given: list[tuple[int, FloatArray]] = []
        unembedded: list[tuple[int, str, str | None]] = []  # line, text, id given
        for lineno, item in lines:
            where = _at(name, lineno)
            if "history" in item:
                _confined(_history(item, where)[0], field, who, where)
                continue
            try:  # as exported: no default scope fills an unset field
                new = validate(item, now, {}, dim, importing=True)
            except InvalidArgumentError as e:
                raise type(e)(f"{where}: {e}") from None
            _confined(new, field, who, where)
            if new.embedding is not None:
                vectors_given.append((lineno, new.embedding))
            else:
                unembedded.append((lineno, new.text, new.id if new.id_given else None))
            if new.id_given:
                if new.id in first_line:
                    raise InvalidArgumentError(
                        f"{where}: id {new.id!r} is given twice in the file "
                        f"(first at line {first_line[new.id]})"
                    )
                first_line[new.id] = lineno
                given.append((lineno, new.id))
        if vectors_given:
            _check_vectors(name, vectors_given)
        taken = writer.db.existing_ids([i for _, i in given], time.time()) if given else set()
        if on_conflict == "error":
            for lineno, record_id in given:
                if record_id in taken:
                    raise DuplicateIdError(
                        f"{_at(name, lineno)}: id {record_id!r} is already stored "
                        "(on_conflict='skip' skips stored ids)",
                        id=record_id,
                        where=_at(name, lineno),
                    )
        if vectors is not None and unembedded:
            _scratch_write(vectors, _embed_unembedded(writer, name, unembedded, taken).tobytes())


def _embed_unembedded(
    writer: Writer, name: str, unembedded: list[tuple[int, str, str | None]], taken: set[str]
) -> FloatArray:
    """A row for each record of ``unembedded`` (line, text, id given): its text's vector,
    made as the writer makes it, or ``_UNMADE`` for a stored id (skipped: a retry with
    ``on_conflict="skip"`` embeds only what it adds)."""
    rows = np.full((len(unembedded), writer.sync.dim or 0), _UNMADE, dtype=np.float32)
    todo = [i for i, (_, _, rid) in enumerate(unembedded) if rid is None or rid not in taken]
    if todo:
        with writer.sync.writing():  # graph linking steps aside, as for the writer's model
            rows[todo] = _embedded(writer, name, [unembedded[i][:2] for i in todo])
    return rows


def _embedded(writer: Writer, name: str, texts: list[tuple[int, str]]) -> FloatArray:
    """The vectors of ``texts`` (each with its line), made as the writer makes them.
    A text the embedder refuses is named by its line, found by embedding halves of the
    batch (each one call) down to the text refused alone. An embedder that does not
    answer fails at once, at the batch's first line: asked again for each half, it
    would take its timeout as many times."""
    assert writer.embedder is not None
    try:
        return embed_texts(writer.embedder, writer.sync.dim, [t for _, t in texts])
    except EmbedderUnavailableError as e:
        raise EmbedderUnavailableError(
            f"{_at(name, texts[0][0])}: the record has no embedding, and the store's "
            f"embedder cannot make one: {e}"
        ) from None
    except InvalidArgumentError as e:
        if len(texts) == 1:
            raise type(e)(
                f"{_at(name, texts[0][0])}: the record has no embedding, and the store's "
                f"embedder refuses its text: {e}"
            ) from None
    half = len(texts) // 2
    return np.concatenate(
        (_embedded(writer, name, texts[:half]), _embedded(writer, name, texts[half:]))
    )


def _confined(record: Any, field: str, who: str, where: str) -> None:
    """Refuses a record or history entry of a tenant other than ``field``=``who`` (none
    when ``field`` is empty: a store bound to no tenant)."""
    if field and getattr(record, field) != who:
        raise InvalidArgumentError(
            f"{where}: this store is confined to the tenant {field}={who!r} (row-level "
            f"security) and the line's {field} is {shown(getattr(record, field))}"
        )


def _check_vectors(name: str, vectors: list[tuple[int, FloatArray]]) -> None:
    """The engine's checks of the embeddings, a batch at once; names the first bad line."""
    stack = np.stack([v for _, v in vectors])
    bad = np.flatnonzero(~coerce.usable_vectors(stack))
    if bad.size:
        i = int(bad[0])
        try:
            coerce.check_vectors(stack[i : i + 1], [vectors[i][0]], "embedding")
        except InvalidArgumentError as e:
            reason = str(e).split(": ", 1)[1]  # without the "record N" of one row
            raise InvalidArgumentError(f"{_at(name, vectors[i][0])}: {reason}") from None


def _history(line: dict[str, Any], where: str) -> HistoryEntry:
    """A history entry of an export, checked as a record is (and its change)."""
    item = line["history"]
    if len(line) != 1 or not isinstance(item, dict):
        raise InvalidArgumentError(f'{where}: a history line is {{"history": {{...}}}}')
    fields = dict(item)
    event, at = fields.pop("event", None), fields.pop("at", None)
    actor, next_id = fields.pop("by", None), fields.pop("next_id", None)
    if event not in _EVENTS:
        raise InvalidArgumentError(f"{where}: history event must be one of {_EVENTS}")
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise InvalidArgumentError(f"{where}: history 'at' must be a number")
    try:
        when = coerce.timestamp(at, "history 'at'")
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{where}: {e}") from None
    for name, value in (("by", actor), ("next_id", next_id)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentError(f"{where}: history {name!r} must be a str or null")
        if value is not None:  # stored after the records: refused before any of them
            try:
                coerce.clean(value, f"history {name!r}")
            except InvalidArgumentError as e:
                raise InvalidArgumentError(f"{where}: {e}") from None
    fields.pop("content_hash", None)
    fields.pop("embedding", None)
    try:
        version = validate(fields, time.time(), {}, None, importing=True)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{where}: {e}") from None
    return version.row(0, 0, None), event, when, actor, next_id


def _at(name: str, lineno: int) -> str:
    """Where a message puts a line: ``name:N``."""
    return f"{name}:{lineno}"


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[tuple[BinaryIO, BinaryIO | None]]:
    """The file to import, and where it is to be copied as it is checked: ``None`` for
    a file, read again for the write, and for a pipe or a device (``/dev/stdin``, a
    FIFO, ``/dev/fd/N``), which can be read once, an unnamed temporary file."""
    name = str(path)
    try:
        f = path.open("rb")
    except (FileNotFoundError, NotADirectoryError):
        raise NotFoundError(f"no file {name!r} to import") from None
    except OSError as e:
        with contextlib.suppress(OSError):  # a name too long fails this look too
            if path.is_dir():  # IsADirectoryError, or PermissionError on Windows
                raise InvalidArgumentError(f"{name!r} is a directory, not a JSONL file") from None
        raise StorageError(f"cannot read {name!r}: {e.strerror or e}") from None
    with f:
        if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            yield f, None
            return
        with _scratch() as copy:
            yield f, copy


@contextlib.contextmanager
def _scratch() -> Iterator[BinaryIO]:
    """An unnamed temporary file, gone when closed (or when the process ends)."""
    with contextlib.ExitStack() as stack:
        try:
            scratch = stack.enter_context(tempfile.TemporaryFile())
        except OSError as e:
            raise StorageError(f"cannot make a temporary file: {e.strerror or e}") from None
        yield scratch


def _scratch_write(scratch: BinaryIO, data: bytes) -> None:
    try:
        scratch.write(data)
    except OSError as e:  # a full disk
        raise StorageError(f"cannot write a temporary file: {e.strerror or e}") from None


def _read(f: BinaryIO, name: str, copy: BinaryIO | None = None) -> _Batches:
    """The file's objects with their line numbers, ``_BATCH`` at a time; blank lines
    are skipped. Each line read is written to ``copy`` too, when given."""
    batch: list[tuple[int, dict[str, Any]]] = []
    lineno = 0
    while True:
        try:
            raw = f.readline()
        except OSError as e:
            raise StorageError(f"cannot read {name!r}: {e.strerror or e}") from None
        if not raw:
            break
        if copy is not None:
            _scratch_write(copy, raw)
        lineno += 1
        item = _parse(raw, lineno, _at(name, lineno))
        if item is None:
            continue
        batch.append((lineno, item))
        if len(batch) == _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _parse(raw: bytes, lineno: int, where: str) -> dict[str, Any] | None:
    """One line's JSON object (None for a blank line); a line that is not one is
    ``CorruptFileError``: the file is damaged or not an export."""
    try:
        # Only the first line may start with a byte order mark.
        line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise CorruptFileError(
            f"{where}: not UTF-8 text (byte {e.start + 1} of the line cannot be decoded)"
        ) from None
    if not line.strip():
        return None
    try:
        item = json_depth.loads(line)
    except RecursionError:
        raise CorruptFileError(f"{where}: its JSON is nested too deeply to read") from None
    except json.JSONDecodeError as e:
        raise CorruptFileError(f"{where}: not JSON: {e}") from None
    except ValueError as e:  # an integer longer than sys.get_int_max_str_digits()
        raise CorruptFileError(f"{where}: a number in it cannot be read: {e}") from None
    if not isinstance(item, dict):
        raise CorruptFileError(f"{where}: not a JSON object")
    return item
