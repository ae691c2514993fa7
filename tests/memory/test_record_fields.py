"""Each field of a record is declared once, in ``MemoryRecord``: ``NewRecord`` inherits
its fields, and ``schema`` derives the table's columns and ``Row`` from them (``row.py``,
generated and checked here to be current); the public ``MemoryRecord`` (fields, order,
repr, ``to_dict``, equality, JSONL lines) is as it was, and every write hands back a
``MemoryRecord`` itself."""

from __future__ import annotations

import json
import typing
from dataclasses import fields
from pathlib import Path

import numpy as np

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory, MemoryRecord, schema
from memlane._memory.encoding import NewRecord, new_record, record
from memlane.records import STORED
from memlane.schema import PUBLIC_NAMES, RECORD_COLUMNS, Row

PUBLIC_FIELDS = [
    "id",
    "text",
    "table",
    "type",
    "agent_id",
    "user_id",
    "room_id",
    "world_id",
    "session_id",
    "namespace",
    "speaker",
    "importance",
    "evergreen",
    "unique",
    "metadata",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "access_count",
    "valid_to",
    "expires_at",
    "recorded_at",
    "content_hash",
    "embedding",
    "duplicate",
    "duplicate_of",
]


def test_a_new_record_declares_only_what_a_stored_one_lacks() -> None:
    assert issubclass(NewRecord, MemoryRecord)
    own = [f.name for f in fields(NewRecord)][len(fields(MemoryRecord)) :]
    assert own == ["metadata_json", "dedup", "id_given"]
    assert [f.name for f in fields(NewRecord)][: len(PUBLIC_FIELDS)] == PUBLIC_FIELDS


def test_the_generated_row_is_current() -> None:
    path = Path(schema.__file__).with_name("row.py")
    rewrite = "memlane.schema.write_row() rewrites it"
    assert path.read_text() == schema.row_source(), rewrite
    assert Row._fields == schema.COLUMNS


def test_the_row_is_the_records_fields_between_the_stores_own_columns() -> None:
    assert Row._fields[0] == "rowid" and Row._fields[-2:] == ("seq", "content_seq")
    assert Row._fields[1:-2] == RECORD_COLUMNS
    assert tuple({"table": "tbl", "unique": "uniq"}.get(f, f) for f in STORED) == RECORD_COLUMNS
    assert PUBLIC_NAMES == {"tbl": "table", "uniq": "unique"}
    hints = typing.get_type_hints(Row)
    # A field's type gives its column's: a flag, JSON text, a blob, nullable or not.
    assert (hints["evergreen"], hints["uniq"], hints["metadata"]) == (int, int, str)
    assert hints["embedding"] == bytes | None and hints["valid_to"] == float | None
    assert {"evergreen", "uniq"} == schema.FLAGS
    create = schema.records_table("postgres")
    assert "    id text NOT NULL UNIQUE," in create and "    speaker text," in create
    assert "    evergreen int2 NOT NULL," in create and "    embedding bytea," in create


def test_memory_record_is_as_it_was() -> None:
    assert [f.name for f in fields(MemoryRecord)] == PUBLIC_FIELDS
    rec = MemoryRecord("m1", "tea at noon", metadata={"k": [1]}, embedding=np.ones(2, np.float32))
    assert repr(rec) == (
        "MemoryRecord(id='m1', text='tea at noon', table='memories', type='semantic', "
        "agent_id=None, user_id=None, room_id=None, world_id=None, session_id=None, "
        "namespace=None, speaker=None, importance=0.5, evergreen=False, unique=False, "
        "metadata={'k': [1]}, created_at=0.0, updated_at=0.0, last_accessed_at=0.0, "
        "access_count=0, valid_to=None, expires_at=None, recorded_at=0.0, content_hash='', "
        "duplicate=None, duplicate_of=None)"
    )
    assert list(rec.to_dict()) == PUBLIC_FIELDS[:-2]
    assert rec.to_dict()["embedding"] == [1.0, 1.0]
    assert list(rec.to_dict(embedding=False)) == PUBLIC_FIELDS[:-3]
    # Equality ignores the vector and what an add reports, and needs the same class.
    assert rec == MemoryRecord("m1", "tea at noon", metadata={"k": [1]}, duplicate="exact")
    assert rec != MemoryRecord("m1", "tea at noon")
    new = new_record(0.0, {}, None, text="tea at noon", id="m1", metadata={"k": [1]})
    assert new.record() == MemoryRecord(
        "m1",
        "tea at noon",
        metadata={"k": [1]},
        created_at=0.0,
        content_hash=new.content_hash,
    )
    assert new != new.record()


def test_every_field_goes_to_its_column_and_back() -> None:
    new = new_record(
        7.0,
        {},
        2,
        True,
        id="r",
        text="a text",
        table="tbl-value",
        type="kind",
        agent_id="a",
        user_id="u",
        room_id="r",
        world_id="w",
        session_id="s",
        namespace="n",
        speaker="sp",
        importance=0.25,
        evergreen=True,
        unique=True,
        metadata={"m": 1},
        created_at=1.0,
        updated_at=2.0,
        last_accessed_at=3.0,
        access_count=4,
        valid_to=5.0,
        expires_at=6.0,
        recorded_at=6.5,
        embedding=np.ones(2, np.float32),
    )
    row = new.row(11, 12, b"blob")
    assert (row.rowid, row.seq, row.content_seq, row.embedding) == (11, 12, 12, b"blob")
    assert (row.tbl, row.uniq, row.evergreen, row.metadata) == ("tbl-value", 1, 1, '{"m":1}')
    for field, column in zip(STORED, RECORD_COLUMNS, strict=True):
        if field not in ("table", "unique", "evergreen", "metadata", "embedding"):
            assert getattr(row, column) == getattr(new, field), field
    back = record(row._replace(embedding=None), None)
    assert type(back) is MemoryRecord and back == new.record()
    assert (back.table, back.unique, back.evergreen) == ("tbl-value", True, True)


def as_read(mem: Memory, rec: MemoryRecord) -> MemoryRecord:
    """``rec``, checked to be a ``MemoryRecord`` itself, equal to the store's."""
    assert type(rec) is MemoryRecord
    assert mem.get(rec.id) == rec
    return rec


def test_every_write_hands_back_a_memory_record(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    mem = make_store("s", word_embedder)
    given = {"text": "the kettle is blue", "table": "facts", "unique": True, "speaker": "ann"}
    added = as_read(mem, mem.add(**given, metadata={"room": 3}))
    door = as_read(mem, mem.add_many([{"text": "the door is red", "evergreen": True}])[0])
    updated = as_read(mem, mem.update(added.id, text="the kettle is green"))
    as_read(mem, mem.supersede(door.id, "the door is grey"))
    assert (updated.table, updated.speaker, updated.metadata) == ("facts", "ann", {"room": 3})
    path = tmp_path / "out.jsonl"
    assert mem.export_jsonl(path) == 3
    read = [json.loads(line) for line in path.read_text().splitlines()]
    lines = [line for line in read if "history" not in line]
    assert [list(line) for line in lines] == [list(STORED)] * 3
    history = [line["history"] for line in read if "history" in line]
    assert [list(h) for h in history] == [[*STORED[:-1], "event", "at", "by", "next_id"]] * 2
    other = make_store("t", word_embedder)
    assert other.import_jsonl(path) == 3
    for line in lines:
        rec = other.get(line["id"])
        assert type(rec) is MemoryRecord
        assert rec.to_dict(embedding=False) == {k: v for k, v in line.items() if k != "embedding"}
