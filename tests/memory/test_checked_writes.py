"""Writes whose outcome depends on records' state judge it inside their own transaction,
once every other writer's commit is applied, on both backends: ``add_many(consume=)``
stores its items only while every record it consumes is current, ``delete_all``,
``prune`` and ``evict`` delete only what matches then, and two evictions of one scope
leave its cap. Races run with two threads on one ``Memory`` (both backends) and two
processes on one PostgreSQL schema; "another process" is also a second ``Memory`` on
the schema, with its own engine, changing a record at a chosen instant."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import SlowEmbedder, StoreFactory, WordHashEmbedder
from memlane import ConflictError, InvalidArgumentError, Memory

_names = itertools.count()
SCOPE = {"user_id": "alice"}


def _entries(mem: Memory, n: int) -> list[str]:
    items = [{"text": f"turn {i} about bees", "table": "short_term", **SCOPE} for i in range(n)]
    return [r.id for r in mem.add_many(items)]


# -- add_many(consume=) ---------------------------------------------------------------------


def test_consume_deletes_the_records_in_the_same_change(make_store: StoreFactory) -> None:
    mem = make_store("consume", WordHashEmbedder())
    ids = _entries(mem, 3)
    seq = mem._sync.seq
    (summary,) = mem.add_many([{"text": "a summary of bees", **SCOPE}], consume=ids)
    assert mem._sync.seq == seq + 1  # one change
    assert mem.count("short_term") == 0 and mem.count("memories") == 1
    assert mem.get(summary.id).text == "a summary of bees"
    assert [(v.ended, v.ended_by) for v in mem.history(ids[0])] == [("delete", "add_many")]
    # A record consumed may pass its id on to an item.
    (again,) = mem.add_many(
        [{"text": "the summary, reworded", "id": summary.id}], consume=[summary.id]
    )
    assert again.id == summary.id and mem.get(summary.id).text == "the summary, reworded"
    # Items need not be given: the records go, checked, and nothing is added.
    rest = _entries(mem, 2)
    assert mem.add_many([], consume=rest) == [] and mem.count("short_term") == 0


def test_consume_of_a_record_gone_or_superseded_stores_nothing(make_store: StoreFactory) -> None:
    mem = make_store("consume-gone", WordHashEmbedder())
    ids = _entries(mem, 3)
    mem.delete(ids[1])
    with pytest.raises(ConflictError, match=f"{ids[1]!r}.*not stored"):
        mem.add_many([{"text": "a summary", **SCOPE}], consume=ids)
    assert mem.count("memories") == 0 and mem.count("short_term") == 2
    with pytest.raises(ConflictError, match="not stored"):
        mem.add_many([{"text": "a summary", **SCOPE}], consume=["never-stored"])
    old = mem.add("Alice lives in Paris", **SCOPE)
    mem.supersede(old.id, "Alice lives in Berlin")
    with pytest.raises(ConflictError, match="superseded"):
        mem.add_many([{"text": "Alice moved", **SCOPE}], consume=[ids[0], old.id])
    assert mem.count("short_term") == 2 and mem.count("memories") == 2
    expiring = mem.add("a code valid for a moment", ttl=0.001, table="short_term")
    with pytest.raises(ConflictError, match="not stored"):
        mem.add_many([{"text": "the code is gone"}], consume=[expiring.id])


@pytest.mark.parametrize(
    ("consume", "message"),
    [
        ("abc", "consume takes a list of record ids or records, got str"),
        (b"abc", "consume takes a list of record ids or records, got bytes"),
        ({"a": 1}, "consume takes a list of record ids or records, got dict"),
        (7, "consume takes a list of record ids or records, got int"),
        (["a", 7], r"consume\[1\] must be a str, got int"),
        (["a", " "], r"consume\[1\] must not be empty"),
        (["a\x00b"], r"consume\[0\] contains a NUL character"),
    ],
)
def test_consume_is_checked_before_anything_is_stored(
    make_store: StoreFactory, consume: Any, message: str
) -> None:
    emb = WordHashEmbedder()
    mem = make_store("consume-args", emb)
    ids = _entries(mem, 2)
    calls = emb.calls
    with pytest.raises(InvalidArgumentError, match=message):
        mem.add_many([{"text": "a summary"}], consume=consume)
    assert emb.calls == calls  # refused before the embedding
    assert mem.count() == 2 and all(i in mem for i in ids)


def test_consume_refuses_an_item_that_duplicates_a_record_it_deletes(
    make_store: StoreFactory,
) -> None:
    mem = make_store("consume-dup", WordHashEmbedder())
    old = mem.add("Alice keeps bees", **SCOPE)
    with pytest.raises(InvalidArgumentError, match=r"duplicate of .*which consume deletes"):
        mem.add_many([{"text": "Alice keeps bees", "unique": True, **SCOPE}], consume=[old.id])
    assert mem.count() == 1 and old.id in mem
    # Without unique=True the item is stored as given.
    (new,) = mem.add_many([{"text": "Alice keeps bees", **SCOPE}], consume=[old.id])
    assert [r.id for r in mem.list()] == [new.id]


def test_two_threads_consuming_the_same_records(make_store: StoreFactory) -> None:
    """One stores while the other waits for its embedding: the later stores nothing."""
    emb = SlowEmbedder()
    mem = make_store("consume-threads", emb)
    ids = _entries(mem, 4)
    errors: list[BaseException] = []

    def slow() -> None:
        try:
            mem.add_many([{"text": "slow: summary one", **SCOPE}], consume=ids)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=slow)
    t.start()
    try:
        assert emb.embedding.wait(60)
        (first,) = mem.add_many([{"text": "summary two", **SCOPE}], consume=ids[1:])
    finally:
        emb.go.set()
        t.join()
    assert len(errors) == 1 and isinstance(errors[0], ConflictError), errors
    assert [r.id for r in mem.list("memories")] == [first.id]
    assert [r.id for r in mem.list("short_term")] == ids[:1]


_CONSUMER = """
import json, sys, time
from pathlib import Path
from memlane import Memory, ConflictError
url, cache, writer, ids, go = sys.argv[1:6]
mem = Memory(url, None, cache_dir=cache)
print("READY", flush=True)
while not Path(go).exists():
    time.sleep(0.002)
