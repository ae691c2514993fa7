"""Memory.events tells the changes other processes commit to a shared (PostgreSQL)
store, as it tells this process's own: the same types and fields, filtered by scope,
in commit order, each once. An embedded store is open in one process at a time."""

from __future__ import annotations

import json
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_server_process import follow

from conftest import StoreFactory
from memlane import Memory
from memlane.storage import SCHEMA_VERSION
from memlane.storage.postgres import PostgresTarget
from pg_server import PgServer
from server_process import ServeProcess

# A second process that runs the commands it reads (one JSON list a line) on the store
# and answers each with a JSON line once the change is committed.
_CHILD = """
import json, sys
from memlane import Memory
mem = Memory(sys.argv[1], None, cache_dir=sys.argv[2])
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    op, args, kwargs = json.loads(line)
    if op == "expire":
        out = mem._writer.expire(*args)
    else:
        out = getattr(mem, op)(*args, **kwargs)
    print(json.dumps(getattr(out, "id", None) if op != "prune" else len(out)), flush=True)
mem.close()
"""

#: How long a test waits for an event another process caused (never asserted).
WAIT = 30.0


class Child:
    """The other process, writing to the store at ``url``."""

    def __init__(self, url: str, cache: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, str(cache)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._answer() == "ready"

    def _answer(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            assert self.proc.stderr is not None
            raise AssertionError(self.proc.stderr.read())
        return json.loads(line)

    def __call__(self, op: str, *args: Any, **kwargs: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([op, args, kwargs]) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        _, err = self.proc.communicate(timeout=120)  # closes its input: it ends
        assert self.proc.returncode == 0, err


@pytest.fixture
def shared(pg_server: PgServer, tmp_path: Path) -> Iterator[tuple[Memory, Child]]:
    """A PostgreSQL store open here, and the other process writing to it."""
    factory = StoreFactory("postgres", tmp_path, pg_server)
    mem = factory("others")
    child = Child(str(factory.location("others")), tmp_path / "child-cache")
    try:
        yield mem, child
    finally:
        child.close()
        factory.close_all()


def told(sub: Any) -> tuple[str, str, str]:
    """The next event of ``sub`` (type, id, text), waiting for it."""
    event = sub.get(timeout=WAIT)
    assert event is not None, "no event came"
    return event["type"], event["id"], event["record"]["text"]


def drain(sub: Any) -> list[dict[str, Any]]:
    out = []
    while (event := sub.get(timeout=0)) is not None:
        out.append(event)
    return out


def test_another_process_changes_are_told_in_commit_order_once(
    shared: tuple[Memory, Child],
) -> None:
    mem, child = shared
    alice, everyone = mem.events.subscribe(user_id="alice"), mem.events.subscribe()
    porto = child("add", "Alice lives in Porto", user_id="alice")
    oslo = child("add", "Bob lives in Oslo", user_id="bob")
    # Told by the follower, without this process writing or searching.
    assert told(alice) == ("add", porto, "Alice lives in Porto")
    assert told(everyone) == ("add", porto, "Alice lives in Porto")
    assert told(everyone) == ("add", oslo, "Bob lives in Oslo")
    lisbon = child("supersede", porto, "Alice lives in Lisbon")
    child("update", lisbon, importance=0.9)
    # This process's write comes after those: they are told first, its own once.
    tea = mem.add("Alice likes tea", user_id="alice").id
    child("update", tea, text="Alice likes green tea")
    mem.delete(oslo)
    child("delete", lisbon)
    note = child("add", "Alice parks on level 2", user_id="alice", ttl=60)
    child("expire", time.time() + 3600)
    carol = child("add", "Carol met Alice", user_id="carol")
    assert child("prune", max_age_days=0, user_id="carol", now=time.time() + 1) == 1
    barrier = mem.add("written last, here", user_id="zed").id
    every = drain(everyone)
    assert [(e["type"], e["id"]) for e in every] == [
        ("supersede", lisbon),
        ("update", lisbon),
        ("add", tea),
        ("update", tea),
        ("delete", oslo),
        ("delete", lisbon),
        ("add", note),
        ("expire", note),
        ("add", carol),
        ("delete", carol),
        ("add", barrier),
    ]
    assert [e["record"]["text"] for e in every[:4]] == [
        "Alice lives in Lisbon",
        "Alice lives in Lisbon",
        "Alice likes tea",
        "Alice likes green tea",
    ]
    assert every[0]["supersedes"] == porto
    assert every[1]["record"]["importance"] == 0.9
    assert every[9]["by"] == "prune" and "by" not in every[5] and "by" not in every[7]
    assert every[4]["record"]["user_id"] == "bob"
    assert "embedding" not in every[0]["record"]
    # The same fields as an event of this process's own.
    assert set(every[3]) == set(every[2]) and set(every[3]["record"]) == set(every[2]["record"])
    assert [(e["type"], e["id"]) for e in drain(alice)] == [
        (e["type"], e["id"]) for e in every if e["record"]["user_id"] == "alice"
    ]
    assert alice.lost == everyone.lost == 0
    alice.close()
    everyone.close()


def test_changes_before_the_subscription_are_not_told(shared: tuple[Memory, Child]) -> None:
    mem, child = shared
    child("add", "said before anyone listened")
    with mem.events.subscribe() as sub:
        later = child("add", "said while someone listens")
        assert told(sub) == ("add", later, "said while someone listens")
        mine = mem.add("and this process's").id
        assert [(e["type"], e["id"]) for e in drain(sub)] == [("add", mine)]
    child("add", "said while nobody listens")
    with mem.events.subscribe() as sub:
        last = child("add", "said to the second subscription")
        assert told(sub) == ("add", last, "said to the second subscription")
        mem.add("a barrier: what came before it is told first")
        assert [e["record"]["text"] for e in drain(sub)] == [
            "a barrier: what came before it is told first"
        ]


def test_no_subscriber_reads_no_change(
    shared: tuple[Memory, Child], monkeypatch: pytest.MonkeyPatch
) -> None:
    mem, child = shared
    reads: list[int] = []
    real = mem._db.changes_since

    def counted(seq: int) -> Any:
        reads.append(seq)
        return real(seq)

    monkeypatch.setattr(mem._db, "changes_since", counted)
    first = child("add", "a fact nobody listens to")
    deadline = time.monotonic() + WAIT
    # The follower applies it (a search finds it) without reading it for events.
    while not mem.search("fact nobody listens", mode="text") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [h.record.id for h in mem.search("fact nobody listens", mode="text")] == [first]
    mem.add("and one of this process")
    assert reads == []
    with mem.events.subscribe() as sub:
        second = child("add", "a fact someone listens to")
        assert told(sub) == ("add", second, "a fact someone listens to")
    assert reads


def test_an_embedded_store_has_no_other_writer(tmp_path: Path) -> None:
    """Its lock refuses a second process, so this process's events are all there are."""
    with Memory(tmp_path / "alone", None):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from memlane import Memory, StoreLockedError\n"
                "try:\n    Memory(sys.argv[1], None)\n"
                "except StoreLockedError:\n    print('refused')",
                str(tmp_path / "alone"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.stdout.strip() == "refused", out.stderr


def test_the_server_streams_what_another_process_adds(pg_server: PgServer, tmp_path: Path) -> None:
    url = pg_server.url(schema="streamed_from_elsewhere")
    with ServeProcess(url, "--embedder", "none") as server:
        events: queue.Queue[Any] = queue.Queue()
        ready = threading.Event()
        threading.Thread(
            target=follow,
            args=(f"{server.url}/v1/events?user_id=alice", events, ready),
            daemon=True,
        ).start()
        assert ready.wait(60)
        child = Child(url, tmp_path / "child-cache")
        try:
            child("add", "Bob likes jazz", user_id="bob")
            added = child("add", "Alice is 30", user_id="alice")
        finally:
            child.close()
        kind, event = events.get(timeout=WAIT)
        assert (kind, event["id"], event["record"]["text"]) == ("add", added, "Alice is 30")


def _change_seqs(rows: list[tuple[Any, ...]]) -> list[Any]:
    return [r[0] for r in rows]


def test_a_sqlite_history_before_change_numbers_gains_them(tmp_path: Path) -> None:
    path = tmp_path / "old"
    with Memory(path, None) as mem:
        a = mem.add("an old note")
        mem.update(a.id, importance=0.2)
    db = sqlite3.connect(path / "memory.db")
    db.execute("DROP INDEX history_change")
    db.execute("ALTER TABLE history DROP COLUMN change_seq")
    db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with Memory(path, None) as mem:
        mem.update(a.id, importance=0.3)
        seq = mem._db.seq()
    db = sqlite3.connect(path / "memory.db")
    made = db.execute("SELECT change_seq FROM history ORDER BY n").fetchall()
    plan = db.execute("EXPLAIN QUERY PLAN SELECT n FROM history WHERE change_seq > 0").fetchall()
    version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    db.close()
    assert _change_seqs(made) == [None, seq]
    assert "history_change" in str(plan)
    assert version == (str(SCHEMA_VERSION),)


def test_a_postgres_history_before_change_numbers_gains_them(
    pg_server: PgServer, tmp_path: Path
) -> None:
    url = pg_server.url(schema="nochange")
    schema = PostgresTarget.parse(url).schema
    with Memory(url, None, cache_dir=tmp_path / "c1") as mem:
        a = mem.add("an old note")
        mem.update(a.id, importance=0.2)
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {schema}.history DROP COLUMN change_seq")  # and its index
        conn.execute(f"DELETE FROM {schema}.migrations WHERE version >= 8")
    with Memory(url, None, cache_dir=tmp_path / "c2") as mem:
        mem.update(a.id, importance=0.3)
        seq = mem._db.seq()
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        made = conn.execute(f"SELECT change_seq FROM {schema}.history ORDER BY n").fetchall()
        index = conn.execute(
            "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = 'history_change'",
            (schema,),
        ).fetchall()
    assert _change_seqs(made) == [None, seq]
    assert index == [(1,)]
