"""A store's ``default_scope`` fills the scope fields a call leaves out, never a stored
record's, on both backends: ``update`` keeps the record in its scope (an unset field
stays unset), ``supersede``'s successor keeps the old record's, and ``import_jsonl``
stores every field as exported. Scopes are partitions: a rewrite of the importance
must not hand an unscoped record to one agent."""

from __future__ import annotations

from pathlib import Path

from conftest import StoreFactory
from memlane import Memory

DEFAULT = {"agent_id": "a"}


def unscoped(mem: Memory) -> set[str]:
    """The ids of user u1's current records that no agent holds (``mem`` has no default
    scope, which every read would add)."""
    found = mem.list(user_id="u1", filters={"agent_id": None, "valid_to": None}, limit=100)
    return {r.id for r in found}


def test_update_and_supersede_keep_the_records_scope(make_store: StoreFactory) -> None:
    mem = make_store("scoped")
    tea = mem.add("alice likes tea", user_id="u1")
    paris = mem.add("alice lives in Paris", user_id="u1")
    mem.close()
    mem = make_store("scoped", default_scope=DEFAULT)
    assert mem.update(tea.id, importance=0.9).agent_id is None
    assert mem.update(mem.get(tea.id), text="alice likes green tea").agent_id is None
    berlin = mem.supersede(paris.id, "alice lives in Berlin")
    assert berlin.agent_id is None
    assert mem.get(tea.id).agent_id is None and mem.get(berlin.id).agent_id is None
    assert mem.list(user_id="u1") == []  # agent a's: none of them
    # A call's own scope is still filled from it.
    jazz = mem.add("alice likes jazz", user_id="u1")
    assert jazz.agent_id == "a"
    mem.close()
    mem = make_store("scoped")
    assert unscoped(mem) == {tea.id, berlin.id}


def test_an_import_keeps_every_field_as_exported(make_store: StoreFactory, tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    src = make_store("source")
    note = src.add("a shared note", user_id="u1")
    fact = src.add("alice lives in Paris", user_id="u1")
    berlin = src.supersede(fact.id, "alice lives in Berlin")
    src.export_jsonl(path)
    dst = make_store("target", default_scope=DEFAULT)
    assert dst.import_jsonl(path) == 3
    assert dst.list(user_id="u1") == []  # agent a's: none of them
    assert [v.record.agent_id for v in dst.history(fact.id)] == [None, None]
    dst.close()
    dst = make_store("target")
    assert unscoped(dst) == {note.id, berlin.id}
    assert dst.get(fact.id).agent_id is None


def test_a_default_scope_set_after_the_open_narrows_reads_and_is_checked(
    make_store: StoreFactory,
) -> None:
    mem = make_store("later")
    mem.add("alice likes tea", agent_id="a")
    mem.add("bob likes tea", agent_id="b")
    mem.default_scope = {"agent_id": "b"}
    assert [h.record.text for h in mem.search("tea", mode="text")] == ["bob likes tea"]
    assert [r.text for r in mem.list()] == ["bob likes tea"]
    # No dict of scope fields: refused as a call's scope keywords are, not read as none.
    for wrong in ({"agent": "b"}, None):
        mem.default_scope = wrong  # type: ignore[assignment]
        for read in (lambda: mem.search("tea", mode="text"), mem.list):
            try:
                read()
            except TypeError:
                pass
            else:
                raise AssertionError(f"a default scope of {wrong!r} was read")