try:
    mem.add_many([{"text": f"summary by {writer}"}], consume=json.loads(ids))
    out = "ok"
except ConflictError:
    out = "ConflictError"
mem.close()
print(json.dumps(out), flush=True)
"""

_EVICTOR = """
import json, sys, time
from pathlib import Path
from memlane import Memory
url, cache, writer, ids, go = sys.argv[1:6]
mem = Memory(url, None, cache_dir=cache)
print("READY", flush=True)
while not Path(go).exists():
    time.sleep(0.002)
out = [r.id for r in mem.evict(10, user_id="alice")]
mem.close()
print(json.dumps(out), flush=True)
"""


def _race(factory: StoreFactory, name: str, script: str, arg: str, tmp_path: Path) -> list[Any]:
    """Runs ``script`` in two processes on store ``name`` at once; their last lines."""
    url = str(factory.location(name))
    go = tmp_path / f"go-{name}"
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                script,
                url,
                str(tmp_path / f"c{name}{w}"),
                str(w),
                arg,
                str(go),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(2)
    ]
    for child in children:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "READY", child.stderr.read() if child.stderr else ""
    go.touch()
    results = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_two_processes_consuming_the_same_records_on_postgres(
    pg_server: Any, tmp_path: Path
) -> None:
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        for _ in range(3):
            name = f"consume{next(_names)}"
            mem = factory(name)
            ids = [r.id for r in mem.add_many([{"text": f"turn {i}"} for i in range(6)])]
            results = _race(factory, name, _CONSUMER, json.dumps(ids), tmp_path)
            assert sorted(results) == ["ConflictError", "ok"]
            mem._sync.follow()
            assert [r.text for r in mem.list()] in (["summary by 0"], ["summary by 1"])
            mem.close()
    finally:
        factory.close_all()


# -- deletes chosen by state ----------------------------------------------------------------


def _in_transaction(mem: Memory, act: Callable[[], object]) -> list[int]:
    """Makes ``mem``'s next write run ``act`` once its transaction has begun and before it
    takes its change number: the instant another process's commit comes between a
    delete's look at the records and its delete. Returns a list that counts the calls."""
    db = mem._sync.db
    real = db.next_seq
    done: list[int] = []

    def next_seq(conn: Any) -> int:
        if not done:
            done.append(1)
            act()
        return real(conn)

    db.next_seq = next_seq  # type: ignore[method-assign]
    return done


DELETES: dict[str, Callable[[Memory], object]] = {
    "delete_all": lambda mem: mem.delete_all(filters={"evergreen": False}, **SCOPE),
    "prune": lambda mem: mem.prune(keep_importance_at_least=0.9, **SCOPE),
    "evict": lambda mem: mem.evict(1, **SCOPE),
}


