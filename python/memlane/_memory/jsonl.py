"""Export to and import from JSON Lines: one record per line, every field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from memlane._memory.access import AccessLog
from memlane._memory.encoding import record
from memlane._memory.writer import Writer
from memlane.errors import InvalidArgumentError
from memlane.storage import Store

# Records per transaction of an import.
_BATCH = 1000


def export(db: Store, access: AccessLog, path: Path, embeddings: bool) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for row in db.iter_rows(embedding=embeddings):
            rec = record(row, access.get(row.rowid), embeddings)
            f.write(json.dumps(rec.to_dict(embedding=embeddings), ensure_ascii=False) + "\n")
            n += 1
    return n


def load(writer: Writer, path: Path, on_conflict: Literal["error", "skip"]) -> int:
    if on_conflict not in ("error", "skip"):
        raise InvalidArgumentError(
            f"on_conflict must be one of {{'error', 'skip'}}, got {on_conflict!r}"
        )
    added = 0
    for batch in _read(path):
        if on_conflict == "skip":
            taken = writer.db.existing_ids([str(b.get("id")) for b in batch])
            batch = [b for b in batch if str(b.get("id")) not in taken]
        for b in batch:
            b.pop("content_hash", None)  # recomputed from the text
        added += len(writer.add(batch, importing=True))
    return added


def _read(path: Path) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
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
            batch.append(item)
            if len(batch) == _BATCH:
                yield batch
                batch = []
    if batch:
        yield batch
