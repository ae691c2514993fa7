"""A speaker's name in a question is left to the speaker pass, not to the vector: the
embedder sees the question without the names of the store's speakers it holds. A
message stored without a speaker, written as a transcript line ("Caroline: ..."), is
weighed as that speaker's turn."""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory

T0 = 1_700_000_000.0


class Recording(WordHashEmbedder):
    """Keeps every text it embeds one at a time: the queries of searches."""

    def __init__(self) -> None:
        super().__init__(dimension=16)
        self.seen: list[str] = []

    def embed(self, text: str) -> np.ndarray:
        self.seen.append(text)
        return super().embed(text)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed_batch(texts)


def _turns(mem: Memory, turns: list[tuple[str, str | None]], **fields: Any) -> list[str]:
    items = [
        {"text": text, "speaker": speaker, "created_at": T0 + 60 * i, **fields}
        for i, (text, speaker) in enumerate(turns)
    ]
    return [r.id for r in mem.add_many(items)]


CHAT = [
    ("I painted a sunrise over the lake last week.", "Caroline"),
    ("That sounds lovely! I went hiking with my kids.", "Melanie"),
    ("Mary Ann came along to the gallery.", "Mary Ann"),
    ("How can I help you today?", "assistant"),
    ("I brought the lemon cake.", "Will"),
]


def _embedded(mem: Memory, embedder: Recording, query: str, **kw: Any) -> str:
    embedder.seen.clear()
    mem.search(query, k=3, track_access=False, **kw)
    assert len(embedder.seen) == 1
    return embedder.seen[0]


def test_the_vector_of_a_question_leaves_out_the_speakers_it_names() -> None:
    embedder = Recording()
    with Memory(None, embedder, dedup_window=0) as mem:
        _turns(mem, CHAT, session_id="s1")
        assert _embedded(mem, embedder, "When did Caroline paint a sunrise?") == (
            "When did paint a sunrise?"
        )
        # A possessive, both speakers, and a name of two words named whole.
        assert _embedded(mem, embedder, "What is Caroline\u2019s view of Melanie's kids?") == (
            "What is view of kids?"
        )
        assert _embedded(mem, embedder, "Did Mary Ann like the gallery?") == (
            "Did like the gallery?"
        )


@pytest.mark.parametrize(
    ("query", "options"),
    [
        # the vector alone, or a fusion that does not weigh the speaker pass
        ("When did Caroline paint?", {"mode": "vector"}),
        ("When did Caroline paint?", {"speaker_weight": 0.0}),
        ("When did Caroline paint?", {"fusion": "rrf"}),
        ("When did Caroline paint?", {"alpha": 0.7}),
        # not written as a name, not a speaker, half a name, a role, nothing else left
        ("when did caroline paint?", {}),
        ("When did Rome get painted?", {}),
        ("Did Mary like the gallery?", {}),
        ("What did the Assistant say?", {}),
        ("Caroline?", {}),
        # a name the speaker pass cannot match (a stopword): it would count nowhere
        ("What cake did Will bring?", {}),
    ],
)
def test_the_question_is_embedded_whole_otherwise(query: str, options: dict[str, Any]) -> None:
    embedder = Recording()
    with Memory(None, embedder, dedup_window=0) as mem:
        _turns(mem, CHAT, session_id="s1")
        assert _embedded(mem, embedder, query, **options) == query


def test_a_speaker_whose_turns_are_gone_is_not_left_out() -> None:
    embedder = Recording()
    with Memory(None, embedder, dedup_window=0) as mem:
        ids = _turns(mem, CHAT)
        assert _embedded(mem, embedder, "What did Caroline paint?") == "What did paint?"
        mem.delete(ids[0])
        assert _embedded(mem, embedder, "What did Caroline paint?") == "What did Caroline paint?"


def test_a_speaker_whose_turns_were_superseded_is_not_left_out() -> None:
    embedder = Recording()
    with Memory(None, embedder, dedup_window=0) as mem:
        (painted,) = _turns(mem, CHAT[:1])
        mem.supersede(painted, "The sunrise painting was sold.")
        assert _embedded(mem, embedder, "What did Caroline paint?") == "What did Caroline paint?"
        assert _embedded(mem, embedder, "When did Caroline paint?", alpha=0.5) == (
            "When did Caroline paint?"
        )


def test_only_the_speakers_of_what_the_search_admits_are_left_out() -> None:
    """Another scope's speaker is a word like any other: a user's question is embedded
    the same whoever else speaks in the store (else a scoped key could tell which names
    other users' turns hold, and a user without turns lost the name's meaning)."""
    embedder = Recording()
    with Memory(None, embedder, dedup_window=0) as mem:
        _turns(mem, CHAT[:1], user_id="bob", table="messages")
        # A verb of its own each time: the embedding cache answers a text it has seen.
        assert _embedded(mem, embedder, "Did Caroline paint?", user_id="bob") == "Did paint?"
        assert _embedded(mem, embedder, "Did Caroline draw?") == "Did draw?"
        for verb, other in [
            ("sketch", {"user_id": "alice"}),
            ("sing", {"user_id": "bob", "table": "memories"}),
            ("dance", {"user_id": "bob", "end": T0}),
        ]:
            asked = f"Did Caroline {verb}?"
            assert _embedded(mem, embedder, asked, **other) == asked, other


