"""What another process sharing a PostgreSQL store tells of a record's updates: each
update's record is the one it wrote, not the next version with the access counts a flush
since added. A renew keeps no history entry (a TTL refreshed at every read would grow it),
so only the renewing process tells it, and ``history``, ``export_jsonl`` and an import of
that export show no renew on either backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import Memory
from pg_server import PgServer

SCOPE = {"user_id": "u"}


@pytest.fixture
def two(pg_server: PgServer, tmp_path: Path) -> Iterator[tuple[Memory, Memory]]:
    """Two processes' handles of one PostgreSQL store (each with its own cache)."""
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        yield factory("shared"), factory("shared", cache_dir=tmp_path / "other-cache")
    finally:
        factory.close_all()


def drain(sub: Any) -> list[dict[str, Any]]:
    out = []
    while (event := sub.get(timeout=0)) is not None:
        out.append(event)
    return out


def renewed_and_updated(mem: Memory) -> str:
    """A record's add, then updates and renews, with accesses flushed between."""
    rec = mem.add("the door code is 1234", ttl=60, **SCOPE)
    mem.update(rec.id, importance=0.9)
    assert [h.record.id for h in mem.search("door code", mode="text", **SCOPE)] == [rec.id]
    mem._writer.flush_access()
    assert mem.renew([rec.id], ttl=3600) == 1
    mem.update(rec.id, importance=0.8)
    assert mem.renew([rec.id], ttl=7200) == 1
    return rec.id


def test_another_process_is_told_what_each_update_wrote(two: tuple[Memory, Memory]) -> None:
    writer, other = two
    mine, theirs = writer.events.subscribe(**SCOPE), other.events.subscribe(**SCOPE)
    record_id = renewed_and_updated(writer)
    told = drain(mine)
    assert [e["type"] for e in told] == ["add", "update", "update", "update", "update"]
    # The other process's write comes after those: they are told to it first.
    barrier = other.add("written last, by the other process", **SCOPE)
    theirs_told = drain(theirs)
    assert [(e["type"], e["id"]) for e in theirs_told[-1:]] == [("add", barrier.id)]

    # The add and the two updates (the renews keep no entry), each as its writer told
    # it but for the expiry a later renew moved.
    def unexpiring(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**e, "record": {**e["record"], "expires_at": None}} for e in events]

    assert unexpiring(theirs_told[:-1]) == unexpiring([told[0], told[1], told[3]])
    assert {e["id"] for e in told} == {record_id}
    mine.close()
    theirs.close()


def test_renews_are_no_version_of_the_history_or_the_export(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    mem = make_store("renews")
    record_id = renewed_and_updated(mem)
    made = ["add", "update", "update"]
    assert [v.event for v in mem.history(record_id)] == made
    path = tmp_path / "export.jsonl"
    mem.export_jsonl(path)
    assert '"renew"' not in path.read_text()
    copy = make_store("copy")
    assert copy.import_jsonl(path) == 1
    assert [v.event for v in copy.history(record_id)] == made
    assert copy.get(record_id) == mem.get(record_id)
    if make_store.backend == "embedded":  # no other process to tell
        assert [entry[1] for entry in mem._db.history([record_id])] == ["update", "update"]
