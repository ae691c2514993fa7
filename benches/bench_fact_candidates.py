"""Does the model that checks a changed fact see the older version of it? (issue 48)

For every changed fact of two sets, a store holds what the person said so far, each of
their turns one memory of their scope (``table="memories"``, ``user_id`` the person,
``created_at`` the turn's time), and the turn that states the new version arrives:

- **fact check**: the new turn is stored as a pending fact and
  ``memlane.agent.facts.candidates`` lists what the upkeep model compares it with; the
  figure is the share of changed facts whose old turn is among them.
- **reflection**: before the new turn is stored, reflection's ``_prepare`` is given the
  window of the 20 messages ending at the new turn (both sides, as ``Reflection.window``)
  with ``k=50`` (``Reflection.shown``). Shown twice: the search by the conversation alone
  (what reflection showed before the scope's newest memories were added to it) and
  ``_prepare`` as it is now.

Each is measured in a store with the default embedder (``memlane.Memory(path)``: the ONNX
MiniLM, offline) and in one without an embedder (``Memory(path, embedder=None)``: BM25
alone). The goal: the old version among the fact check's candidates for at least 95 % of
changed facts, in both stores, on both sets.

The sets:

- **LoCoMo**: ``benches/data/locomo_changes.json``, 31 pairs (old turn, new turn) of one
  speaker of LoCoMo's train half (``../shared/data/locomo/``; skipped when missing) where a
  fact about the speaker changes across sessions (a job, pets, a screenplay's fate, an
  instrument...). They were found by reading the data set's per-session event summaries
  and searching the turns for the events' words (job, adopt, screenplay, turtle,
  tournament, injury...), then reading each old and new turn and keeping only real
  changes of one attribute. The file holds dia_ids and a note, never the text (CC BY-NC:
  read at run time). The speaker's turns are the memories; a turn is dated by its
  session's date plus its position in the session, in seconds.
- **dated**: ``_conversations.generate(seed=0)``, every question about a changed fact:
  its ``superseded`` turn is the old version, its evidence turn the new one. The user's
  turns are the memories; the assistant's are in the reflection window only.

Why a change is missed: ``--misses`` prints each missed change's two texts, the terms they
share and what the fact check showed instead; the table's last row is the share of
changes whose two versions share a content word (a term in under 10 % of the speaker's
memories so far). A change without one is found by meaning or by recency, never by
words: in a store without an embedder, only by being among the newest.

    python benches/bench_fact_candidates.py [--sets locomo,dated] [--users 20]
        [--stores default,text] [--k 25] [--recent 5] [--per-sentence 5]
        [--by-meaning 20] [--misses] [--json]

About 3 minutes on 2 busy cores (most of it embedding the dated set's 20 users).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _locomo
import memlane
from _conversations import generate
from memlane.agent.facts import CHECK, candidates, pending
from memlane.agent.reflection import _conversation, _prepare
from memlane.embeddings import CachedEmbedder, OnnxEmbedder, TextTruncatedWarning

TABLE = "memories"
#: Reflection's defaults: the memories shown and the messages of the window.
SHOWN = 50
WINDOW = 20
#: The query reflection's search takes from the end of the window.
QUERY_CHARS = 2000
CHANGES = Path(__file__).resolve().parent / "data" / "locomo_changes.json"
FACT_CHANGES = Path(__file__).resolve().parent / "data" / "locomo_fact_changes.json"
SETS = ("locomo-facts", "locomo", "dated")
STORES = ("default", "text")
MEASURES = ("candidates", "reflection_search", "reflection")
LABELS = {
    "candidates": "fact check: candidates()",
    "reflection_search": f"reflection: search alone (k={SHOWN})",
    "reflection": "reflection: _prepare now",
}
GOAL = 0.95
#: The knobs of ``candidates()`` the command line can set.
OPTIONS = ("k", "recent", "per_sentence", "by_meaning", "window")
#: A term in this share of a speaker's memories or more is no content word ("I", "hey",
#: the name they greet): a change whose two versions share no other term cannot be found
#: by words, only by meaning or by being among the newest.
COMMON = 0.1


@dataclass(frozen=True)
class Message:
    id: str
    mine: bool  # said by the scope's person: stored as a memory
    text: str
    at: float


@dataclass(frozen=True)
class Change:
    set: str
    scope: str
    old: str
    new: str
    note: str


@dataclass
class Stream:
    """One person's conversation in order, and the changes of their facts in it."""

    scope: str
    messages: list[Message]
    changes: list[Change] = field(default_factory=list)