def test_a_speaker_whose_turns_expired_is_not_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """An expired turn is in no search, swept yet or not."""
    embedder = Recording()
    real = time.time
    ahead = [0.0]
    monkeypatch.setattr(time, "time", lambda: real() + ahead[0])
    with Memory(None, embedder, dedup_window=0) as mem:
        mem.add(CHAT[0][0], speaker="Caroline", user_id="bob", ttl=60)
        assert _embedded(mem, embedder, "Did Caroline paint?", user_id="bob") == "Did paint?"
        ahead[0] = 120.0
        asked = "Did Caroline draw?"
        assert _embedded(mem, embedder, asked, user_id="bob") == asked


def test_a_given_query_vector_is_used_as_given() -> None:
    embedder = Recording()
    with Memory(None, embedder, dedup_window=0) as mem:
        ids = _turns(mem, CHAT)
        vector = embedder.embed("What did Caroline paint?")
        embedder.seen.clear()
        hits = mem.search("What did Caroline paint?", k=1, query_embedding=vector)
        assert embedder.seen == [] and hits[0].record.id == ids[0]


TRANSCRIPT = [
    ("Caroline: I painted a sunrise over the lake last week.", None),
    ("Melanie: Lovely! Caroline, you should show it at the gallery.", None),
    ("Note: the gallery opens at 10:30.", "system"),
]


def _named(mem: Memory, query: str) -> dict[str, bool | None]:
    """Per record id: whether the query names its speaker (None: the store has none)."""
    hits = mem.search(query, k=5, explain=True, track_access=False)
    return {h.record.id: h.explain["bm25_speaker"] for h in hits}


def test_a_message_written_as_a_transcript_line_is_weighed_as_its_speakers_turn(
    make_store: StoreFactory,
) -> None:
    embedder = Recording()
    mem = make_store("transcript", embedder, dedup_window=0)
    ids = _turns(mem, TRANSCRIPT, table="messages")
    # The record is kept as given: the speaker is the engine's reading, not stored.
    assert [mem.get(i).speaker for i in ids] == [None, None, "system"]
    caroline, melanie, note = ids
    assert _embedded(mem, embedder, "What did Caroline paint?") == "What did paint?"
    assert _named(mem, "What did Caroline paint?") == {caroline: True, melanie: False, note: False}
    # An update that keeps the text keeps the reading; one that changes it reads again.
    mem.update(caroline, importance=0.9)
    assert _named(mem, "What did Caroline paint?")[caroline] is True
    mem.update(caroline, text="Caroline painted a sunrise over the lake last week.")
    assert _named(mem, "What did Caroline paint?")[caroline] is False
    mem.close()
    # The reading comes back with the store, from its snapshot or its database.
    mem = make_store("transcript", embedder, dedup_window=0)
    assert _named(mem, "What did Melanie say?")[melanie] is True
    mem.close()


@pytest.mark.parametrize(
    "text",
    [
        "Caroline:I painted",  # no space after the colon
        "Caroline:   ",  # nothing said
        "caroline: I painted",  # not written as a name
        "Note that: the gallery opens",  # a word without a capital
        "The Lake Gallery Cafe: opens at ten",  # four words
        "12:30 works for me",
        "Caroline said: I painted",
    ],
)
def test_other_messages_have_no_speaker_read_from_them(text: str) -> None:
    with Memory(None, WordHashEmbedder(dimension=16), dedup_window=0) as mem:
        mem.add(text, table="messages")
        hits = mem.search("What did Caroline say?", k=1, explain=True, track_access=False)
        assert hits and hits[0].explain["bm25_speaker"] is None


def test_only_messages_have_their_speaker_read_from_the_text() -> None:
    with Memory(None, WordHashEmbedder(dimension=16), dedup_window=0) as mem:
        mem.add("Caroline: I painted a sunrise.")
        hits = mem.search("What did Caroline paint?", k=1, explain=True, track_access=False)
        assert hits[0].explain["bm25_speaker"] is None


def test_the_reading_survives_a_snapshot_and_a_rebuild(tmp_path: Path) -> None:
    store = tmp_path / "store"

    def named(mem: Memory) -> dict[str, bool | None]:
        return _named(mem, "What did Caroline paint?")

    with Memory(store, WordHashEmbedder(dimension=16), dedup_window=0) as mem:
        _turns(mem, TRANSCRIPT, table="messages")
        before = named(mem)
        mem.snapshot()
    with Memory(store, WordHashEmbedder(dimension=16), dedup_window=0) as mem:
        assert named(mem) == before
    shutil.rmtree(store / "index")
    with (
        pytest.warns(RuntimeWarning, match="rebuilding"),
        Memory(store, WordHashEmbedder(dimension=16), dedup_window=0) as mem,
    ):
        assert named(mem) == before
