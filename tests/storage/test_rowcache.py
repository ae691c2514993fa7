"""The in-process record cache of search hits: never older than what it was told."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conftest import StoreFactory, WordHashEmbedder, trace_sqlite
from memlane import Memory
from memlane._memory.sync import IndexSync
from memlane.coerce import MAX_COUNT
from memlane.schema import COLUMNS, Row
from memlane.storage.rowcache import RowCache


def row(rowid: int, seq: int, text: str = "t", embedding: bytes | None = None) -> Row:
    values = dict.fromkeys(COLUMNS)
    values.update(rowid=rowid, text=text, seq=seq, embedding=embedding, metadata="{}")
    return Row(**values)  # type: ignore[arg-type]


def _statements_here(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL this thread runs from now on (the store's background reading ahead may run
    meanwhile)."""
    ran: list[str] = []
    me = threading.get_ident()
    trace_sqlite(monkeypatch, lambda q: ran.append(q) if threading.get_ident() == me else None)
    return ran


def _record_reads(statements: list[str]) -> list[str]:
    return [q for q in statements if "FROM records" in q and q.startswith("SELECT")]


def _kites(mem: Memory) -> None:
    mem.add_many({"text": f"note {i} about the red kite"} for i in range(50))
    mem.wait_indexed()


def test_newer_rows_win_and_vectors_are_dropped() -> None:
    cache = RowCache(10)
    cache.put([row(1, 5, "new", b"\0" * 8)])
    cache.put([row(1, 3, "old")])  # a slow read of an older state
    found, missing = cache.get([1, 2])
    assert missing == [2] and found[1].text == "new" and found[1].embedding is None


def test_a_write_refuses_reads_from_before_it() -> None:
    cache = RowCache(10)
    cache.put([row(1, 5)])
    cache.invalidate([1], 8)
    assert cache.get([1]) == ({}, [1])
    cache.put([row(1, 5, "read before the write")])
    assert cache.get([1]) == ({}, [1])
    cache.put([row(1, 8, "the write")])
    assert cache.get([1])[0][1][2] == "the write"
    cache.forget([1])
    assert len(cache) == 0


def test_a_flush_of_access_counts_brings_the_kept_rows_up_to_date_at_its_commit() -> None:
    """The rows a flush counts stay kept while it runs (a read from before it is still
    refused), and take its counts when it commits, as its statement adds them; a flush
    that rolled back drops them."""
    cache = RowCache(10)
    counted = {1: (2, 10.0), 2: (MAX_COUNT - 1, 10.0), 3: (0, 30.0)}
    cache.put(
        [row(r, 5)._replace(access_count=n, last_accessed_at=at) for r, (n, at) in counted.items()]
    )
    cache.put([row(4, 9)._replace(access_count=1, last_accessed_at=10.0)])  # written since
    cache.invalidate([1, 2, 3, 4], 8, keep=True)
    cache.put([row(1, 5, "read before the flush")])
    assert cache.get([1])[0][1].text == "t"
    cache.accessed(
        {1: (3, 20.0), 2: (5, 20.0), 3: (1, 20.0), 4: (1, 20.0), 5: (1, 20.0)}, 8, MAX_COUNT
    )
    found, missing = cache.get([1, 2, 3, 4, 5])
    assert missing == [5]
    shown = {r: (x.access_count, x.last_accessed_at, x.seq) for r, x in found.items()}
    assert shown == {
        1: (5, 20.0, 8),
        2: (MAX_COUNT, 20.0, 8),  # saturates, as the statement does
        3: (1, 30.0, 8),  # the later access stays
        4: (1, 10.0, 9),  # newer than the flush: as it is
    }
    cache.invalidate([1], 10, keep=True)
    cache.forget([1])  # its transaction rolled back
    assert cache.get([1]) == ({}, [1])