def locomo_streams(pairs: int | None = None) -> list[Stream]:
    """A stream per LoCoMo speaker with a pair of ``locomo_changes.json`` (the first
    ``pairs`` pairs, all by default)."""
    listed = json.loads(CHANGES.read_text(encoding="utf-8"))["pairs"][:pairs]
    turns, _ = _locomo.load()
    by_conversation: dict[str, list[_locomo.Turn]] = defaultdict(list)
    for t in turns:
        by_conversation[t.conversation].append(t)
    streams: dict[tuple[str, str], Stream] = {}
    for p in listed:
        key = (p["conversation"], p["speaker"])
        if key not in streams:
            messages, position, session = [], 0, ""
            for t in by_conversation[p["conversation"]]:
                position = position + 1 if t.session == session else 0
                session = t.session
                messages.append(Message(t.id, t.speaker == p["speaker"], t.text, t.at + position))
            streams[key] = Stream("/".join(key), messages)
        cid = p["conversation"]
        change = Change(
            "locomo", "/".join(key), f"{cid}/{p['old']}", f"{cid}/{p['new']}", p["attribute"]
        )
        streams[key].changes.append(change)
    return list(streams.values())


def observations(conversation: dict[str, Any], speaker: str) -> list[Message]:
    """The speaker's LoCoMo observations in the order they were learnt, each dated by its
    session plus the position of the first turn it cites, in seconds; ids ``S13#0``
    (session 13's first observation of the speaker)."""
    c = conversation["conversation"]
    out: list[tuple[float, int, Message]] = []
    for key, by_speaker in conversation["observation"].items():
        n = int(key.split("_")[1])
        at = _locomo.parse_date(c[f"session_{n}_date_time"])
        for i, (text, cited) in enumerate(by_speaker.get(speaker, [])):
            first = cited[0] if isinstance(cited, list) else cited
            position = int(str(first).rsplit(":", 1)[-1]) if ":" in str(first) else 0
            ref = f"{conversation['sample_id']}/S{n}#{i}"
            out.append((at + position, i, Message(ref, True, text, at + position)))
    return [m for _, _, m in sorted(out, key=lambda o: (o[0], o[1]))]


def locomo_fact_streams(pairs: int | None = None) -> list[Stream]:
    """A stream per LoCoMo speaker of ``locomo_fact_changes.json``: the facts the
    conversation taught about them (LoCoMo's observations), with the changes among them."""
    listed = json.loads(FACT_CHANGES.read_text(encoding="utf-8"))["pairs"][:pairs]
    data = {c["sample_id"]: c for c in json.loads(_locomo.FILE.read_text(encoding="utf-8"))}
    streams: dict[tuple[str, str], Stream] = {}
    for p in listed:
        key = (p["conversation"], p["speaker"])
        # A scope of its own: the turns of the same speaker (set "locomo") share the store.
        scope = "/".join(key) + "/facts"
        if key not in streams:
            streams[key] = Stream(scope, observations(data[key[0]], key[1]))
        cid = p["conversation"]
        change = Change(
            "locomo-facts", scope, f"{cid}/{p['old']}", f"{cid}/{p['new']}", p["attribute"]
        )
        streams[key].changes.append(change)
    return list(streams.values())