@pytest.mark.parametrize("call", sorted(DELETES))
def test_a_record_another_process_pinned_meanwhile_stays(
    pg_server: Any, tmp_path: Path, call: str
) -> None:
    """Memory ``b`` (another process's view) pins a memory evergreen after ``a``'s delete
    looked at the records: ``a`` deletes the others and keeps it."""
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        name = f"pin{next(_names)}"
        a = factory(name, WordHashEmbedder(), cache_dir=tmp_path / "ca")
        b = factory(name, WordHashEmbedder(), cache_dir=tmp_path / "cb")
        recs = [a.add(f"fact {i} about bees", importance=0.1 * (i + 1), **SCOPE) for i in range(3)]
        pinned = recs[0]  # the lowest-ranked: every one of the deletes would take it
        b._sync.follow()  # b's engine holds the record it changes
        done = _in_transaction(a, lambda: b.update(pinned.id, evergreen=True))
        DELETES[call](a)
        assert done
        assert a.get(pinned.id).evergreen is True
        assert [r.id for r in a.list(**SCOPE)] == [pinned.id]
        b._sync.follow()
        assert pinned.id in b
    finally:
        factory.close_all()


@pytest.mark.parametrize("call", sorted(DELETES))
def test_a_record_another_process_added_meanwhile_is_deleted_too(
    pg_server: Any, tmp_path: Path, call: str
) -> None:
    """What matches when the delete commits goes, though its engine had not heard of it."""
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        name = f"late{next(_names)}"
        a = factory(name, WordHashEmbedder(), cache_dir=tmp_path / "ca")
        b = factory(name, WordHashEmbedder(), cache_dir=tmp_path / "cb")
        a.add("fact one about bees", importance=0.5, **SCOPE)
        a.add("fact two about bees", importance=0.6, **SCOPE)
        late: list[str] = []
        _in_transaction(a, lambda: late.append(b.add("a late fact", importance=0.1, **SCOPE).id))
        DELETES[call](a)
        assert late[0] not in a
    finally:
        factory.close_all()


def test_a_delete_that_finds_nothing_writes_no_change(make_store: StoreFactory) -> None:
    mem = make_store("nothing", WordHashEmbedder())
    mem.add("an evergreen fact", evergreen=True, **SCOPE)
    mem.add("a fact", importance=0.95, **SCOPE)
    seq = mem._sync.seq
    assert mem.delete_all(filters={"evergreen": False, "importance": {"$lt": 0.5}}) == 0
    assert mem.prune(keep_importance_at_least=0.9) == []
    assert mem.evict(0, filters={"evergreen": True}, **SCOPE) == []  # over, all evergreen
    assert mem.evict(5, **SCOPE) == []
    assert mem._sync.seq == seq and mem.count() == 2


# -- evict ----------------------------------------------------------------------------------


def test_evict_keeps_the_cap_by_rank(make_store: StoreFactory) -> None:
    mem = make_store("evict", WordHashEmbedder())
    low = mem.add("the least important", importance=0.1, **SCOPE)
    old = mem.add("an old one", importance=0.3, created_at=1_000.0, **SCOPE)
    new = mem.add("a new one", importance=0.3, **SCOPE)
    pinned = mem.add("pinned", importance=0.0, evergreen=True, **SCOPE)
    top = mem.add("the most important", importance=0.9, **SCOPE)
    mem.add("another scope", importance=0.0, user_id="bob")
    mem.add("another table", importance=0.0, table="notes", **SCOPE)
    gone = mem.supersede(top.id, "the most important, restated")  # history: not counted
    assert [r.id for r in mem.evict(3, **SCOPE)] == [low.id, old.id]
    left = {r.id for r in mem.list("memories", filters={"valid_to": None}, **SCOPE)}
    assert left == {new.id, pinned.id, gone.id}
    assert top.id in mem  # a superseded version is not evicted
    assert [v.ended_by for v in mem.history(low.id)] == ["evict"]
    # filters narrow what is counted and chosen; table=None counts every table.
    assert [r.text for r in mem.evict(0, filters={"importance": {"$lt": 0.5}}, **SCOPE)] == [
        "a new one"
    ]
    assert [r.text for r in mem.evict(2, None, **SCOPE)] == ["another table"]
    assert mem.count(user_id="bob") == 1


