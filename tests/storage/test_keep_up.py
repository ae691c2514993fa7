"""A bulk write to an embedded store that finds more than ``MAX_PARKED`` vectors parked
first links as many as it adds (``IndexSync.keep_up``): a load in batches leaves no more
than that plus a batch parked, so a search never scans more; a write after a rebuild
links as many as its own, and never waits for the whole backlog; an interrupt while it
links leaves the write unmade."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import PgServer, StoreFactory, WordHashEmbedder
from memlane import Memory


@pytest.fixture
def no_background(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parked vectors stay parked unless a write links them."""
    monkeypatch.setattr("memlane._memory.maintenance.run", lambda *args: None)
    monkeypatch.setattr("memlane._memory.sync.MAX_PARKED", 100)


def _rows(n: int, start: int = 0) -> list[dict[str, str]]:
    return [{"text": f"note {i} on the river"} for i in range(start, start + n)]


@pytest.mark.usefixtures("no_background")
def test_a_bulk_load_leaves_at_most_max_parked_and_a_batch(tmp_path: Path) -> None:
    with Memory(tmp_path / "store", WordHashEmbedder()) as mem:
        mem.add_many(_rows(80))
        assert mem._sync.engine.pending() == 80  # under the bound: parked, as before
        mem.add_many(_rows(124, 80))
        assert mem._sync.engine.pending() == 204  # it found 80: still under the bound
        for start in range(204, 1000, 124):
            mem.add_many(_rows(124, start))
            assert mem._sync.engine.pending() == 100 + 124
        assert len(mem.search("river", k=1000, mode="vector")) == 1000


@pytest.mark.usefixtures("no_background")
def test_an_interrupted_link_leaves_the_write_unmade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(tmp_path / "store", WordHashEmbedder()) as mem:
        mem.add_many(_rows(300))
        engine = mem._sync.engine

        class Interrupted:
            def __getattr__(self, name: str) -> object:
                return getattr(engine, name)

            def index_pending(self, *args: object) -> int:
                raise KeyboardInterrupt

        monkeypatch.setattr(mem._sync, "engine", Interrupted())
        with pytest.raises(KeyboardInterrupt):
            mem.add_many(_rows(50, 300))
        monkeypatch.setattr(mem._sync, "engine", engine)
        assert len(mem) == mem.count() == 300


@pytest.mark.usefixtures("no_background")
def test_a_write_after_a_rebuild_links_only_its_own(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Memory(store, WordHashEmbedder()) as mem:
        mem.add_many(_rows(400))
        mem.wait_indexed()
    (store / "index").rename(tmp_path / "gone")
    with pytest.warns(RuntimeWarning, match="it is missing"):
        mem = Memory(store, WordHashEmbedder())
    with mem:
        assert mem._sync.engine.pending() == 400
        mem.add_many(_rows(30, 400))
        assert mem._sync.engine.pending() == 400  # its own 30 linked, not the backlog
        mem.add(text="one more note")  # a single add parks, as before
        assert mem._sync.engine.pending() == 401


@pytest.mark.usefixtures("no_background")
def test_a_postgresql_store_leaves_linking_to_its_thread(
    tmp_path: Path, pg_server: PgServer
) -> None:
    stores = StoreFactory("postgres", tmp_path, pg_server)
    try:
        mem = stores("shared", WordHashEmbedder())
        mem.add_many(_rows(300))
        assert mem._sync.engine.pending() == 300
    finally:
        stores.close_all()