def dated_streams(users: int = 20) -> list[Stream]:
    """A stream per user of the seeded dated conversations, with its changed facts."""
    data = generate(seed=0, users=users)
    streams = {
        u: Stream(u, [])
        for u in dict.fromkeys(t.user for t in data.turns)  # in order of appearance
    }
    for t in data.turns:
        streams[t.user].messages.append(Message(t.id, t.role == "user", t.text, t.at.timestamp()))
    for q in data.questions:
        if q.changed:
            streams[q.user].changes.append(
                Change("dated", q.user, q.superseded[0], q.evidence[0], q.category)
            )
    return [s for s in streams.values() if s.changes]


def _turns(records: Sequence[memlane.MemoryRecord]) -> set[str]:
    return {str(r.metadata.get("turn")) for r in records}


def measure(
    mem: memlane.Memory,
    stream: Stream,
    find: Callable[[memlane.Memory, memlane.MemoryRecord, dict[str, str]], list[Any]],
) -> list[dict[str, Any]]:
    """Plays ``stream`` into ``mem`` and, at each new version of a fact, whether its old
    version is among what each measure shows; with the two texts, the terms they share
    (``shared``: BM25's terms; ``content``: those in under ``COMMON`` of the memories
    stored so far, so not "I" or the name the speaker greets) and, when the fact check
    missed it, the texts it showed."""
    scope = {"user_id": stream.scope}
    changes: dict[str, list[Change]] = defaultdict(list)
    for c in stream.changes:
        changes[c.new].append(c)
    texts = {m.id: m.text for m in stream.messages}
    waiting: list[dict[str, Any]] = []
    window: list[Message] = []
    out: list[dict[str, Any]] = []
    seen: Counter[str] = Counter()  # in how many of the speaker's memories each term is
    stored = 0
    for m in stream.messages:
        window = [*window[-(WINDOW - 1) :], m]
        meta = {"turn": m.id}
        if not m.mine:
            continue
        if m.id not in changes:
            waiting.append({"text": m.text, "table": TABLE, "created_at": m.at, "metadata": meta})
            seen.update(set(memlane.analyze(m.text)))
            stored += 1
            continue
        if waiting:
            mem.add_many([{**w, **scope} for w in waiting])
            waiting = []
        text = _conversation(
            [{"role": "user" if w.mine else "assistant", "content": w.text} for w in window]
        )
        hits = mem.search(text[-QUERY_CHARS:], SHOWN, table=TABLE, track_access=False, **scope)
        searched = _turns([h.record for h in hits])
        shown = _turns(_prepare(mem, text, dict(scope), TABLE, SHOWN)[0])
        fact = mem.add(m.text, table=TABLE, created_at=m.at, metadata=pending(meta), **scope)
        listed = find(mem, fact, scope)
        found = _turns(listed)
        mem.update(fact.id, metadata={**meta, CHECK: "kept"})
        for c in changes[m.id]:
            shared = sorted(set(memlane.analyze(m.text)) & set(memlane.analyze(texts[c.old])))
            out.append(
                {
                    "set": c.set,
                    "scope": c.scope,
                    "old": c.old,
                    "new": c.new,
                    "note": c.note,
                    "candidates": c.old in found,
                    "reflection_search": c.old in searched,
                    "reflection": c.old in shown,
                    "shown": len(found),
                    "new_text": m.text,
                    "old_text": texts[c.old],
                    "shared": shared,
                    "content": [t for t in shared if seen[t] < COMMON * max(stored, 1)],
                    "listed": [] if c.old in found else [r.text for r in listed],
                }
            )
        seen.update(set(memlane.analyze(m.text)))
        stored += 1
    return out


def open_store(path: Path, store: str) -> memlane.Memory:
    if store == "text":
        return memlane.Memory(path, embedder=None)
    return memlane.Memory(path)


