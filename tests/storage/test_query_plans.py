"""Every statement the search and write paths run reaches rows through an index.

A store of a few thousand records is opened on each backend with its connections
instrumented, so the statements checked are the ones the code really runs:

- SQLite: every connection the store opens gets a trace callback, which hands over
  each statement as run, with its bound values expanded into literals;
- PostgreSQL: every pooled connection gets a cursor class that records each query
  with its parameters before executing it.

Each public call under test (searches plain, scoped and filtered; ``add`` with and
without ``unique``; ``add_many`` with and without; ``get``; ``update``; ``delete``)
runs while the statements of the calling thread are kept (the maintenance thread's
own work is not what the call does), and each of them is explained:
``EXPLAIN QUERY PLAN`` on SQLite, ``EXPLAIN (FORMAT JSON)`` on PostgreSQL with the
same parameters. A full scan of a table that grows with the store (``records``, the
dedup window ``recent``, ``tombstones``) fails the test, naming the call and the
statement. On SQLite that is any ``SCAN`` of one of them, including a scan of a
covering index: it still reads an entry per row. On PostgreSQL it is a ``Seq Scan``,
or an index scan with no index condition (the whole index, in its order).
"""

from __future__ import annotations

import re
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import WordHashEmbedder, trace_sqlite
from memlane import Memory

N = 3000
AGENTS = 10
# Tables whose size grows with the store (or with the write rate).
GROWING = ("records", "recent", "tombstones")
_SQLITE_SCAN = re.compile(rf"^SCAN (?:TABLE )?({'|'.join(GROWING)})\b")
_DML = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "REPLACE")
_HASH_LOOKUP = re.compile(r"WHERE (?:substr\()?content_hash\b")


def _text(i: int) -> str:
    return f"note {i}: the {i % 97} topic about thing {i % 13} and colour {i % 7}"


def _agent(i: int) -> str:
    return f"agent{i % AGENTS}"


class Recorder:
    """Statements run by the thread inside :meth:`capture` (others are ignored)."""

    def __init__(self) -> None:
        self._thread: int | None = None
        self._current: list[tuple[str, Any]] = []

    def note(self, query: str | bytes, params: Any = None) -> None:
        if self._thread == threading.get_ident():
            text = query.decode() if isinstance(query, bytes) else str(query)
            self._current.append((text, params))

    @contextmanager
    def capture(self) -> Iterator[list[tuple[str, Any]]]:
        self._current = []
        self._thread = threading.get_ident()
        try:
            yield self._current
        finally:
            self._thread = None


