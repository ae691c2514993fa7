"""What the fact check shows the model (``memlane.agent.facts.candidates``): the older
version of a changed fact must be among it, also when the two share no word and many
memories share the new one's words. Both backends."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pytest

from conftest import StoreFactory
from memlane import Memory, MemoryRecord
from memlane.agent import facts
from memlane.agent.facts import candidates, check_facts, pending
from memlane.agent.llm import ChatMessage
from memlane.embeddings import CachedEmbedder
from memlane.embeddings.lazy import default_embedder

#: Words the embedder below reads as one meaning: where one lives.
HOME = {"moving", "moved", "live", "flat", "apartment"}
NOUNS = [
    "bakery",
    "flower",
    "cheese",
    "bike",
    "record",
    "fish",
    "book",
    "toy",
    "fruit",
    "candle",
    "hat",
    "lamp",
    "coffee",
    "shoe",
    "rug",
    "clock",
    "honey",
    "soap",
    "kite",
    "map",
    "tea",
    "bread",
    "plant",
    "glass",
    "pottery",
    "spice",
    "wool",
    "jam",
    "card",
    "olive",
]


class MeaningEmbedder:
    """A model that knows that moving, living and a flat are about one's home: those
    words share a direction; every other word adds a fainter one of its own, so texts
    that share words are somewhat alike too, as with a real model."""

    name = "test:meaning"
    dimension = 256  # random directions all but orthogonal: cosines as designed

    def _word(self, word: str) -> np.ndarray:
        key = "home" if word in HOME else word
        seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(self.dimension)
        return v / np.linalg.norm(v) * (1.0 if word in HOME else 0.3)

    def embed(self, text: str) -> np.ndarray:
        v = np.zeros(self.dimension)
        for word in re.findall(r"\w+", text.lower()):
            v += self._word(word)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.embed(t) for t in texts]) if texts else np.zeros((0, self.dimension))


def test_a_change_in_other_words_is_shown_among_memories_that_share_its_words(
    make_store: StoreFactory,
) -> None:
    """The new address shares no word with the old one, and 30 newer memories share most
    of its words: the hybrid search ranks all of them first (its score halves a memory
    that matches by meaning alone), the search by meaning ranks the old address first."""
    scope = {"user_id": "ana"}
    mem = make_store("meaning", MeaningEmbedder())
    old = mem.add(
        "We live on Park Terrace, in a small house with a garden.", created_at=1000.0, **scope
    )
    market = [f"Bought some {a} and {b} at the market." for a, b in combinations(NOUNS, 2)]
    mem.add_many(
        [{"text": t, "created_at": 1500.0 + i} | scope for i, t in enumerate(market[:100])]
    )
    stalls = [
        f"We're finally at the {n} stall on Mill Lane now: Mill Lane, finally, now." for n in NOUNS
    ]
    mem.add_many([{"text": t, "created_at": 2000.0 + i} | scope for i, t in enumerate(stalls)])
    text = "Finally moved: we're on Mill Lane now."
    fact = mem.add(text, created_at=5000.0, metadata=pending(None), **scope)
    hybrid = [h.record.id for h in mem.search(text, 31, track_access=False, **scope)]
    assert old.id not in hybrid
    found = [r.id for r in candidates(mem, fact, "memories", scope)]
    assert old.id in found and fact.id not in found
    # Without the search by meaning, the old address is not shown.
    assert old.id not in [r.id for r in candidates(mem, fact, "memories", scope, by_meaning=0)]


def test_without_vectors_each_part_shows_what_it_is_asked_for(make_store: StoreFactory) -> None:
    """In a store without an embedder there is no search by meaning; the newest are as
    many as asked, none when asked for none."""
    scope = {"user_id": "ana"}
    mem = make_store("novec")
    mem.add_many(
        [{"text": f"Bought a {n} today.", "created_at": t} | scope for t, n in enumerate(NOUNS)]
    )
    fact = mem.add("Moving day is done.", created_at=5000.0, metadata=pending(None), **scope)
    newest = [f"Bought a {n} today." for n in reversed(NOUNS)]
    assert [r.text for r in candidates(mem, fact, "memories", scope)] == newest[:5]
    assert [r.text for r in candidates(mem, fact, "memories", scope, recent=2)] == newest[:2]
    assert candidates(mem, fact, "memories", scope, recent=0) == []


OLD_HOME = "We live in a small flat on Bridge Street."
NEW_HOME = "Moving day is done, we're on Elm Avenue now."


def _home_changed(make_store: StoreFactory) -> tuple[Memory, MemoryRecord, MemoryRecord]:
    """A store without vectors where the old address is 41 memories back and shares no
    word with the new one."""
    scope = {"user_id": "ana"}
    mem = make_store("novec-home")
    old = mem.add(OLD_HOME, created_at=1000.0, **scope)
    market = [f"Bought some {a} and {b} at the market." for a, b in combinations(NOUNS, 2)]
    mem.add_many([{"text": t, "created_at": 1500.0 + i} | scope for i, t in enumerate(market[:40])])
    new = mem.add(NEW_HOME, created_at=5000.0, metadata=pending(None), **scope)
    return mem, old, new


def test_without_vectors_the_default_model_ranks_the_newest_by_meaning(
    make_store: StoreFactory,
) -> None:
    """Words and recency cannot find the old address; the default model's meaning over
    the scope's newest memories does, and only within its window."""
    mem, old, new = _home_changed(make_store)
    scope = {"user_id": "ana"}
    meaning = CachedEmbedder(default_embedder())
    assert old.id not in [r.id for r in candidates(mem, new, "memories", scope)]
    found = candidates(mem, new, "memories", scope, meaning=meaning)
    assert old.id in [r.id for r in found] and new.id not in [r.id for r in found]
    narrow = candidates(mem, new, "memories", scope, meaning=meaning, window=20)
    assert old.id not in [r.id for r in narrow]


