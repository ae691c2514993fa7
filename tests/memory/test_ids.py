"""Record ids: random version-4 UUIDs, never repeated, not even across a fork."""

from __future__ import annotations

import json
import os
import random
import string
import uuid
from pathlib import Path

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import InvalidArgumentError, coerce
from memlane.coerce import MAX_ID_BYTES, new_id


def test_ids_are_version_4_uuids_and_distinct() -> None:
    ids = [new_id() for _ in range(2000)]  # several refills of the random pool
    assert len(set(ids)) == len(ids)
    for i in ids[:300]:
        u = uuid.UUID(i)
        assert str(u) == i and u.version == 4 and u.variant == uuid.RFC_4122


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    new_id()  # the pool holds unused digits now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, "".join(new_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode()
    os.close(read)
    parent = "".join(new_id() for _ in range(10))
    assert len(child) == len(parent) == 360
    assert not {child[i : i + 36] for i in range(0, 360, 36)} & {
        parent[i : i + 36] for i in range(0, 360, 36)
    }


def test_an_id_past_the_bound_is_refused_by_name_on_both_backends(
    make_store: StoreFactory,
) -> None:
    """PostgreSQL's index of ids refused one past about 2.7 kB with a bare "write failed",
    where SQLite kept it; both now refuse ids longer than ``MAX_ID_BYTES`` (UTF-8)."""
    with make_store("ids", WordHashEmbedder()) as mem:
        at_bound = "é" * (MAX_ID_BYTES // 2)
        assert mem.add("at the bound", id=at_bound).id == at_bound
        for bad in ("é" * (MAX_ID_BYTES // 2 + 1), "x" * 3_000):
            with pytest.raises(InvalidArgumentError, match=f"at most {MAX_ID_BYTES}"):
                mem.add("past it", id=bad)
            with pytest.raises(InvalidArgumentError, match=f"at most {MAX_ID_BYTES}"):
                mem.add_many([{"text": "kept out too"}, {"text": "past it", "id": bad}])
        assert [r.id for r in mem.list(limit=10)] == [at_bound]


def test_a_stored_id_past_the_bound_still_updates_exports_and_imports(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Earlier versions stored ids of any length (and a tenant's owner sees its ids behind
    the tenant's prefix): the bound is on ids a caller gives, not on those a store holds.
    Before, an update of such a record and the import of its export were refused."""
    long_id = "r" * 2_000  # within PostgreSQL's index entry, past the bound
    with make_store("old", WordHashEmbedder()) as mem:
        monkeypatch.setattr(coerce, "MAX_ID_BYTES", 10**6)  # as an earlier version wrote
        mem.add("stored by an earlier version", id=long_id)
        monkeypatch.undo()
        assert mem.update(long_id, text="rewritten now").text == "rewritten now"
        assert mem.update(long_id, importance=0.9).importance == 0.9
        mem.export_jsonl(tmp_path / "backup.jsonl")
    with make_store("restored", WordHashEmbedder()) as mem:
        assert mem.import_jsonl(tmp_path / "backup.jsonl") == 1
        got = mem.get(long_id)
        assert got is not None and got.text == "rewritten now"
        with pytest.raises(InvalidArgumentError, match=f"at most {MAX_ID_BYTES}"):
            mem.add("a new record past the bound", id=long_id + "2")


def test_an_id_postgresql_cannot_index_is_refused_by_name(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    """An imported id past PostgreSQL's index entry (about 2.7 kB; also a tenant's prefix
    and a long id) raised a bare "write failed"; it is the caller's value that is
    refused, and SQLite keeps it."""
    huge = "".join(random.Random(3).choices(string.ascii_letters, k=4_000))
    line = {"id": huge, "text": "imported", "created_at": 1.0, "updated_at": 1.0}
    (tmp_path / "in.jsonl").write_text(json.dumps(line) + "\n")
    with make_store("huge", WordHashEmbedder()) as mem:
        if make_store.backend == "postgres":
            with pytest.raises(InvalidArgumentError, match="refused a value: index row size"):
                mem.import_jsonl(tmp_path / "in.jsonl")
            assert mem.count() == 0
        else:
            assert mem.import_jsonl(tmp_path / "in.jsonl") == 1
