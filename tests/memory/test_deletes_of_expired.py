"""A record that expired is gone for every read, though maintenance's sweep has not
deleted it yet, and the deletes agree, on both backends: ``delete`` of its id is
``UnknownIdError`` (as ``get`` and ``update``), and ``delete_all``, ``prune`` and
``replace`` neither count it nor return it. Its history ends where it expired, deleted
by ``"expire"``, as the sweep then says; a ``replace`` that admits it deletes it so, and
a new record takes its id.

The clock the store reads is moved past the expiry (no waiting), with the sweep held off;
where the expiry comes while a delete runs, it moves once the delete's transaction has
begun (its change number taken), after the look the delete takes before it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import Memory, UnknownIdError
from memlane._memory.writer import Writer

SCOPE = {"user_id": "u"}
OLD = time.time() - 90 * 86400


class Clock:
    """The wall clock as the store reads it, moved on at will; the maintenance sweep
    held off (``sweep`` runs it once, as maintenance does)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ahead = 0.0
        self._expire = Writer.expire
        real = time.time
        monkeypatch.setattr(Writer, "expire", lambda self, now: 0)
        monkeypatch.setattr(time, "time", lambda: real() + self.ahead)

    def pass_expiry(self) -> None:
        """Past the expiry of every record added with ``ttl=60`` until now."""
        self.ahead += 120

    def at_transaction(self, mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
        """Passes the expiry once the next write's transaction has taken its change."""
        taken = mem._db.next_seq

        def next_seq(conn: Any) -> int:
            self.pass_expiry()
            monkeypatch.setattr(mem._db, "next_seq", taken)
            return taken(conn)

        monkeypatch.setattr(mem._db, "next_seq", next_seq)

    def sweep(self, mem: Memory) -> int:
        return self._expire(mem._writer, time.time())


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


def ends(mem: Memory, record_id: str) -> list[tuple[str | None, str | None]]:
    return [(v.ended, v.ended_by) for v in mem.history(record_id)]


def test_delete_of_an_expired_id_is_unknown_and_leaves_its_history(
    make_store: StoreFactory, clock: Clock
) -> None:
    mem = make_store("delete-id")
    rec = mem.add("the door code is 1234", ttl=60, **SCOPE)
    clock.pass_expiry()
    with pytest.raises(UnknownIdError):
        mem.get(rec.id)
    with pytest.raises(UnknownIdError):
        mem.delete(rec.id)
    assert ends(mem, rec.id) == [("delete", "expire")]
    assert clock.sweep(mem) == 1
    assert ends(mem, rec.id) == [("delete", "expire")]


def test_delete_all_and_prune_leave_out_what_expired(
    make_store: StoreFactory, clock: Clock
) -> None:
    mem = make_store("filtered")
    kept = mem.add("an old note", created_at=OLD, **SCOPE)
    gone = mem.add("an old short-lived note", created_at=OLD, ttl=60, **SCOPE)
    clock.pass_expiry()
    assert mem.count(**SCOPE) == 1
    pruned = mem.prune(max_age_days=30, dry_run=True, **SCOPE)
    assert [r.id for r in pruned] == [kept.id]
    assert [r.id for r in mem.prune(max_age_days=30, **SCOPE)] == [kept.id]
    assert ends(mem, gone.id) == [("delete", "expire")]
    other = mem.add("a note", **SCOPE)
    assert mem.delete_all(**SCOPE) == 1
    assert ends(mem, gone.id) == [("delete", "expire")]
    assert ends(mem, other.id) == [("delete", None)]
    assert clock.sweep(mem) == 1


def test_replace_deletes_an_expired_record_by_expire_and_passes_its_id_on(
    make_store: StoreFactory, clock: Clock
) -> None:
    mem = make_store("replace")
    live = mem.add("note a", **SCOPE)
    mem.add("note b", id="b", ttl=60, **SCOPE)
    clock.pass_expiry()
    sub = mem.events.subscribe(**SCOPE)
    removed, stored = mem.replace([{"text": "note b again", "id": "b", **SCOPE}], **SCOPE)
    assert removed == 1
    assert [r.id for r in stored] == ["b"] and mem.get("b").text == "note b again"
    assert ends(mem, "b") == [("delete", "expire"), (None, None)]
    assert ends(mem, live.id) == [("delete", "replace")]
    told = []
    while (event := sub.get(timeout=0)) is not None:
        told.append((event["type"], event["id"], event.get("by")))
    assert told == [("expire", "b", None), ("delete", live.id, "replace"), ("add", "b", None)]
    assert clock.sweep(mem) == 0
    sub.close()


def _delete(mem: Memory, record_id: str) -> Any:
    with pytest.raises(UnknownIdError):
        mem.delete(record_id)


CALLS: dict[str, Callable[[Memory, str], Any]] = {
    "delete": _delete,
    "delete_all": lambda mem, _: mem.delete_all(**SCOPE),
    "prune": lambda mem, _: mem.prune(max_age_days=30, **SCOPE),
    "replace": lambda mem, _: mem.replace([], **SCOPE),
}
# What each returns for the record that expired meanwhile: nothing deleted.
NOTHING: dict[str, Any] = {"delete": None, "delete_all": 0, "prune": [], "replace": (0, [])}
# What the sweep then deletes: the record, unless the replace admitting it did (by expire).
SWEPT = {"delete": 1, "delete_all": 1, "prune": 1, "replace": 0}


@pytest.mark.parametrize("call", list(CALLS))
def test_an_expiry_while_a_delete_runs_is_judged_in_its_transaction(
    make_store: StoreFactory, clock: Clock, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    mem = make_store(f"meanwhile-{call}")
    rec = mem.add("an old short-lived note", created_at=OLD, ttl=60, **SCOPE)
    clock.at_transaction(mem, monkeypatch)
    assert CALLS[call](mem, rec.id) == NOTHING[call]
    assert ends(mem, rec.id) == [("delete", "expire")]
    assert clock.sweep(mem) == SWEPT[call]
    assert ends(mem, rec.id) == [("delete", "expire")]


def test_an_expired_records_id_is_free_for_add_and_import(
    make_store: StoreFactory, clock: Clock, tmp_path: Any
) -> None:
    mem = make_store("ids")
    mem.add("code 1234", id="x", ttl=60, **SCOPE)
    mem.add("code 5678", id="y", ttl=60, **SCOPE)
    mem.add("code 9999", id="z", ttl=60, **SCOPE)
    clock.pass_expiry()
    if mem._db.shared:  # as a process that has not yet applied another's expiring records
        mem._sync.expiring = False
    sub = mem.events.subscribe(**SCOPE)
    assert mem.add("code 4321", id="x", **SCOPE).id == "x"
    assert mem.get("x").text == "code 4321"
    assert ends(mem, "x") == [("delete", "expire"), (None, None)]
    told = []
    while (event := sub.get(timeout=0)) is not None:
        told.append((event["type"], event["id"]))
    assert told == [("expire", "x"), ("add", "x")]
    sub.close()
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"id": "y", "text": "imported y", "user_id": "u"}\n')
    assert mem.import_jsonl(lines) == 1
    lines.write_text('{"id": "z", "text": "imported z", "user_id": "u"}\n')
    assert mem.import_jsonl(lines, on_conflict="skip") == 1
    assert [mem.get(i).text for i in "yz"] == ["imported y", "imported z"]
    assert clock.sweep(mem) == 0
