"""What the checked writes check, and what they cost, on both backends.

``add_many(consume=)`` takes records beside ids: a record given must still be the version
read (``updated_at``), a consume of a record not stored is refused before anything is
embedded, and the consumed rows are read in one go in the transaction. ``delete`` finds
the row of an id inside its transaction (another process may have put a new record
under it). ``evict`` and ``prune`` count before their transaction and read rows only for
what they delete: the work is asserted (rows read, statements run), never the time."""

from __future__ import annotations

import itertools
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import ConflictError, InvalidArgumentError, Memory
from memlane._memory.duplicates import DedupWindow
from memlane._memory.sync import IndexSync
from memlane.records import MemoryRecord
from memlane.storage.sql import SQLStore

SCOPE = {"user_id": "alice"}
_names = itertools.count()


@pytest.fixture
def rows_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many rows each ``IndexSync.rows`` call asked for, from now on."""
    asked: list[int] = []
    rows = IndexSync.rows

    def counted(self: IndexSync, rowids: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(len(rowids))
        return rows(self, rowids, *args, **kwargs)

    monkeypatch.setattr(IndexSync, "rows", counted)
    yield asked


# -- consume: versions ------------------------------------------------------------------------


def test_consume_of_a_record_rewritten_since_it_was_read_stores_nothing(
    make_store: StoreFactory,
) -> None:
    mem = make_store("consume-version", WordHashEmbedder())
    recs = mem.add_many([{"text": f"turn {i} about bees", **SCOPE} for i in range(3)])
    mem.update(recs[0].id, text="turn 0 about wasps")
    with pytest.raises(ConflictError, match=f"{recs[0].id!r}.*rewritten since it was read"):
        mem.add_many([{"text": "a summary of bees", **SCOPE}], consume=recs)
    assert mem.count() == 3 and mem.get(recs[0].id).text == "turn 0 about wasps"
    # An id keeps its meaning (any current version), and a record read again is current.
    fresh = mem.get(recs[0].id)
    mem.add_many([{"text": "a summary", **SCOPE}], consume=[fresh, recs[1].id, recs[2]])
    assert [r.text for r in mem.list()] == ["a summary"]


def test_consume_of_a_record_whose_accesses_were_counted_meanwhile(
    make_store: StoreFactory,
) -> None:
    """Counting an access is no rewrite: the record read before is still that version."""
    mem = make_store("consume-access", WordHashEmbedder())
    (rec,) = mem.add_many([{"text": "bees make honey", **SCOPE}])
    assert [h.record.id for h in mem.search("bees honey", 1, **SCOPE)] == [rec.id]
    mem._writer.flush_access()
    assert mem.get(rec.id).access_count == 1 and mem.get(rec.id).updated_at == rec.updated_at
    mem.add_many([{"text": "a summary", **SCOPE}], consume=[rec])
    assert rec.id not in mem


def test_consume_refuses_two_versions_of_one_record(make_store: StoreFactory) -> None:
    mem = make_store("consume-two", None)
    rec = mem.add("a fact", **SCOPE)
    later = mem.update(rec.id, text="a fact, reworded")
    with pytest.raises(InvalidArgumentError, match="two versions"):
        mem.add_many([{"text": "a summary"}], consume=[rec, later])
    with pytest.raises(InvalidArgumentError, match=r"consume\[0\]\.updated_at"):
        mem.add_many([{"text": "a summary"}], consume=[MemoryRecord(rec.id, "x", updated_at=None)])  # type: ignore[arg-type]
    # One version given twice, or as a record and as an id, is one record.
    mem.add_many([{"text": "a summary"}], consume=[later, later.id, later])
    assert [r.text for r in mem.list()] == ["a summary"]


# -- consume: costs -------------------------------------------------------------------------


def test_consume_of_a_record_not_stored_embeds_nothing(make_store: StoreFactory) -> None:
    emb = WordHashEmbedder()
    mem = make_store("consume-gone-early", emb)
    rec = mem.add("a fact", **SCOPE)
    calls = emb.calls
    with pytest.raises(ConflictError, match=r"'never-stored'.*not stored"):
        mem.add_many([{"text": f"fact {i}"} for i in range(20)], consume=[rec.id, "never-stored"])
    assert emb.calls == calls and mem.count() == 1


def test_consume_reads_its_rows_in_bulk(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of records consumed: a few statements read them, not one per record."""
    mem = make_store("consume-bulk", None)
    ids = [r.id for r in mem.add_many([{"text": f"turn {i}", **SCOPE} for i in range(3000)])]
    reads: list[int] = []
    store = type(mem._sync.db)  # each dialect reads its rows its own way
    rows = store._rows

    caller = threading.current_thread()

    def counted(self: SQLStore, *args: Any) -> Any:
        # The consume's reads alone: the row cache reads rows ahead on a thread of its
        # own after the 3,000 adds, whenever the machine leaves it the time.
        if threading.current_thread() is caller:
            reads.append(1)
        return rows(self, *args)

    monkeypatch.setattr(store, "_rows", counted)
    mem.add_many([{"text": "a summary", **SCOPE}], consume=ids)
    assert mem.count() == 1
    assert len(reads) < 20, len(reads)