def test_a_searched_record_stays_kept_after_its_access_count_is_saved(
    tmp_path: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records a search returns again and again are not read from the database after
    every write that saves their access counts, and show the counts saved."""
    ran = _statements_here(monkeypatch)
    with Memory(tmp_path / "store", word_embedder) as mem:
        _kites(mem)
        first = [h.record.id for h in mem.search("red kite", k=10)]
        mem.add("a write, which saves the counts of that search")
        ran.clear()
        hits = mem.search("red kite", k=10, track_access=False)
        assert [h.record.id for h in hits] == first
        assert not _record_reads(ran)
        assert all(h.record.access_count == 1 for h in hits)
        assert [mem.get(i).access_count for i in first] == [1] * 10


def test_floors_of_a_burst_of_writes_all_hold_and_old_ones_go_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the pruning size, floors a minute old go, oldest first, and only those: a row
    written again is young again, and a burst of writes keeps every floor it set."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    cache = RowCache(10)
    burst = 25_000
    for r in range(burst):  # one write each, as a renew or an update of many rows does
        cache.invalidate([r], 10)
    cache.invalidate([0], 11)  # written again: its floor is new
    clock[0] += 61
    cache.invalidate([burst], 12)
    cache.put([row(1, 5)])  # the oldest floor, a minute old, went: any read is taken
    assert cache.get([1])[0][1].seq == 5
    for r in (0, burst):  # still guarded
        cache.put([row(r, 5)])
        assert cache.get([r]) == ({}, [r])


def test_least_recently_used_go_first() -> None:
    cache = RowCache(2)
    cache.put([row(1, 1), row(2, 1)])
    cache.get([1])
    cache.put([row(3, 1)])
    assert sorted(cache.get([1, 2, 3])[0]) == [1, 3]
    off = RowCache(0)
    off.put([row(1, 1)])
    assert len(off) == 0


def test_rows_are_kept_whole_without_their_vectors_up_to_the_capacity() -> None:
    cache = RowCache(2)
    cache.put([row(1, 1, "a", b"\0" * 8), row(2, 2, "b"), row(3, 3, "c")])
    found, missing = cache.get([1, 2, 3])
    assert missing == [1] and [found[r].text for r in (2, 3)] == ["b", "c"]
    assert found[2].embedding is None and found[2] == row(2, 2, "b")


def test_a_kept_row_reads_back_equal_with_its_repeated_values_held_once() -> None:
    """Each row read from the database brings its own copy of its table, type and scope;
    the cache holds one of each, and times equal to the creation time as that one."""

    def stored(rowid: int, created: float, updated: float) -> Row:
        base = row(rowid, rowid, f"text {rowid}")
        # New objects, as each row read from the database brings.
        return base._replace(
            tbl="".join(["memo", "ries"]),
            type="".join(["sem", "antic"]),
            agent_id="".join(["agent-", "7"]),
            speaker="".join(["Car", "oline"]),
            metadata="".join(["{", "}"]),
            created_at=created,
            updated_at=updated,
            last_accessed_at=float(str(created)),
            recorded_at=float(str(created)),
        )

    given = [stored(1, 100.5, 100.5), stored(2, 200.5, 250.5)]
    cache = RowCache(10)
    cache.put(given[:1])
    cache.offer(given[1:])
    found, missing = cache.get([1, 2])
    assert missing == [] and [found[1], found[2]] == given
    one, two = found[1], found[2]
    for field in ("tbl", "type", "agent_id", "speaker", "metadata"):
        assert getattr(one, field) is getattr(two, field), field
    assert one.updated_at is one.created_at and one.recorded_at is one.created_at
    assert two.last_accessed_at is two.created_at and two.updated_at == 250.5


def test_hits_read_after_a_write_are_the_written_ones(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    """Searching caches the hits' rows; every write after that shows in the next search."""
    mem = make_store("cache", word_embedder)
    a = mem.add("the red kite circles over the hill", importance=0.2).id
    b = mem.add("a red kite is a bird of prey").id
    assert {h.record.id for h in mem.search("red kite", k=5)} == {a, b}
    mem.update(a, text="the red kite nests in tall trees", importance=0.9)
    mem.delete(b)
    hits = mem.search("red kite", k=5)
    assert [(h.record.id, h.record.text, h.record.importance) for h in hits] == [
        (a, "the red kite nests in tall trees", 0.9)
    ]
    mem.supersede(a, "the red kite left the hill")
    assert [h.record.text for h in mem.search("red kite", k=5)] == ["the red kite left the hill"]


def test_a_new_question_finds_the_rows_this_process_wrote_without_reading_sqlite(
    tmp_path: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes fill the cache: the hits of a search never run before are not read from
    the database (the model run before a search leaves SQLite's pages cold). Only this
    thread's statements count: the store's background reading ahead may run meanwhile."""
    ran = _statements_here(monkeypatch)
    with Memory(tmp_path / "store", word_embedder) as mem:
        _kites(mem)
        ran.clear()
        hits = mem.search("red kite", k=10)
        assert len(hits) == 10
        assert not _record_reads(ran)


def test_rows_read_ahead_fill_room_only_and_go_first() -> None:
    """What an open reads ahead never replaces a kept row, never goes back behind a
    write, never pushes a row out, and is the first to go when searches need room."""
    cache = RowCache(3)
    cache.put([row(1, 5, "kept")])
    cache.invalidate([2], 8)
    assert cache.room()
    cache.offer([row(1, 3, "older"), row(2, 5, "before the write"), row(3, 1), row(4, 1)])
    found, missing = cache.get([1, 2, 3, 4])
    assert missing == [2] and found[1].text == "kept" and sorted(found) == [1, 3, 4]
    assert not cache.room()
    cache.offer([row(5, 1)])
    assert cache.get([5]) == ({}, [5])
    # The get above made 1, 3 and 4 recently used; a fresh cache shows the order.
    fresh = RowCache(3)
    fresh.put([row(1, 1)])
    fresh.offer([row(3, 1), row(2, 1)])
    fresh.put([row(9, 1)])
    assert sorted(fresh.get([1, 2, 3, 9])[0]) == [1, 3, 9]


def test_reading_ahead_stops_at_its_share_of_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Long texts (document fragments) stop the reading-in long before the row capacity;
    rows that searches and writes put in are not counted."""
    monkeypatch.setattr("memlane.storage.rowcache.OFFER_CHARS", 100)
    cache = RowCache(1000)
    cache.put([row(1, 1, "w" * 500)])
    assert cache.room()
    cache.offer([row(r, 1, "x" * 40) for r in range(2, 10)])
    assert not cache.room() and len(cache) == 1 + 3  # 42 characters a row with its "{}"
    cache.put([row(20, 1, "y")])
    assert len(cache) == 5


def _no_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """No warm-up searches at the open: they keep their hits' rows in the cache, and run
    only when the graph is whole at the open, which depends on how fast it was linked."""
    monkeypatch.setattr("memlane._memory.querying.WARM_SEARCHES", 0)


def _warmed(mem: Memory, rows: int) -> None:
    """Waits (at most 30 s) until the background reading-in holds ``rows`` rows."""
    deadline = time.monotonic() + 30
    while len(mem._db._cache or ()) < rows:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the row cache was not filled"
        time.sleep(0.01)


def test_a_reopened_store_reads_its_records_in_newest_first_up_to_the_capacity(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that opens a store reads its rows into the cache in the background (the
    newest first, as far as the capacity goes); the writes after that show."""
    with make_store("warm", word_embedder) as mem:
        ids = [r.id for r in mem.add_many({"text": f"note {i} on kites"} for i in range(1500))]
    monkeypatch.setattr("memlane.storage.sqlite.DEFAULT_CAPACITY", 1200)
    monkeypatch.setattr("memlane.storage.pg_target.DEFAULT_CAPACITY", 1200)
    _no_warm_up(monkeypatch)
    mem = make_store("warm", word_embedder)
    _warmed(mem, 1200)
    rowids = sorted(mem._db.all_rowids())  # type: ignore[attr-defined]
    cache = mem._db._cache  # type: ignore[attr-defined]
    assert sorted(cache.get(rowids)[0]) == rowids[-1200:]
    mem.update(ids[-1], text="note 1499 on owls")
    mem.delete(ids[-2])
    assert [h.record.text for h in mem.search("owls", k=1)] == ["note 1499 on owls"]
    assert ids[-2] not in {h.record.id for h in mem.search("note 1498 on kites", k=50)}
    mem.close()


def test_a_reopened_store_answers_new_questions_without_reading_sqlite(
    tmp_path: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(tmp_path / "store", word_embedder) as mem:
        mem.add_many({"text": f"note {i} about the red kite"} for i in range(600))
    ran: list[str] = []
    trace_sqlite(monkeypatch, ran.append)
    with Memory(tmp_path / "store", word_embedder) as mem:
        _warmed(mem, 600)
        ran.clear()
        assert len(mem.search("red kite 17", k=10)) == 10
        assert not _record_reads(ran)


def test_reading_ahead_waits_while_searches_run(
    tmp_path: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows are read into the cache only in a pause between searches: beside a run of
    searches the reading made each about twice as slow on two cores."""
    with Memory(tmp_path / "store", word_embedder) as mem:
        mem.add_many({"text": f"note {i} about the red kite"} for i in range(600))
    quiet = 3600.0
    monkeypatch.setattr("memlane._memory.maintenance.SEARCH_QUIET", quiet)
    # A search as the store opens, so the reading never starts before the check below.
    monkeypatch.setattr(IndexSync, "last_search", time.monotonic())
    _no_warm_up(monkeypatch)
    with Memory(tmp_path / "store", word_embedder) as mem:
        time.sleep(0.3)
        assert len(mem._db._cache or ()) == 0  # type: ignore[attr-defined]
        before = time.monotonic()
        assert len(mem.search("red kite 17", k=10)) == 10
        assert mem._sync.last_search >= before
        assert 0 < len(mem._db._cache or ()) <= 10  # type: ignore[attr-defined]
        # Longer ago than the quiet asked, whenever the monotonic clock started (0 is
        # not "long ago" on a host booted less than an hour ago).
        mem._sync.last_search = time.monotonic() - 2 * quiet
        mem._sync.wake.set()
        _warmed(mem, 600)


def test_a_store_that_has_not_searched_or_written_is_quiet_whatever_the_clock_reads(
    tmp_path: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "No search yet" and "no write yet" are no time on the monotonic clock, whose
    origin is anywhere (the boot, on Linux): however long a pause the reading-ahead and
    the graph's linking wait for, a store that has had neither does not wait."""
    with Memory(tmp_path / "store", word_embedder) as mem:
        mem.add_many({"text": f"note {i} about the red kite"} for i in range(600))
    # Longer than this host, or any, has been up.
    monkeypatch.setattr("memlane._memory.maintenance.SEARCH_QUIET", 1e9)
    with Memory(tmp_path / "store", word_embedder) as mem:
        assert not mem._sync.busy(1e9)
        _warmed(mem, 600)


def test_a_replay_longer_than_the_cache_keeps_its_last_rows_and_no_older_state(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    """Rows a replay reads before the last the cache can hold are not kept (they would
    be pushed out), but neither may an older state of them stay in the cache."""
    mem = make_store("replayed", word_embedder)
    mem.add_many({"text": f"note {i} on kites"} for i in range(300))
    db = mem._db  # type: ignore[attr-defined]
    cache = db._cache
    rowids = sorted(db.all_rowids())
    stale = db.rows_by_rowid([rowids[0]])[rowids[0]]
    cache.capacity = 100
    cache.forget(rowids)
    # An older state of the first row, as a slow read might have left it.
    cache.put([stale._replace(text="an older text", seq=stale.seq - 1)])
    replayed = [r.rowid for rows in db.rows_since(0, batch=64) for r in rows]
    assert replayed == rowids
    found, missing = cache.get(rowids)
    assert sorted(found) == rowids[-100:] and rowids[0] in missing
    assert db.rows_by_rowid([rowids[0]])[rowids[0]].text == "note 0 on kites"
    mem.close()
