"""The speaker of a conversation turn: stored with the record, and matched by a query
that names it ("I", "my": the user; a speaker's name), which lifts that speaker's turns."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane._core import DEFAULT_SPEAKER_WEIGHT
from memlane.agent import SessionScope
from memlane.agent.caps import Limits, store_message
from memlane.agent.history import MESSAGES, add_message
from memlane.agent.reports import TurnReport
from memlane.errors import InvalidArgumentError
from memlane.storage import SCHEMA_VERSION
from memlane.storage.postgres import PostgresTarget

T0 = 1_700_000_000.0
QUERY = np.array([1.0, 0.0], dtype=np.float32)


def _vec(cos: float) -> np.ndarray:
    """A unit vector whose cosine with the query is ``cos``."""
    return np.array([cos, np.sqrt(1.0 - cos * cos)], dtype=np.float32)


def _memory(path: Path | None = None) -> Memory:
    return Memory(path, WordHashEmbedder(dimension=2), track_access=False, dedup_window=0)


def _chat(mem: Memory, turns: list[tuple[str, str | None, float]]) -> list[str]:
    """Stores ``(text, speaker, cosine)`` turns of one session, a minute apart."""
    items = [
        {
            "text": text,
            "speaker": speaker,
            "session_id": "s1",
            "created_at": T0 + 60 * i,
            "embedding": _vec(cos),
        }
        for i, (text, speaker, cos) in enumerate(turns)
    ]
    return [r.id for r in mem.add_many(items)]


def _search(mem: Memory, query: str, **kw: Any) -> list[Any]:
    return mem.search(
        query, k=5, query_embedding=QUERY, weights={"relevance": 1}, explain=True, **kw
    )


def _ids(hits: list[Any]) -> list[str]:
    return [h.record.id for h in hits]


#: The user's own turn answers the first-person question; Caroline's says its words more.
MINE = [
    ("I adopted Rex, a small dog, last spring.", "user", 0.55),
    ("My dog's name is Max and the dog sleeps all day.", "Caroline", 0.5),
]


def test_a_first_person_question_finds_the_users_own_turn() -> None:
    with _memory() as mem:
        mine, hers = _chat(mem, MINE)
        assert DEFAULT_SPEAKER_WEIGHT > 0
        assert _ids(_search(mem, "What is the name of my dog?", speaker_weight=0.0))[0] == hers
        hits = _search(mem, "What is the name of my dog?")
        assert _ids(hits)[0] == mine
        explain = {h.record.id: h.explain for h in hits}
        assert explain[mine]["bm25_speaker"] is True
        assert explain[hers]["bm25_speaker"] is False


def test_a_name_in_the_question_finds_that_speakers_turns() -> None:
    with _memory() as mem:
        alice, bob = _chat(
            mem,
            [
                ("Rome was lovely, the trip was worth it.", "Alice", 0.5),
                ("The trip! The Rome trip photos, the trip of a lifetime.", "Bob", 0.5),
            ],
        )
        assert _ids(_search(mem, "Rome trip", speaker_weight=0.0))[0] == bob
        hits = _search(mem, "What did Alice say about the Rome trip?")
        assert _ids(hits)[0] == alice
        assert hits[0].explain["bm25_speaker"] is True
        # The first person names the user, whom this chat does not have.
        assert not any(h.explain["bm25_speaker"] for h in _search(mem, "my Rome trip"))


def test_a_store_without_speakers_scores_as_before() -> None:
    with _memory() as mem:
        _chat(mem, [(text, None, cos) for text, _, cos in MINE])
        query = "What is the name of my dog?"
        default = _search(mem, query)
        off = _search(mem, query, speaker_weight=0.0)
        assert [(h.record.id, h.score) for h in default] == [(h.record.id, h.score) for h in off]
        assert all(h.explain["bm25_speaker"] is None for h in default)
        assert all(h.record.speaker is None for h in default)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), float("inf")])
def test_a_weight_outside_zero_to_one_is_refused(bad: float) -> None:
    with _memory() as mem:
        _chat(mem, MINE)
        with pytest.raises(InvalidArgumentError, match="speaker_weight must be in"):
            _search(mem, "my dog", speaker_weight=bad)
        with pytest.raises(InvalidArgumentError, match="speaker_weight must be a number"):
            _search(mem, "my dog", speaker_weight="high")


@pytest.mark.parametrize("bad", [5, b"user", "", "   ", ["user"]])
def test_a_speaker_that_is_not_a_nonempty_str_is_refused_storing_nothing(bad: Any) -> None:
    with _memory() as mem:
        with pytest.raises(InvalidArgumentError, match="speaker"):
            mem.add("hello", speaker=bad, embedding=_vec(0.5))
        with pytest.raises(InvalidArgumentError, match="speaker"):
            mem.add_many(
                [
                    {"text": "fine", "speaker": "user", "embedding": _vec(0.5)},
                    {"text": "bad", "speaker": bad, "embedding": _vec(0.5)},
                ]
            )
        assert mem.count() == 0


def test_the_speaker_comes_back_after_a_snapshot_and_a_rebuild(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with _memory(store) as mem:
        mine, hers = _chat(mem, MINE)
        before = [(h.record.id, h.explain) for h in _search(mem, "my dog")]
        mem.snapshot()

    def check(mem: Memory) -> None:
        assert mem.get(mine).speaker == "user"
        assert mem.get(hers).speaker == "Caroline"
        assert [(h.record.id, h.explain) for h in _search(mem, "my dog")] == before

    with _memory(store) as mem:
        check(mem)
    shutil.rmtree(store / "index")
    with pytest.warns(RuntimeWarning, match="rebuilding"), _memory(store) as mem:
        check(mem)


def test_the_speaker_is_stored_on_both_backends(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    mem = make_store("spk", word_embedder, dedup_window=0)
    rec = mem.add("I love hiking", speaker="user", session_id="s")
    other = mem.add("I love the sea", session_id="s")
    mem.update(rec.id, text="I love hiking in the Alps")
    mem.close()
    mem = make_store("spk", word_embedder, dedup_window=0)
    assert mem.get(rec.id).speaker == "user"
    assert mem.get(other.id).speaker is None
    assert [v.record.speaker for v in mem.history(rec.id)] == ["user", "user"]
    hits = mem.search("what do I love", k=2, explain=True)
    assert {h.record.id: h.explain["bm25_speaker"] for h in hits} == {
        rec.id: True,
        other.id: False,
    }


def test_the_agents_messages_carry_their_role_as_speaker() -> None:
    ev = SessionScope("per-peer").resolve("telegram", 1, chat_id=100)
    with _memory() as mem:
        asked = add_message(mem, "Where did I park?", ev)
        answered = add_message(mem, "Level 2, row C.", ev, role="assistant")
        assert (asked.speaker, answered.speaker) == ("user", "assistant")
        long = " ".join(f"Sentence number {i} of a long message." for i in range(40))
        report = TurnReport()
        parts = store_message(mem, Limits(max_entry_chars=200), ev, "user", long, T0, report)
        assert len(parts) > 1
        assert {p.speaker for p in parts} == {"user"}
        assert {p.table for p in parts} == {MESSAGES}


def test_a_sqlite_store_of_schema_3_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old"
    with Memory(path, None) as mem:
        a = mem.add("an old turn")
        mem.update(a.id, text="an old turn, changed")
    db = sqlite3.connect(path / "memory.db")
    for table in ("records", "history"):
        db.execute(f"ALTER TABLE {table} DROP COLUMN speaker")
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with Memory(path, None) as mem:
        assert mem.get(a.id).speaker is None
        assert [v.record.speaker for v in mem.history(a.id)] == [None, None]
        assert mem.add("a new turn", speaker="user").speaker == "user"
    db = sqlite3.connect(path / "memory.db")
    version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    db.close()
    assert version == (str(SCHEMA_VERSION),)


def test_a_postgres_store_before_the_speaker_gains_the_column(
    pg_server: Any, tmp_path: Path
) -> None:
    url = pg_server.url(schema="nospeaker")
    schema = PostgresTarget.parse(url).schema
    with Memory(url, None, cache_dir=tmp_path / "c1") as mem:
        a = mem.add("an old turn")
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        for table in ("records", "history"):
            conn.execute(f"ALTER TABLE {schema}.{table} DROP COLUMN speaker")
        conn.execute(f"DELETE FROM {schema}.migrations WHERE version >= 6")
    with Memory(url, None, cache_dir=tmp_path / "c2") as mem:
        assert mem.get(a.id).speaker is None
        assert mem.add("a new turn", speaker="Caroline").speaker == "Caroline"