class Broken:
    """An embedder whose model cannot load."""

    name = "test:broken"
    dimension = 384

    def embed(self, text: str) -> np.ndarray:
        raise RuntimeError("the model file is damaged")

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("the model file is damaged")


class CarefulModel:
    """Answers as a careful model would: the new address updates the listed old one."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        listed = re.findall(r"^(\d+)\. \[[^\]]*\] (.*)$", prompt, re.MULTILINE)
        number = next((int(n) for n, text in listed if "Bridge Street" in text), None)
        if number is None:
            return '{"decisions": [{"fact": "F1", "decision": "add", "reason": "new"}]}'
        return json.dumps(
            {
                "decisions": [
                    {"fact": "F1", "decision": "update", "memory": number, "reason": "moved"}
                ]
            }
        )


def test_the_check_of_a_store_without_vectors_supersedes_the_old_address(
    make_store: StoreFactory,
) -> None:
    mem, old, _ = _home_changed(make_store)
    model = CarefulModel()
    report = check_facts(mem, model, "memories", {"user_id": "ana"})
    assert report.error is None and [d.decision for d in report.decisions] == ["update"]
    assert OLD_HOME in model.prompts[0]
    assert mem.get(old.id).valid_to is not None  # superseded: as_of still answers it
    current = [r.text for r in mem.list("memories", user_id="ana") if r.valid_to is None]
    assert NEW_HOME in current and OLD_HOME not in current


def test_a_model_that_cannot_load_leaves_the_check_to_words_and_recency(
    make_store: StoreFactory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facts, "_WARNED", set())  # warned once per process
    mem, old, new = _home_changed(make_store)
    found = candidates(mem, new, "memories", {"user_id": "ana"}, meaning=Broken())
    assert len(found) == 5 and old.id not in [r.id for r in found]  # the newest five
    report = check_facts(mem, CarefulModel(), "memories", {"user_id": "ana"}, meaning=Broken())
    assert report.error is None and [d.decision for d in report.decisions] == ["add"]
    assert "words and recency" in caplog.text
