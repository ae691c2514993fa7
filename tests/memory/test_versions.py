"""Facts that change: supersession (valid_to, as_of, include_superseded) and the history
of every change, on both backends."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import pytest

from memlane import InvalidArgumentError, Memory, UnknownIdError

DAY = 86400.0


def _texts(hits: list[Any]) -> list[str]:
    return [h.record.text for h in hits]


@pytest.fixture
def dated(make_store: Any, word_embedder: Any) -> tuple[Memory, float, str, str]:
    """A store where "Alice lives in Paris" (day 0) was superseded by Berlin (day 14)."""
    mem = make_store("facts", word_embedder)
    t0 = time.time() - 60 * DAY
    old = mem.add("Alice lives in Paris", agent_id="a", created_at=t0)
    mem.add("Bob drinks green tea every morning", agent_id="a", created_at=t0)
    new = mem.supersede(old.id, "Alice lives in Berlin", at=t0 + 14 * DAY, by="reflection")
    return mem, t0, old.id, new.id


def test_supersede_closes_the_old_record_and_opens_a_new_one(dated: Any) -> None:
    mem, t0, old, new = dated
    closed, opened = mem.get(old), mem.get(new)
    assert closed.valid_to == pytest.approx(t0 + 14 * DAY) and not closed.current
    assert opened.valid_to is None and opened.current
    assert opened.created_at == pytest.approx(t0 + 14 * DAY) == opened.valid_from
    # The successor keeps the old record's scope, table and type.
    assert (opened.agent_id, opened.table, opened.type) == ("a", "memories", "semantic")
    assert len(mem) == 3


def test_searches_return_current_facts_by_default(dated: Any) -> None:
    mem, _, _, _ = dated
    for kw in ({}, {"agent_id": "a"}, {"mode": "text"}, {"mode": "vector"}):
        texts = _texts(mem.search("where does Alice live", k=5, **kw))
        assert "Alice lives in Berlin" in texts
        assert "Alice lives in Paris" not in texts, kw


def test_as_of_answers_as_the_store_stood_then(dated: Any) -> None:
    mem, t0, _, _ = dated
    then = _texts(mem.search("where does Alice live", k=5, as_of=t0 + 7 * DAY))
    assert "Alice lives in Paris" in then and "Alice lives in Berlin" not in then
    later = _texts(mem.search("where does Alice live", k=5, as_of=t0 + 20 * DAY))
    assert "Alice lives in Berlin" in later and "Alice lives in Paris" not in later
    # Before anything was recorded, nothing was true.
    assert mem.search("where does Alice live", as_of=t0 - DAY) == []


def test_include_superseded_shows_the_chain(dated: Any) -> None:
    mem, _, old, new = dated
    hits = mem.search("where does Alice live", k=5, include_superseded=True)
    assert {old, new} <= {h.record.id for h in hits}
    with pytest.raises(InvalidArgumentError, match="not both"):
        mem.search("Alice", as_of=time.time(), include_superseded=True)


def test_history_has_every_version_with_who_and_when(dated: Any) -> None:
    mem, t0, old, new = dated
    mem.update(new, text="Alice lives in Berlin, Mitte", by="user")
    versions = mem.history(old)
    assert versions == mem.history(new)  # one chain, from either end
    assert [(v.record.text, v.event, v.by, v.ended) for v in versions] == [
        ("Alice lives in Paris", "add", None, "supersede"),
        ("Alice lives in Berlin", "supersede", "reflection", "update"),
        ("Alice lives in Berlin, Mitte", "update", "user", None),
    ]
    assert versions[0].superseded_by == new and versions[0].ended_by == "reflection"
    assert versions[0].ended_at == pytest.approx(t0 + 14 * DAY)
    assert versions[0].record.valid_to == pytest.approx(t0 + 14 * DAY)
    mem.delete(new)
    versions = mem.history(old)
    assert versions[-1].ended == "delete" and versions[-1].record.text.endswith("Mitte")
    assert mem.history("no-such-id") == []


def test_history_survives_a_reopen(make_store: Any, word_embedder: Any) -> None:
    mem = make_store("reopen", word_embedder)
    rec = mem.add("the launch is on Monday", agent_id="a")
    mem.update(rec.id, text="the launch is on Tuesday")
    nxt = mem.supersede(rec.id, "the launch is on Friday", by="planner")
    mem.close()
    mem = make_store("reopen", word_embedder)
    assert [v.record.text for v in mem.history(nxt.id)] == [
        "the launch is on Monday",
        "the launch is on Tuesday",
        "the launch is on Friday",
    ]
    assert _texts(mem.search("when is the launch", k=3)) == ["the launch is on Friday"]
    mem.close()


def test_superseding_twice_is_refused_and_changes_nothing(dated: Any) -> None:
    mem, t0, old, new = dated
    with pytest.raises(InvalidArgumentError, match="superseded already"):
        mem.supersede(old, "Alice lives in Rome")
    with pytest.raises(UnknownIdError):
        mem.supersede("nope", "x")
    with pytest.raises(InvalidArgumentError, match="before"):
        mem.supersede(new, "Alice lives in Rome", at=t0)
    with pytest.raises(InvalidArgumentError):
        mem.supersede(new, "")
    assert len(mem) == 3 and len(mem.history(new)) == 2


def test_a_superseded_fact_is_no_duplicate(dated: Any) -> None:
    mem, _, old, _ = dated
    again = mem.add("Alice lives in Paris", agent_id="a", unique=True)
    assert again.duplicate is None and again.id != old
    assert "Alice lives in Paris" in _texts(mem.search("where does Alice live", k=5))


def test_filters_read_valid_to(dated: Any) -> None:
    mem, t0, old, _ = dated
    closed = mem.list(filters={"valid_to": {"$exists": True}})
    assert [r.id for r in closed] == [old]
    assert mem.count(filters={"valid_to": None}) == 2
    assert mem.count(filters={"valid_to": {"$lt": t0 + 15 * DAY}}) == 1


def test_jsonl_carries_supersession(dated: Any, make_store: Any, word_embedder: Any) -> None:
    mem, _, old, new = dated
    path = make_store.tmp_path / "facts.jsonl"
    mem.export_jsonl(path)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert {r["id"]: r["valid_to"] is not None for r in lines if "id" in r}[old]
    mem.update(new, text="Alice lives in Berlin, Mitte", by="user")
    mem.export_jsonl(path)
    assert sum("history" in json.loads(x) for x in path.read_text().splitlines()) == 2
    copy = make_store("copy", word_embedder)
    assert copy.import_jsonl(path) == 3
    assert copy.get(old).valid_to == mem.get(old).valid_to
    assert "Alice lives in Paris" not in _texts(copy.search("where does Alice live", k=5))
    # The history comes along: the same versions, events and authors.
    assert copy.history(new) == mem.history(new)
    # Skipped records keep the store's own history (nothing is added twice).
    assert copy.import_jsonl(path, on_conflict="skip") == 0
    assert copy.history(new) == mem.history(new)


def test_a_bad_history_line_is_refused(make_store: Any, word_embedder: Any) -> None:
    mem = make_store("bad", word_embedder)
    path = make_store.tmp_path / "bad.jsonl"
    good = {"id": "h1", "text": "x", "event": "update", "at": 1.0, "by": None, "next_id": None}
    for bad, match in (
        ({**good, "event": "rename"}, "event"),
        ({**good, "at": "yesterday"}, "'at'"),
        ({**good, "text": ""}, "text"),
        ({**good, "by": 3}, "'by'"),
    ):
        path.write_text(json.dumps({"history": bad}) + "\n")
        with pytest.raises(InvalidArgumentError, match=match):
            mem.import_jsonl(path)
    assert mem.history("h1") == []


def test_many_superseded_records_still_leave_searches(make_store: Any, word_embedder: Any) -> None:
    # Past the engine's over-fetch bound it selects current records instead; both
    # paths must give the same answer.
    mem = make_store("many", word_embedder)
    recs = mem.add_many([{"text": f"counter value is {i}", "agent_id": "a"} for i in range(2100)])
    t = time.time()
    for rec in recs[:2060]:
        mem.supersede(rec.id, f"counter value was reset from {rec.text[-4:]}", at=t)
    hits = mem.search("counter value is", k=50, mode="text")
    assert all(h.record.current for h in hits)
    assert sum(h.record.text.startswith("counter value is") for h in hits) == 40


def test_sqlite_store_of_schema_1_gains_valid_to(tmp_path: Any, word_embedder: Any) -> None:
    path = tmp_path / "old"
    mem = Memory(path, word_embedder)
    rec = mem.add("an old fact")
    mem.close()
    # Take the store back to schema 1: no valid_to column, no history.
    db = sqlite3.connect(path / "memory.db")
    db.executescript(
        "ALTER TABLE records DROP COLUMN valid_to; DROP TABLE history;"
        "UPDATE meta SET value = '1' WHERE key = 'schema_version';"
    )
    db.close()
    mem = Memory(path, word_embedder)
    nxt = mem.supersede(rec.id, "a new fact")
    assert _texts(mem.search("fact")) == ["a new fact"]
    assert [v.record.text for v in mem.history(nxt.id)] == ["an old fact", "a new fact"]
    mem.close()


def test_superseded_records_at_the_top_of_a_list_are_replaced_by_current_ones(
    make_store: Any, word_embedder: Any
) -> None:
    # 100 superseded records match the query best: the first ask of each retriever
    # (pool + at most pool more) finds none current enough, so it asks again.
    mem = make_store("top", word_embedder)
    old = mem.add_many([{"text": f"alpha beta gamma note {i}"} for i in range(100)])
    mem.add_many([{"text": f"alpha note {i}"} for i in range(60)])
    t = time.time()
    for rec in old:
        mem.supersede(rec.id, f"unrelated text {rec.id}", at=t)
    for mode in ("text", "vector", "hybrid"):
        hits = mem.search("alpha beta gamma", k=50, mode=mode, track_access=False)
        assert len(hits) == 50 and all(h.record.current for h in hits), mode
        # The same as a search that selects the current records first.
        selected = mem.search(
            "alpha beta gamma", k=50, mode=mode, filters={"valid_to": None}, track_access=False
        )
        assert [h.record.id for h in hits] == [h.record.id for h in selected], mode
    texts = [h.record.text for h in mem.search("alpha beta gamma", k=50, mode="text")]
    assert sum(t.startswith("alpha note") for t in texts) == 50
