"""Record ids: random version-4 UUIDs, never repeated, not even across a fork."""

from __future__ import annotations

import os
import uuid

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import InvalidArgumentError
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