@pytest.mark.parametrize("cap", [-1, True, 1.5, "3", None])
def test_evict_refuses_a_bad_cap(make_store: StoreFactory, cap: Any) -> None:
    mem = make_store("evict-cap", None)
    mem.add("a fact", **SCOPE)
    with pytest.raises(InvalidArgumentError, match="cap must be an int >= 0"):
        mem.evict(cap, **SCOPE)
    with pytest.raises(InvalidArgumentError):
        mem.evict(0, filters={"nope": {"$bad": 1}}, **SCOPE)
    assert mem.count() == 1


def test_evict_spares_a_memory_pinned_while_it_ran(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pinned after the eviction counted the records, before its transaction began: it is
    not evicted; the next lowest goes instead."""
    mem = make_store("evict-pin", WordHashEmbedder())
    recs = [mem.add(f"fact {i}", importance=0.1 * (i + 1), **SCOPE) for i in range(4)]
    db = mem._sync.db
    transaction = db.transaction
    done: list[int] = []
    caller = threading.current_thread()

    def pin_once() -> Any:
        if not done and threading.current_thread() is caller:  # not maintenance's writes
            done.append(1)
            mem.update(recs[0].id, evergreen=True)
        return transaction()

    monkeypatch.setattr(db, "transaction", pin_once)
    evicted = mem.evict(3, **SCOPE)
    assert done and [r.id for r in evicted] == [recs[1].id]
    assert mem.get(recs[0].id).evergreen is True


def test_two_threads_evicting_one_scope_leave_the_cap(make_store: StoreFactory) -> None:
    mem = make_store("evict-threads", None)
    barrier = threading.Barrier(2)
    for round_ in range(4):
        items = [{"text": f"fact {round_}.{i}", "importance": i / 40, **SCOPE} for i in range(30)]
        mem.add_many(items)
        over = mem.count(**SCOPE) - 10
        out: list[list[str]] = [[], []]

        def evict(w: int, out: list[list[str]] = out) -> None:
            barrier.wait()
            out[w] = [r.id for r in mem.evict(10, **SCOPE)]

        threads = [threading.Thread(target=evict, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert mem.count(**SCOPE) == 10
        assert not set(out[0]) & set(out[1]) and len(out[0]) + len(out[1]) == over


def test_two_processes_evicting_one_scope_leave_the_cap_on_postgres(
    pg_server: Any, tmp_path: Path
) -> None:
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        for _ in range(3):
            name = f"evict{next(_names)}"
            mem = factory(name)
            items = [{"text": f"fact {i}", "importance": i / 40, **SCOPE} for i in range(30)]
            ids = [r.id for r in mem.add_many(items)]
            a, b = _race(factory, name, _EVICTOR, "[]", tmp_path)
            assert not set(a) & set(b) and set(a) | set(b) == set(ids[:20])
            mem._sync.follow()
            assert mem.count(**SCOPE) == 10
            mem.close()
    finally:
        factory.close_all()


def test_expiry_spares_a_record_whose_ttl_another_process_refreshed(
    pg_server: Any, tmp_path: Path
) -> None:
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        name = f"ttl{next(_names)}"
        a = factory(name, None, cache_dir=tmp_path / "ca")
        b = factory(name, None, cache_dir=tmp_path / "cb")
        rec = a.add("a session that is about to expire", ttl=3600)
        at = rec.expires_at
        assert at is not None
        b._sync.follow()
        done = _in_transaction(a, lambda: b.update(rec.id, ttl=7200))
        assert a._writer.expire(at + 1) == 0
        assert done and rec.id in a
    finally:
        factory.close_all()


@pytest.mark.parametrize("change", ["update", "supersede"])
def test_a_change_of_a_record_another_process_just_added(
    pg_server: Any, tmp_path: Path, change: str
) -> None:
    """``b`` changes what ``a`` added before ``b``'s engine heard of it: the change applies
    the other commits first (it raised the engine's "unknown id 1" before)."""
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        name = f"fresh{next(_names)}"
        a = factory(name, WordHashEmbedder(), cache_dir=tmp_path / "ca")
        b = factory(name, WordHashEmbedder(), cache_dir=tmp_path / "cb")
        rec = a.add("Alice lives in Paris", **SCOPE)
        if change == "update":
            b.update(rec.id, text="Alice lives in Paris, France")
            texts = ["Alice lives in Paris, France"]
        else:
            b.supersede(rec.id, "Alice lives in Berlin")
            texts = ["Alice lives in Berlin"]
        assert [h.record.text for h in b.search("where does Alice live", 5, **SCOPE)] == texts
        a._sync.follow()
        assert [r.text for r in a.list(filters={"valid_to": None})] == texts
    finally:
        factory.close_all()
