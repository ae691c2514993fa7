"""A PostgreSQL store's snapshot cache knows its database, not only the store id a copy
keeps: a database copied (CREATE DATABASE ... TEMPLATE, as a dump restored elsewhere
is) or restored under its own name never takes the other's snapshot as current, even
once its change number has passed the snapshot's; and a store open while its database
is replaced refuses to answer instead of answering from the one it had."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.errors import StorageError
from memlane.storage.pg_schema import same_database
from pg_server import PgServer


@pytest.fixture
def admin(pg_server: PgServer) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        yield conn


def _texts(mem: Memory) -> list[str]:
    return sorted(r.text for r in mem.list(limit=100))


def _found(mem: Memory, query: str) -> list[str]:
    return [h.record.text for h in mem.search(query, k=3, mode="text")]


def _open(pg_server: PgServer, name: str, cache: Path | None) -> Memory:
    return Memory(pg_server.url(name), WordHashEmbedder(), cache_dir=cache)


def test_a_copy_of_the_database_has_a_cache_of_its_own(
    pg_server: PgServer, admin: psycopg.Connection, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    admin.execute("CREATE DATABASE original")
    with _open(pg_server, "original", cache) as mem:
        mem.add("alpha apples orchard")
    admin.execute("CREATE DATABASE copied TEMPLATE original")
    # Both at once, on one cache folder: the copy is another database.
    with _open(pg_server, "original", cache) as a, _open(pg_server, "copied", cache) as b:
        for i in range(3):
            a.add(f"grapes vineyard {i}")
        for i in range(6):
            b.add(f"delta dates palm {i}")
    with _open(pg_server, "copied", cache) as b:
        assert not _found(b, "grapes vineyard")
        assert len(_found(b, "dates palm")) == 3
        assert len(_texts(b)) == 7


def test_a_database_restored_under_its_name_takes_no_newer_snapshot(
    pg_server: PgServer, admin: psycopg.Connection, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    admin.execute("CREATE DATABASE app")
    with _open(pg_server, "app", cache) as mem:
        mem.add("alpha apples orchard", id="a")
        mem.add("beta bananas plantation", id="b")
    admin.execute("CREATE DATABASE dumped TEMPLATE app")  # the dump
    with _open(pg_server, "app", cache) as mem:
        mem.add("gamma grapes vineyard", id="c")
        mem.delete("a")
    admin.execute("DROP DATABASE app WITH (FORCE)")
    admin.execute("CREATE DATABASE app TEMPLATE dumped")  # restored under its name
    with _open(pg_server, "app", None) as mem:  # another process of the fleet
        for i in range(6):
            mem.add(f"delta dates palm {i}")
    with _open(pg_server, "app", cache) as mem:
        assert _found(mem, "apples orchard") == ["alpha apples orchard"]
        assert not _found(mem, "grapes vineyard")
        assert len(_found(mem, "dates palm")) == 3
        assert len(_texts(mem)) == 8


def test_a_store_open_while_its_database_is_replaced_refuses_to_answer(
    pg_server: PgServer, admin: psycopg.Connection, tmp_path: Path
) -> None:
    admin.execute("CREATE DATABASE live")
    with _open(pg_server, "live", None) as mem:
        mem.add("alpha apples orchard")
    admin.execute("CREATE DATABASE live_dump TEMPLATE live")
    mem = _open(pg_server, "live", tmp_path / "cache")
    try:
        mem.add("beta bananas plantation")
        assert len(_found(mem, "bananas")) == 1
        admin.execute("DROP DATABASE live WITH (FORCE)")
        admin.execute("CREATE DATABASE live TEMPLATE live_dump")
        # Found at the store's next connection: its own reads', or its follower's, which
        # reconnects within seconds (reads the row cache answers meanwhile are the last
        # the store could see).
        deadline = time.monotonic() + 60
        with pytest.raises(StorageError, match="was replaced while this store was open"):
            while time.monotonic() < deadline:
                mem.list()
                time.sleep(0.05)
        # Not from what the engine and the row cache hold of the database it had.
        with pytest.raises(StorageError, match="was replaced"):
            mem.search("bananas plantation", mode="text")
    finally:
        with contextlib.suppress(StorageError):
            mem.close()
    with _open(pg_server, "live", tmp_path / "cache") as again:
        assert _texts(again) == ["alpha apples orchard"]
        assert not _found(again, "bananas")


def test_a_system_identifier_the_role_may_not_read_is_unknown_not_another() -> None:
    # The right to read it may be granted or revoked while a store is open.
    assert same_database((None, 5, 7), (123, 5, 7))
    assert same_database((123, 5, 7), (123, 5, 7))
    assert not same_database((123, 5, 7), (124, 5, 7))
    assert not same_database((None, 5, 7), (None, 6, 7))
    assert not same_database((123, 5, 7), (None, 5, 8))
