"""Facts that expire, and two timelines (issue 34), on both backends.

A record with ``expires_at`` (or ``ttl``) is returned by no read from then on (search,
list, count, get, update, supersede) and maintenance removes it, its last version kept
in the history. ``created_at``/``valid_to`` say when a fact held in the world;
``recorded_at`` (set by the store) when the store learned it: ``search(as_of=t)``
answers what held at ``t`` as known now, ``search(known_at=t)`` what the store knew at
``t``."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import psycopg
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import InvalidArgumentError, Memory, UnknownIdError
from memlane.storage import SCHEMA_VERSION
from memlane.storage.postgres import PostgresTarget

DAY = 86400.0


def wait_until(check: object, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_an_expired_memory_is_invisible_to_every_read(make_store: StoreFactory) -> None:
    mem = make_store("ttl", WordHashEmbedder())
    short = mem.add("the door code is 1234", ttl=3600, user_id="u")
    later = mem.add("the wifi password is hunter2", expires_at=time.time() + 3600, user_id="u")
    keep = mem.add("the door is red", user_id="u")
    assert {h.record.id for h in mem.search("door code", 5, user_id="u")} >= {short.id}
    assert mem.count(user_id="u") == 3
    # It expires a moment from now: the reads above ran before, however long they took.
    expires_at = mem.update(short.id, ttl=0.05).expires_at
    assert expires_at is not None
    while time.time() <= expires_at:
        time.sleep(0.01)
    assert short.id not in {h.record.id for h in mem.search("door code", 5, user_id="u")}
    assert {r.id for r in mem.list(user_id="u")} == {later.id, keep.id}
    assert mem.count(user_id="u") == 2
    with pytest.raises(UnknownIdError):
        mem.get(short.id)
    with pytest.raises(UnknownIdError):
        mem.update(short.id, text="the door code is 9999")
    with pytest.raises(UnknownIdError):
        mem.supersede(short.id, "the door code is 9999")
    # Maintenance removes it; its last version stays in the history.
    wait_until(lambda: [v.ended_by for v in mem.history(short.id)] == [None, "expire"])
    assert mem.get(later.id).expires_at == later.expires_at


def test_every_write_path_takes_an_expiry(make_store: StoreFactory, tmp_path: Path) -> None:
    mem = make_store("ttl", None)
    now = time.time()
    many = mem.add_many(
        [{"text": "a", "ttl": 60}, {"text": "b", "expires_at": now + 120}, {"text": "c"}]
    )
    assert [r.expires_at is not None for r in many] == [True, True, False]
    before = time.time()
    new = mem.supersede(many[2].id, "c, changed", ttl=30)
    refreshed = mem.update(many[0].id, ttl=3600)
    after = time.time()
    # Counted from the call, however long it took.
    assert new.expires_at is not None and before + 30 <= new.expires_at <= after + 30
    assert refreshed.expires_at is not None
    assert before + 3600 <= refreshed.expires_at <= after + 3600
    assert mem.get(many[0].id).recorded_at == many[0].recorded_at  # learned once
    mem.export_jsonl(tmp_path / "out.jsonl")
    other = make_store("copy", None)
    other.import_jsonl(tmp_path / "out.jsonl")
    assert other.get(many[1].id).expires_at == many[1].expires_at
    assert other.get(many[1].id).recorded_at == many[1].recorded_at
    for bad, match in [
        ({"ttl": 0}, "ttl"),
        ({"ttl": -5}, "ttl"),
        ({"expires_at": now - 1}, "not in the future"),
        ({"expires_at": now + 60, "ttl": 60}, "not both"),
        ({"expires_at": 1e17}, "expires_at"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            mem.add("refused", **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="unknown key"):
        mem.add_many([{"text": "x", "recorded_at": now}])  # the store's to set


def test_as_of_and_known_at_answer_the_backdated_case_differently(
    make_store: StoreFactory,
) -> None:
    mem = make_store("two", WordHashEmbedder())
    vegan = mem.add("Alice is vegan", created_at=time.time() - 30 * DAY, user_id="alice")
    assert vegan.recorded_at == pytest.approx(time.time(), abs=60)
    yesterday = time.time() - DAY
    # In the world, it held yesterday; the store learned it only today.
    held = mem.search("is Alice vegan", 3, as_of=yesterday, user_id="alice")
    assert [h.record.id for h in held] == [vegan.id]
    assert mem.search("is Alice vegan", 3, known_at=yesterday, user_id="alice") == []
    assert [h.record.id for h in mem.search("Alice vegan", 3, known_at=time.time())] == [vegan.id]


def test_known_at_sees_a_version_as_current_until_it_was_superseded(
    make_store: StoreFactory,
) -> None:
    mem = make_store("two", WordHashEmbedder())
    paris = mem.add("Alice lives in Paris", user_id="alice")
    time.sleep(0.05)
    between = time.time()
    time.sleep(0.05)
    # Backdated: she moved a month ago; the store learns it now.
    berlin = mem.supersede(paris.id, "Alice lives in Berlin", at=time.time() - 0.01)
    q = "where does Alice live"
    assert [h.record.id for h in mem.search(q, 3, user_id="alice")] == [berlin.id]
    assert [h.record.id for h in mem.search(q, 3, known_at=between, user_id="alice")] == [paris.id]
    both = mem.search(q, 3, known_at=between, as_of=between, user_id="alice")
    assert [h.record.id for h in both] == [paris.id]
    with pytest.raises(InvalidArgumentError, match="not both"):
        mem.search(q, 3, known_at=between, include_superseded=True)


def test_as_of_with_known_at_is_the_truth_then_as_the_store_knew_it(
    make_store: StoreFactory,
) -> None:
    mem = make_store("two", WordHashEmbedder())
    start = time.time() - 30 * DAY
    paris = mem.add("alice lives in paris", created_at=start, user_id="alice")
    time.sleep(0.05)
    before = time.time()
    time.sleep(0.05)
    berlin = mem.supersede(paris.id, "alice lives in berlin", at=start + 14 * DAY)
    time.sleep(0.05)
    after = time.time()

    def found(**when: float) -> list[str]:
        return [h.record.id for h in mem.search("alice lives", 3, user_id="alice", **when)]

    # Before the supersede the store held Paris open-ended: true 20 days in, as it knew.
    assert found(as_of=start + 20 * DAY, known_at=before) == [paris.id]
    assert found(as_of=start + 20 * DAY, known_at=after) == [berlin.id]
    # Paris was true on the first day, as the store knows it before and after.
    assert found(as_of=start + 1, known_at=before) == [paris.id]
    assert found(as_of=start + 1, known_at=after) == [paris.id]


def test_an_update_of_the_text_is_known_from_the_update_on(make_store: StoreFactory) -> None:
    mem = make_store("two", WordHashEmbedder())
    paris = mem.add("Alice lives in Paris", user_id="alice")
    time.sleep(0.05)
    between = time.time()
    time.sleep(0.05)
    tagged = mem.update(paris.id, metadata={"source": "chat"})
    assert tagged.recorded_at == paris.recorded_at  # the same text: known as before
    berlin = mem.update(paris.id, text="Alice lives in Berlin")
    assert berlin.recorded_at > between and mem.get(paris.id).recorded_at == berlin.recorded_at
    # Before the update the store did not know the new text: it is not found then.
    for q in ("Alice lives in Berlin", "Alice lives in Paris"):
        assert mem.search(q, 3, known_at=between, user_id="alice") == []
    assert [h.record.text for h in mem.search("Alice Berlin", 3, user_id="alice")] == [
        "Alice lives in Berlin"
    ]
    assert mem.history(paris.id)[0].record.text == "Alice lives in Paris"


def test_a_sqlite_store_of_schema_2_gains_the_columns(tmp_path: Path) -> None:
    path = tmp_path / "old"
    with Memory(path, None) as mem:
        a = mem.add("first", created_at=time.time() - 10 * DAY)
        mem.update(a.id, text="first, changed")
        b = mem.add("second")
    db = sqlite3.connect(path / "memory.db")
    db.execute("DROP INDEX records_expires")
    for table in ("records", "history"):
        db.execute(f"ALTER TABLE {table} DROP COLUMN expires_at")
        db.execute(f"ALTER TABLE {table} DROP COLUMN recorded_at")
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with Memory(path, None) as mem:
        # Learned when first written: the first version's updated_at (the add).
        first = mem.get(a.id)
        assert first.recorded_at == pytest.approx(a.updated_at, abs=1e-6)
        assert first.recorded_at < first.updated_at
        assert mem.get(b.id).recorded_at == pytest.approx(b.updated_at, abs=1e-6)
        assert mem.get(b.id).expires_at is None
        mem.add("third", ttl=60)
    db = sqlite3.connect(path / "memory.db")
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    db.close()


def test_a_postgres_store_of_schema_4_gains_the_columns(pg_server: object, tmp_path: Path) -> None:
    url = pg_server.url(schema="oldfive")  # type: ignore[attr-defined]
    schema = PostgresTarget.parse(url).schema
    with Memory(url, None, cache_dir=tmp_path / "c1") as mem:
        a = mem.add("first")
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute(f"DROP INDEX {schema}.records_expires")
        for table in ("records", "history"):
            conn.execute(f"ALTER TABLE {schema}.{table} DROP COLUMN expires_at")
            conn.execute(f"ALTER TABLE {schema}.{table} DROP COLUMN recorded_at")
        conn.execute(f"DELETE FROM {schema}.migrations WHERE version >= 5")
    with Memory(url, None, cache_dir=tmp_path / "c2") as mem:
        assert mem.get(a.id).recorded_at == pytest.approx(a.updated_at, abs=1e-6)
        assert mem.add("second", ttl=60).expires_at is not None