class Backend:
    """Opens the store under test and explains statements on a connection of its own."""

    name: str

    def open(self, embedder: Any) -> Memory:
        raise NotImplementedError

    def prepare(self) -> None:
        """Called once the store holds its records, before any statement is explained."""

    def full_scans(self, sql: str, params: Any) -> list[str]:
        """The full scans of growing tables in the plan of ``sql``, as plan lines."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class SQLiteBackend(Backend):
    name = "embedded"

    def __init__(self, root: Path, recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self._conn: sqlite3.Connection | None = None
        trace_sqlite(monkeypatch, recorder.note)
        # No row cache: search hits are read from the database, so those reads are checked.
        monkeypatch.setattr("memlane.storage.sqlite.DEFAULT_CAPACITY", 0)

    def open(self, embedder: Any) -> Memory:
        return Memory(self.root / "store", embedder)

    def prepare(self) -> None:
        # memlane never runs ANALYZE on a store, so plans are made without statistics,
        # as in production.
        self._conn = sqlite3.connect(self.root / "store" / "memory.db")
        self._conn.execute("PRAGMA query_only = ON")

    def full_scans(self, sql: str, params: Any) -> list[str]:
        assert self._conn is not None
        # The trace callback's text has the values expanded: nothing left to bind.
        plan = self._conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
        return [str(row[3]) for row in plan if _SQLITE_SCAN.match(str(row[3]))]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, server: Any, recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
        import psycopg

        from memlane.storage.postgres import PostgresStore

        self._psycopg = psycopg
        self.server = server
        self.schema = f"plans_{uuid.uuid4().hex[:12]}"
        self._conn: Any = None

        class RecordingCursor(psycopg.Cursor):  # type: ignore[type-arg]
            def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
                recorder.note(query, params)
                return super().execute(query, params, **kwargs)

            def copy(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
                recorder.note(statement, params)  # kept, though COPY has no plan to check
                return super().copy(statement, params, **kwargs)

        configure = PostgresStore._configure

        def recording(store: PostgresStore, conn: Any) -> None:
            conn.cursor_factory = RecordingCursor
            configure(store, conn)

        # Every connection of the store's pool (and of its own) passes through here.
        monkeypatch.setattr(PostgresStore, "_configure", recording)

    def open(self, embedder: Any) -> Memory:
        # No row cache: search hits are read from the database, so those reads are checked.
        return Memory(self.server.url(schema=self.schema, row_cache="0"), embedder)

    def prepare(self) -> None:
        self._conn = self._psycopg.connect(self.server.url(), autocommit=True)
        for table in GROWING:
            self._conn.execute(f'ANALYZE "{self.schema}".{table}')
        # A few thousand rows fit in a few hundred pages, where a sequential scan can
        # legitimately be the cheapest plan, so the planner's own choice says little.
        # With seq scans priced out it shows the best plan through an index; a Seq Scan
        # left means no index can answer the statement (at scale, a scan of every row).
        self._conn.execute("SET enable_seqscan = off")

    def full_scans(self, sql: str, params: Any) -> list[str]:
        row = self._conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
        out: list[str] = []

        def walk(node: dict[str, Any]) -> None:
            kind, table = node.get("Node Type"), node.get("Relation Name")
            if table in GROWING:
                if kind == "Seq Scan":
                    out.append(f"Seq Scan on {table}")
                elif kind in ("Index Scan", "Index Only Scan") and "Index Cond" not in node:
                    # Every entry of the index, in its order: a full scan too.
                    out.append(f"{kind} using {node.get('Index Name')} on {table} (no condition)")
            for child in node.get("Plans", []):
                walk(child)

        walk(row[0][0]["Plan"])
        return out

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


@pytest.fixture(params=["embedded", "postgres"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Backend, Recorder]]:
    recorder = Recorder()
    b: Backend
    if request.param == "postgres":
        b = PostgresBackend(request.getfixturevalue("pg_server"), recorder, monkeypatch)
    else:
        b = SQLiteBackend(tmp_path, recorder, monkeypatch)
    yield b, recorder
    b.close()


def _calls(mem: Memory) -> list[tuple[str, Callable[[], object]]]:
    """The calls of the search and write paths, in order (later ones use earlier records)."""
    made: dict[str, str] = {}

    def add(key: str, text: str, **kw: Any) -> None:
        made[key] = mem.add(text, **kw).id

    return [
        ("search", lambda: mem.search("topic 7 thing")),
        ("search scoped", lambda: mem.search("topic 7 thing", agent_id=_agent(3))),
        (
            "search filtered",
            lambda: mem.search(
                "topic 7 thing",
                k=10,
                table="memories",
                type=["semantic", "episodic"],
                filters={"n": {"$gte": 100}, "source": {"$in": ["chat", "mail"]}},
                start=0.0,
                agent_id=_agent(7),
            ),
        ),
        ("search text", lambda: mem.search("colour 3", mode="text", include_embedding=True)),
        # The first write after the searches also flushes their access counts.
        ("add", lambda: add("plain", "a brand new note about the garden", agent_id=_agent(1))),
        ("add unique, new", lambda: mem.add("another new note", agent_id=_agent(2), unique=True)),
        ("add unique, stored", lambda: mem.add(_text(42), agent_id=_agent(42), unique=True)),
        (
            "add with message_id",
            lambda: add("window", "sent once", metadata={"message_id": "m-1"}),
        ),
        ("add, window repeat", lambda: mem.add("sent once", metadata={"message_id": "m-1"})),
        ("add with id", lambda: add("given", "a note with an id", id="given-id-1")),
        (
            "add_many",
            lambda: mem.add_many(
                [{"text": f"batch note {j}", "agent_id": _agent(j)} for j in range(5)]
            ),
        ),
        (
            "add_many unique",
            lambda: mem.add_many(
                [
                    {"text": _text(43), "agent_id": _agent(43), "unique": True},
                    {"text": "unique batch note", "unique": True},
                    {"text": "unique batch note", "unique": True},
                    {"text": "a batch note too", "unique": True, "metadata": {"message_id": "m-2"}},
                ]
            ),
        ),
        ("get", lambda: mem.get(made["plain"])),
        ("update attributes", lambda: mem.update(made["plain"], importance=0.9)),
        ("update text", lambda: mem.update(made["plain"], text="the garden note, changed")),
        ("delete", lambda: mem.delete(made["plain"])),
        ("delete, window key", lambda: mem.delete(made["window"])),
    ]


@pytest.mark.parametrize("embedder", ["vectors", "text-only"])
def test_search_and_write_paths_use_indexes(
    backend: tuple[Backend, Recorder], embedder: str
) -> None:
    b, recorder = backend
    mem = b.open(WordHashEmbedder() if embedder == "vectors" else None)
    try:
        mem.add_many(
            [
                {
                    "text": _text(i),
                    "agent_id": _agent(i),
                    "table": "memories" if i % 5 else "facts",
                    "type": "semantic" if i % 3 else "episodic",
                    "importance": (i % 10) / 10,
                    "metadata": {"n": i, "source": ("chat", "mail", "web")[i % 3]},
                }
                for i in range(N)
            ]
        )
        mem.wait_indexed()
        b.prepare()

        ran: dict[str, list[tuple[str, Any]]] = {}
        for name, call in _calls(mem):
            with recorder.capture() as statements:
                call()
            ran[name] = list(statements)

        problems: list[str] = []
        explained = 0
        for name, statements in ran.items():
            for sql, params in statements:
                if sql.lstrip().split(None, 1)[0].upper() not in _DML:
                    continue  # BEGIN, COMMIT, PRAGMA: nothing to plan
                explained += 1
                for scan in b.full_scans(sql, params):
                    shown = sql if len(sql) <= 400 else f"{sql[:100]} ... {sql[-300:]}"
                    problems.append(f"{name}: {scan}\n    {shown}\n    params: {params!r:.200}")
        assert not problems, (
            f"{len(problems)} statement(s) scan a whole table on {b.name}:\n" + "\n".join(problems)
        )

        # The capture is not vacuous: the calls ran the statements they must.
        def on_records(name: str) -> list[str]:
            return [s for s, _ in ran[name] if re.search(r"\brecords\b", s)]

        for name in ran:
            if name != "add, window repeat":  # a window hit may be answered in memory
                assert on_records(name), f"{name}: no statement on records was captured"
        for name in ("add unique, new", "add unique, stored", "add_many unique"):
            assert any(_HASH_LOOKUP.search(s) for s in on_records(name)), name
        assert explained >= 2 * len(ran)
    finally:
        mem.close()