def run(
    sets: Sequence[str] = SETS,
    stores: Sequence[str] = STORES,
    users: int = 20,
    pairs: int | None = None,
    options: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Every measure for every changed fact of ``sets``, in each kind of store;
    ``options``: ``candidates()``'s keyword arguments (its defaults otherwise)."""
    options = dict(options or {})

    meaning = CachedEmbedder(OnnxEmbedder())

    def find(mem: memlane.Memory, fact: memlane.MemoryRecord, scope: dict[str, str]) -> list[Any]:
        return candidates(mem, fact, TABLE, scope, meaning=meaning, **options)

    streams: dict[str, list[Stream]] = {}
    skipped: dict[str, str] = {}
    for name in sets:
        if name.startswith("locomo") and not _locomo.available():
            skipped[name] = f"{_locomo.FILE} is missing"
        elif name == "locomo":
            streams[name] = locomo_streams(pairs)
        elif name == "locomo-facts":
            streams[name] = locomo_fact_streams(pairs)
        else:
            streams[name] = dated_streams(users)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", TextTruncatedWarning)
        for store in stores:
            with open_store(Path(tmp) / store, store) as mem:
                for listed in streams.values():
                    for stream in listed:
                        rows.extend({**r, "store": store} for r in measure(mem, stream, find))
    return {"rows": rows, "skipped": skipped, "options": options}


def summary(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (set, store): the number of changed facts and each measure's share found."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["set"], r["store"])].append(r)
    return {
        key: {
            "changes": len(g),
            **{m: sum(r[m] for r in g) / len(g) for m in MEASURES},
            "mean_candidates": sum(r["shown"] for r in g) / len(g),
            "content": sum(bool(r["content"]) for r in g) / len(g),
        }
        for key, g in groups.items()
    }


def report(result: dict[str, Any], misses: bool = False) -> list[str]:
    """Prints the table; returns the problems (a fact-check figure under the goal)."""
    table = summary(result["rows"])
    keys = sorted(table)
    print(f"candidates() options: {result['options'] or 'defaults'}")
    for name, why in result["skipped"].items():
        print(f"set {name} skipped: {why}")
    head = f"{'old version shown':42}" + "".join(f"{s + '/' + st:>16}" for s, st in keys)
    print(head)
    print(f"{'changed facts':42}" + "".join(f"{table[key]['changes']:>16}" for key in keys))
    for m in MEASURES:
        print(f"{LABELS[m]:42}" + "".join(f"{table[key][m]:>16.1%}" for key in keys))
    print(
        f"{'fact check: memories shown (mean)':42}"
        + "".join(f"{table[key]['mean_candidates']:>16.1f}" for key in keys)
    )
    print(
        f"{'the two versions share a content word':42}"
        + "".join(f"{table[key]['content']:>16.1%}" for key in keys)
    )
    if misses:
        for r in result["rows"]:
            if not r["candidates"]:
                print(f"missed ({r['set']}/{r['store']}): {r['old']} -> {r['new']} {r['note']}")
                print(f"  new: {r['new_text']}")
                print(f"  old: {r['old_text']}")
                print(f"  terms shared: {r['shared']}, content words: {r['content']}")
                for text in r["listed"]:
                    print(f"  shown: {' '.join(text.split())[:100]}")
    return [
        f"{s}/{st}: candidates() shows the old version for {table[(s, st)]['candidates']:.1%}"
        for s, st in keys
        if table[(s, st)]["candidates"] < GOAL
    ]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--users", type=int, default=20, help="users of the dated set")
    ap.add_argument("--pairs", type=int, default=None, help="LoCoMo pairs (all by default)")
    for option in OPTIONS:
        flag = "--" + option.replace("_", "-")
        ap.add_argument(flag, type=int, default=None, help=f"candidates({option}=)")
    ap.add_argument("--misses", action="store_true", help="list the changes not found")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    for name in args.sets.split(","):
        if name not in SETS:
            ap.error(f"unknown set {name!r}")
    for store in args.stores.split(","):
        if store not in STORES:
            ap.error(f"unknown store {store!r}")
    result = run(
        args.sets.split(","),
        args.stores.split(","),
        args.users,
        args.pairs,
        {o: v for o in OPTIONS if (v := getattr(args, o)) is not None},
    )
    problems = report(result, args.misses)
    for p in problems:
        print(f"UNDER THE GOAL: {p}")
    if args.json:
        json.dump(result["rows"], sys.stdout, indent=1)
        print()
    return result


if __name__ == "__main__":
    main()
