"""Export to and import from JSON Lines: one record per line, every field, then one line
per history entry (``{"history": {...the replaced version's fields, "event", "at", "by",
"next_id"}}``)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from memlane._memory.access import AccessLog
from memlane._memory.encoding import record, validate
from memlane._memory.writer import Writer
from memlane.errors import InvalidArgumentError
from memlane.storage import Store
from memlane.storage.base import HistoryEntry

_EVENTS = ("update", "supersede", "delete")

# Records per transaction of an import.
_BATCH = 1000


def export(db: Store, access: AccessLog, path: Path, embeddings: bool) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for row in db.iter_rows(embedding=embeddings):
            rec = record(row, access.get(row.rowid), embeddings)
            f.write(json.dumps(rec.to_dict(embedding=embeddings), ensure_ascii=False) + "\n")
            n += 1
        for row, event, at, actor, next_id in db.iter_history():
            entry = record(row, None).to_dict(embedding=False)
            entry.update(event=event, at=at, by=actor, next_id=next_id)
            f.write(json.dumps({"history": entry}, ensure_ascii=False) + "\n")
    return n


def load(writer: Writer, path: Path, on_conflict: Literal["error", "skip"]) -> int:
    if on_conflict not in ("error", "skip"):
        raise InvalidArgumentError(
            f"on_conflict must be one of {{'error', 'skip'}}, got {on_conflict!r}"
        )
    added = 0
    skipped: set[str] = set()
    history: list[HistoryEntry] = []
    for lines in _read(path):
        batch = []
        for lineno, item in lines:
            if "history" in item:
                history.append(_history(item, f"{path}:{lineno}"))
            else:
                batch.append(item)
        if on_conflict == "skip":
            taken = writer.db.existing_ids([str(b.get("id")) for b in batch])
            skipped |= taken
            batch = [b for b in batch if str(b.get("id")) not in taken]
        for b in batch:
            b.pop("content_hash", None)  # recomputed from the text
        if batch:
            added += len(writer.add(batch, importing=True))
    # The history of a skipped record is the store's own already.
    entries = [e for e in history if e[0].id not in skipped]
    if entries:
        with writer.db.transaction() as conn:
            writer.db.insert_history(conn, entries)
    return added


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
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise InvalidArgumentError(f"{where}: history 'at' must be a finite number")
    for name, value in (("by", actor), ("next_id", next_id)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentError(f"{where}: history {name!r} must be a str or null")
    fields.pop("content_hash", None)
    fields.pop("embedding", None)
    try:
        version = validate(fields, time.time(), {}, None, importing=True)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{where}: {e}") from None
    return version.row(0, 0, None), event, float(at), actor, next_id


def _read(path: Path) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    batch: list[tuple[int, dict[str, Any]]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidArgumentError(f"{path}:{lineno}: not JSON: {e}") from None
            if not isinstance(item, dict):
                raise InvalidArgumentError(f"{path}:{lineno}: not a JSON object")
            batch.append((lineno, item))
            if len(batch) == _BATCH:
                yield batch
                batch = []
    if batch:
        yield batch
