"""A notes file's head is kept under an id anyone can compute from its scope and kind: a
record of another scope added under it blocked every edit and import of that scope's
file for good ("id(s) already stored"). The head takes the next of its spare ids, as a
core block, a profile and a daily log do, and stays there. Fails on the code before."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.notes import NOTE_LIMITS, Notebook
from memlane.notes_files import HEADS, NOTE_FILES


def _base_id(kind: str, scope: dict[str, str]) -> str:
    key = json.dumps([HEADS, sorted(scope.items()), kind])
    return "notes-head-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def test_a_head_id_held_by_another_scope_is_passed_over(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    mem = make_store("squat", WordHashEmbedder())
    squat = mem.add("squat", id=_base_id("journal", {"agent_id": "a"}), agent_id="b")
    book = Notebook(mem, {"agent_id": "a"})
    book.append("JOURNAL.md", "the first entry")
    book.append("JOURNAL.md", "the second entry")
    assert sorted(r.text for r in mem.list("notes", agent_id="a")) == [
        "the first entry",
        "the second entry",
    ]
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "JOURNAL.md").write_text("## 2026-05-01\nhello\n")
    assert mem.import_notes(folder, agent_id="a") == {"JOURNAL.md": 1}
    heads = mem.list(HEADS)
    assert [(h.id, h.scope) for h in heads] == [(squat.id + "-1", {"agent_id": "a"})]
    # The squatter gone, the head stays where it is: one head, edits still checked by it.
    mem.delete(squat.id)
    book.append("JOURNAL.md", "a third entry")
    assert [h.id for h in mem.list(HEADS)] == [squat.id + "-1"]
    assert mem.get(squat.id + "-1").scope == {"agent_id": "a"}
    texts = [r.text for r in mem.list("notes", agent_id="a", order="asc")]
    assert texts == ["hello", "a third entry"]


def test_an_edit_sees_what_another_process_wrote_before_it_began(
    pg_server: Any, tmp_path: Path
) -> None:
    """Two views of one PostgreSQL schema (as two processes): a replace right after the
    other's append returned found the text missing (the notes were read from an index
    that had not followed the commit yet), in 27 of 30 tries."""
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        a = factory("shared", WordHashEmbedder())
        b = Memory(factory.location("shared"), WordHashEmbedder(), cache_dir=tmp_path / "b")
        factory.opened.add(b)  # closed with the others, whatever happens
        limits = dict.fromkeys(NOTE_LIMITS, 10**6)
        writer = Notebook(a, {"agent_id": "a"}, limits=limits)
        editor = Notebook(b, {"agent_id": "a"}, limits=limits)
        for i in range(10):
            writer.append("JOURNAL.md", f"entry{i}")
            editor.replace("JOURNAL.md", f"entry{i}", f"ENTRY{i}")
        folder = tmp_path / "notes"
        b.export_notes(folder, agent_id="a")
        writer.append("JOURNAL.md", "entry after the export")
        # The import compares the file with every process's notes: it puts them back.
        assert b.import_notes(folder, agent_id="a") == {
            **dict.fromkeys(NOTE_FILES, 0),
            "JOURNAL.md": 10,
        }
        b.close()
    finally:
        factory.close_all()


def test_two_first_writes_racing_a_squatters_delete_leave_one_head(
    make_store: StoreFactory, monkeypatch: Any
) -> None:
    """The first writer read the base id squatted and took a spare one; the squatter was
    deleted and a second writer made the head under the base id before the first
    committed. Both heads stayed current (the spare one orphaned for good). Now the first
    head's write deletes the scope's heads under the file's other ids: one head stays."""
    mem = make_store("race", WordHashEmbedder())
    scope = {"agent_id": "a"}
    squat = mem.add("squat", id=_base_id("journal", scope), agent_id="intruder")
    first, second = Notebook(mem, scope), Notebook(mem, scope)
    replace = mem.replace

    def held(*args: Any, **kw: Any) -> Any:
        monkeypatch.setattr(mem, "replace", replace)
        mem.delete(squat.id)
        second.append("JOURNAL.md", "the second writer's entry")
        return replace(*args, **kw)

    monkeypatch.setattr(mem, "replace", held)
    first.append("JOURNAL.md", "the first writer's entry")
    heads = mem.list(HEADS, filters={"valid_to": None})
    assert [h.id for h in heads] == [squat.id + "-1"]
    texts = sorted(r.text for r in mem.list("notes", agent_id="a"))
    assert texts == ["the first writer's entry", "the second writer's entry"]