def test_the_dedup_window_forgets_a_record_by_its_own_keys() -> None:
    """Forgetting records visits their keys alone, never the whole window (a consume of
    thousands of entries forgot each by a scan of every key)."""

    class Counted(dict[str, Any]):
        scans = 0

        def items(self) -> Any:
            Counted.scans += 1
            return super().items()

    window = DedupWindow(300.0)
    window._entries = Counted()
    for i in range(1000):
        window.remember([f"m{i}", f"e{i}"], f"r{i}", 1_000.0)
    window.remember(["m0"], "r-late", 1_001.0)  # a key taken over by a later record
    window.forget(f"r{i}" for i in range(1000))
    assert Counted.scans == 0
    assert window.find(["m0"], 1_002.0) == "r-late"
    assert window.find(["e0", "m1", "e999"], 1_002.0) is None
    window.forget(["r-late"])
    assert window.find(["m0"], 1_002.0) is None
    # Expired keys leave the index too: forgetting their record later finds nothing.
    window.remember(["old"], "r-old", 1_000.0)
    assert window.find(["old"], 2_000.0) is None
    window.forget(["r-old"])


# -- delete by id -----------------------------------------------------------------------------


def test_a_delete_finds_its_id_in_its_transaction_on_postgres(
    pg_server: Any, tmp_path: Path
) -> None:
    """``b`` deletes X while ``a`` (another process's view) puts a new record under X
    in place of the old, just before ``b``'s transaction: the new X goes."""
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        name = f"reused{next(_names)}"
        a = factory(name, None, cache_dir=tmp_path / "ca")
        b = factory(name, None, cache_dir=tmp_path / "cb")
        a.add("old text", id="X", **SCOPE)
        b._sync.follow()
        db = b._sync.db
        transaction = db.transaction
        done: list[int] = []

        def replaced_first() -> Any:
            if not done:
                done.append(1)
                a.add_many([{"text": "new text", "id": "X", **SCOPE}], consume=["X"])
            return transaction()

        db.transaction = replaced_first  # type: ignore[method-assign]
        b.delete("X")
        assert done and "X" not in b
        a._sync.follow()
        assert "X" not in a and a.count() == 0
    finally:
        factory.close_all()


# -- evict and prune: costs -----------------------------------------------------------------


def test_evict_reads_the_rows_of_what_it_evicts(
    make_store: StoreFactory, rows_read: list[int]
) -> None:
    mem = make_store("evict-cost", None)
    mem.add_many([{"text": f"fact {i}", **SCOPE} for i in range(3000)])
    first = mem.list(order="asc", limit=2, **SCOPE)
    rows_read.clear()
    assert mem.evict(2998, **SCOPE) == first  # ties all: the oldest stored go
    assert sum(rows_read) <= 10, rows_read
    rows_read.clear()
    assert mem.evict(2998, **SCOPE) == []  # at the cap: counted, nothing read
    assert rows_read == []


def _ranked(recs: list[tuple[int, MemoryRecord]]) -> list[str]:
    """The records by eviction rank, the stored order (``n``) last."""

    def rank(item: tuple[int, MemoryRecord]) -> tuple[Any, ...]:
        n, r = item
        unused = max(r.created_at, r.last_accessed_at)
        return (np.float32(r.importance), r.access_count, unused, r.created_at, n)

    return [r.id for _, r in sorted(recs, key=rank)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_evict_takes_the_lowest_ranked(make_store: StoreFactory, tmp_path: Path, seed: int) -> None:
    """The engine's column-at-a-time choice is the rank's, through ties of every column,
    and with records last read before they were created (imported so)."""
    rng = random.Random(seed)
    lines = []
    for i in range(300):
        created = float(rng.choice([1_000, 2_000, 3_000, 1_000 + i]))
        last = created if rng.random() < 0.6 else float(rng.choice([500, 1_500, 2_500, 4_000]))
        lines.append(
            {
                "id": f"r{i:03}",
                "text": f"fact {i}",
                "importance": rng.choice([0.1, 0.2, 0.5]),
                "access_count": rng.choice([0, 0, 1, 2]),
                "created_at": created,
                "last_accessed_at": last,
                "evergreen": rng.random() < 0.05,
                **SCOPE,
            }
        )
    path = tmp_path / f"import{seed}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    mem = make_store(f"evict-rank{seed}", None)
    mem.import_jsonl(path)
    order = {line["id"]: n for n, line in enumerate(lines)}
    for cap in (290, 200, 120, 0):
        recs = [
            (order[r.id], r) for r in mem.list(limit=1000, filters={"evergreen": False}, **SCOPE)
        ]
        want = _ranked(recs)[: max(0, mem.count(**SCOPE) - cap)]
        assert [r.id for r in mem.evict(cap, **SCOPE)] == want


def test_prune_reads_the_rows_of_what_it_prunes_once(
    make_store: StoreFactory, rows_read: list[int]
) -> None:
    mem = make_store("prune-cost", None)
    mem.add_many([{"text": f"fact {i}", "importance": 0.9, **SCOPE} for i in range(500)])
    mem.add_many([{"text": f"weak {i}", "importance": 0.1, **SCOPE} for i in range(5)])
    rows_read.clear()
    assert len(mem.prune(keep_importance_at_least=0.5, **SCOPE)) == 5
    assert sum(rows_read) == 5, rows_read
    rows_read.clear()
    assert mem.prune(keep_importance_at_least=0.5, **SCOPE) == []
    assert rows_read == []


def test_evict_counts_the_accesses_a_search_recorded(make_store: StoreFactory) -> None:
    """Accesses a search recorded (the engine's, not yet flushed) count in the rank; ties
    go in the order stored."""
    mem: Memory = make_store("evict-access", WordHashEmbedder())
    recs = mem.add_many([{"text": f"fact {i} about bees", **SCOPE} for i in range(4)])
    assert mem.search("fact 0 about bees", 1, **SCOPE)[0].record.id == recs[0].id
    evicted = mem.evict(1, **SCOPE)
    assert [r.id for r in evicted] == [r.id for r in recs[1:]]
