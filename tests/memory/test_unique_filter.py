"""elizaOS's ``unique`` flag: kept on the record and filterable, as its
``getMemories({unique: true})`` reads it: ``list``, ``count`` and ``search`` take
``unique=`` (both backends), through a store's reopening, an upgrade from a snapshot that
did not index it, an update and an export."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.errors import InvalidArgumentError


def _fill(mem: Memory) -> dict[str, str]:
    """Two unique facts, their repeats, a near-duplicate and two plain adds (ids by name)."""
    tea = mem.add("Alice likes green tea", unique=True, room_id="r1")
    oslo = mem.add("Bob moved to Oslo last spring", unique=True, room_id="r1")
    again = mem.add("Alice likes green tea", unique=True, room_id="r1")
    assert again.duplicate == "exact" and again.id == tea.id
    near = mem.add("green tea Alice likes", unique=True, room_id="r1")
    assert near.duplicate == "near" and not near.unique
    plain = mem.add("Carol likes green tea too", room_id="r1")
    other_room = mem.add("Dave likes green tea", room_id="r2")
    assert tea.unique and oslo.unique and not plain.unique
    return {
        "tea": tea.id,
        "oslo": oslo.id,
        "near": near.id,
        "plain": plain.id,
        "other": other_room.id,
    }


def _ids(records: list[object]) -> set[str]:
    return {r.id for r in records}  # type: ignore[attr-defined]


def _check(mem: Memory, ids: dict[str, str]) -> None:
    unique, rest = {ids["tea"], ids["oslo"]}, {ids["near"], ids["plain"], ids["other"]}
    assert _ids(mem.list(unique=True)) == unique
    assert _ids(mem.list(unique=False)) == rest
    assert _ids(mem.list()) == unique | rest
    assert mem.count(unique=True) == 2 and mem.count(unique=False) == 3
    assert _ids(mem.list("memories", room_id="r1", unique=True, limit=1, offset=1)) <= unique
    assert len(mem.list(room_id="r1", unique=True, limit=1)) == 1
    hits = mem.search("green tea", k=10, mode="text", unique=True)
    assert [h.record.id for h in hits] == [ids["tea"]]
    hits = mem.search("green tea", k=10, mode="text", unique=False, room_id="r1")
    assert {h.record.id for h in hits} == {ids["near"], ids["plain"]}
    # The flag is the record's; its metadata stays as the caller gave it.
    assert mem.get(ids["tea"]).unique and mem.get(ids["tea"]).metadata == {}


def test_unique_is_kept_and_filterable(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    mem = make_store("unique", word_embedder)
    ids = _fill(mem)
    _check(mem, ids)
    # An update (metadata replaced whole) keeps the flag, and so its filter.
    mem.update(ids["tea"], metadata={"source": "chat"})
    mem.update(ids["plain"], text="Carol likes black tea", metadata={"source": "chat"})
    assert mem.get(ids["tea"]).metadata == {"source": "chat"}
    assert _ids(mem.list(unique=True, filters={"source": "chat"})) == {ids["tea"]}
    assert _ids(mem.list(unique=False, filters={"source": "chat"})) == {ids["plain"]}
    mem.update(ids["tea"], metadata={})
    mem.close()
    # Reopened: from the snapshot close() wrote.
    with make_store("unique", word_embedder) as again:
        _check(again, ids)


def test_a_snapshot_that_did_not_index_the_flag_is_rebuilt(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    mem = make_store("older", word_embedder)
    ids = _fill(mem)
    mem.close()
    # What an older memlane left: a snapshot without the note that it indexes the flag.
    (note,) = tmp_path.rglob("indexes")
    note.unlink()
    with pytest.warns(RuntimeWarning, match="does not say it indexes the records' unique flag"):
        again = make_store("older", word_embedder)
    with again:
        _check(again, ids)
    # A note left by a snapshot an older memlane has since replaced names another change.
    # So does one a process left when it stopped between writing a snapshot and its note.
    note.write_text("unique 1", encoding="ascii")
    with pytest.warns(RuntimeWarning, match="unique flag is another snapshot's"):
        again = make_store("older", word_embedder)
    with again:
        _check(again, ids)


def test_an_export_keeps_the_flag(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    mem = make_store("exported", word_embedder)
    ids = _fill(mem)
    mem.export_jsonl(tmp_path / "out.jsonl")
    with make_store("imported", word_embedder) as copy:
        copy.import_jsonl(tmp_path / "out.jsonl")
        _check(copy, ids)


@pytest.mark.parametrize("bad", ["yes", 1, [True]])
def test_a_bad_unique_argument_names_it(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, bad: object
) -> None:
    mem = make_store("bad", word_embedder)
    mem.add("a fact", unique=True)
    for read in (mem.list, mem.count):
        with pytest.raises(InvalidArgumentError, match="unique must be a bool"):
            read(unique=bad)  # type: ignore[operator]
    with pytest.raises(InvalidArgumentError, match="unique must be a bool"):
        mem.search("fact", unique=bad)  # type: ignore[arg-type]


def test_the_flags_metadata_key_is_reserved(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    mem = make_store("reserved", word_embedder)
    plain = mem.add("a plain fact")
    forged = {"memlane:unique": True}
    for write in (
        lambda: mem.add("forged", metadata=forged),
        lambda: mem.add_many([{"text": "ok"}, {"text": "forged", "metadata": forged}]),
        lambda: mem.update(plain.id, metadata=forged),
    ):
        with pytest.raises(InvalidArgumentError, match="memlane:unique"):
            write()
    assert mem.count() == 1 and mem.count(unique=True) == 0
    assert mem.get(plain.id).metadata == {}
