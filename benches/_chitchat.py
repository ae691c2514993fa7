"""A conversation-memory retrieval set made from the Chit-Chat Challenge dataset.

The data: BYU PCC lab's Chit-Chat Challenge (7,168 real open-domain chats between
people, 2018, each message timed and signed by its sender), shipped inside the PyPI
package ``chitchat-dataset`` (MIT licence; ``pip install chitchat-dataset``). Nothing
is fetched at run time: the package holds the JSON.

The task, one memory store per person as an agent would keep it: every turn (one
sender's run of messages) of every chat the person took part in is a memory, dated
when it was said, scoped to the person (``room_id``). A question the *partner* asked
("what do you do for fun on weekends?") followed at once by the person's answer
becomes a query, its evidence the answer turn: "what did I say when asked this?",
asked later of the whole history. The question turn itself is left out of the store
(it is the query), so the answer must be found by what it says, which rarely repeats
the question's words: the dense leg's ground, where BM25 alone is weak.

Selection (a function of the data alone, no seed): people with 25 to 60 chats; a
question is a partner turn whose messages hold a "?" with at least three content words
in the question, answered by a turn of at least eight words. People are split into
train and test halves by a hash of their id, and at most ``per_user`` questions are
kept per person (the first ones, in time order), so no person's questions are in both.

``load_keyword`` (the set ``chitchat-keyword``): the same stores, asked the other way
round, as LoCoMo's annotators asked theirs: a question written from the evidence turn's
own words, "What did I say about {rare} and {topic}?", ``rare`` being the turn's rarest
word in the person's history (in at most three of their turns) and ``topic`` its most
common word that is not a stop word (in 5 to 60 turns). The evidence is that turn, one
in eight of the person's own turns of at least twelve words (by a hash of its id). The
questions are made, the turns real: the shape where BM25 is the stronger retriever
(the real partner questions whose answer repeats a rare word of theirs are not: there
the vectors still win, recall@10 0.93 against 0.73 on train, by bm25s and exact cosine).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

__all__ = ["ChitChat", "Query", "Turn", "load", "load_keyword"]

_WORD = re.compile(r"[a-z']+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "is",
        "it",
        "its",
        "just",
        "like",
        "me",
        "my",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "they",
        "this",
        "to",
        "too",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "you're",
        "i'm",
        "it's",
        "that's",
        "what's",
        "don't",
        "really",
        "any",
        "anything",
        "some",
        "something",
        "yeah",
    ]
)


@dataclass(frozen=True)
class Turn:
    id: str
    user: str  # whose store holds it
    role: str  # "user" (the store's person) or "partner"
    text: str
    at: float  # unix seconds
    chat: str
    index: int  # position in its chat


@dataclass(frozen=True)
class Query:
    id: str
    user: str
    text: str
    evidence: str  # the answer turn's id


@dataclass(frozen=True)
class ChitChat:
    turns: list[Turn]
    queries: list[Query]


def _content_words(text: str) -> int:
    return sum(1 for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2)


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _half(sender: str) -> str:
    return "train" if hashlib.sha256(sender.encode()).digest()[0] % 2 == 0 else "test"


def _raw() -> dict[str, Any]:
    try:
        path = resources.files("chitchat_dataset") / "dataset.json"
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("pip install chitchat-dataset (MIT) for this set") from e
    with path.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def load(
    split: str, users: int = 12, per_user: int = 20, min_chats: int = 25, max_chats: int = 60
) -> ChitChat:
    """The turns and questions of ``users`` people of the ``split`` half ("train" or "test")."""
    data = _raw()
    chats_of: dict[str, list[str]] = {}
    for cid, chat in data.items():
        for sender in {m[0]["sender"] for m in chat["messages"] if m}:
            chats_of.setdefault(sender, []).append(cid)
    people = sorted(
        (
            s
            for s, cs in chats_of.items()
            if min_chats <= len(cs) <= max_chats and _half(s) == split
        ),
        key=lambda s: hashlib.sha256(s.encode()).hexdigest(),
    )[:users]
    turns: list[Turn] = []
    queries: list[Query] = []
    for person in people:
        tag = hashlib.sha256(person.encode()).hexdigest()[:8]
        mine: list[Query] = []
        held: list[Turn] = []
        for cid in sorted(chats_of[person], key=lambda c: data[c]["start"]):
            messages = [m for m in data[cid]["messages"] if m]
            texts = [" ".join(u["text"].strip() for u in m).strip() for m in messages]
            skip: set[int] = set()
            for i in range(len(messages) - 1):
                if messages[i][0]["sender"] == person or messages[i + 1][0]["sender"] != person:
                    continue
                question = " ".join(u["text"].strip() for u in messages[i] if "?" in u["text"])
                answer = texts[i + 1]
                if (
                    question
                    and _content_words(question) >= 3
                    and len(answer.split()) >= 8
                    and len(mine) < per_user
                ):
                    skip.add(i)
                    mine.append(Query(f"{tag}:{cid}:{i}", person, question, f"{tag}:{cid}:{i + 1}"))
            for i, m in enumerate(messages):
                if i in skip or not texts[i]:
                    continue
                held.append(
                    Turn(
                        f"{tag}:{cid}:{i}",
                        person,
                        "user" if m[0]["sender"] == person else "partner",
                        texts[i],
                        _stamp(m[0]["timestamp"]),
                        cid,
                        i,
                    )
                )
        turns.extend(held)
        queries.extend(mine)
    return ChitChat(turns, queries)


_ELONGATED = re.compile(r"(.)\1\1")
# Words too vague to be what a question is about (beyond _STOP).
_VAGUE = frozenset(
    [
        "about",
        "actually",
        "also",
        "always",
        "back",
        "been",
        "being",
        "because",
        "better",
        "even",
        "ever",
        "every",
        "going",
        "good",
        "great",
        "haha",
        "into",
        "know",
        "kind",
        "lol",
        "lots",
        "make",
        "maybe",
        "more",
        "most",
        "much",
        "never",
        "only",
        "over",
        "people",
        "pretty",
        "probably",
        "right",
        "said",
        "same",
        "seen",
        "sure",
        "than",
        "thing",
        "things",
        "think",
        "though",
        "time",
        "very",
        "want",
        "well",
        "were",
        "what",
        "yeah",
        "cool",
        "okay",
        "totally",
        "still",
        "those",
        "these",
        "here",
    ]
)


def load_keyword(split: str, users: int = 12, every: int = 8) -> ChitChat:
    """``load(split)``'s stores, with questions written from their turns' words."""
    data = load(split, users=users)
    by_user: dict[str, list[Turn]] = {}
    for t in data.turns:
        by_user.setdefault(t.user, []).append(t)
    queries: list[Query] = []
    for user, turns in by_user.items():
        df = Counter(w for t in turns for w in _topic_words(t.text))
        for t in turns:
            if t.role != "user" or len(t.text.split()) < 12:
                continue
            if hashlib.sha256(t.id.encode()).digest()[0] % every:
                continue
            words = _topic_words(t.text)
            rare_words = sorted((w for w in words if df[w] <= 3), key=lambda w: (df[w], w))
            topic = sorted((w for w in words if 5 <= df[w] <= 60), key=lambda w: (-df[w], w))
            if rare_words and topic:
                text = f"What did I say about {rare_words[0]} and {topic[0]}?"
                queries.append(Query(f"kw:{t.id}", user, text, t.id))
    return ChitChat(data.turns, queries)


def _topic_words(text: str) -> set[str]:
    """Words a question could be about: alphabetic, four letters or more, no stop word,
    no "sooooo"."""
    return {
        w
        for w in _WORD.findall(text.lower())
        if w.isalpha()
        and len(w) >= 4
        and w not in _STOP
        and w not in _VAGUE
        and not _ELONGATED.search(w)
    }


if __name__ == "__main__":
    for half in ("train", "test"):
        s = load(half)
        print(half, len({t.user for t in s.turns}), "people", len(s.turns), "turns")
        print(" ", len(s.queries), "questions; e.g.", [q.text for q in s.queries[:3]])
        k = load_keyword(half)
        print(" ", len(k.queries), "keyword questions; e.g.", [q.text for q in k.queries[:5]])
