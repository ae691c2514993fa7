"""Precision of the memories ``build_context`` injects: what reaches the model, and
whether it answers.

The sets, each a store opened as a user opens one (``Memory(None, embedder)``, the
default model through the vector cache of ``benches/.cache/``), every turn one memory
of its conversation's room (``room_id``) in the ``memories`` table, as a conversation
store keeps it (the text, ``speaker``, ``session_id``, ``created_at``):

- **conversations** (``_conversations.py``): the dated conversation set, train seed 1
  (10 users, 100 questions) and test seed 0 (20 users, 200 questions); a question's
  evidence is the turn that states its fact (for a changed fact, the change);
- **locomo** (``_locomo.py``): LoCoMo's train half (5 conversations, 2,760 turns, 760
  questions of categories 1-4 with their evidence turns); the held-out half is
  measured outside the repository.

On-topic questions are the sets' own, with their evidence. Off-topic questions are
made per conversation from ``benches/data/offtopic_questions.json``: templates of
general-knowledge questions ("What is the capital of {}?") and their subjects; a
conversation is asked only those whose subject's words never occur in any of its
turns (so it never mentions what is asked), ``--per-room`` of them (20) drawn with a
seed made of the set's and the conversation's names. Some families are on topics the
conversations touch (travel, cooking, books, sport), where a same-topic turn ("Ana
lives in Porto" for "What is the capital of Peru?") is the miss a floor must stop.

Each question is searched as ``build_context`` searches (``Memory.search(message, k,
min_similarity=floor)`` in its room) once per floor, with ``k`` the largest count: the
floor cuts the scored pool before the cut to ``k``, and the pool is the same for every
``k`` up to 25 (``max(100, 4k)`` candidates in a store of turns), so the first ``c``
hits are what a search with ``k=c`` gives. A check compares the default floor and
count with ``build_context`` itself (``max_tokens=20000``, so the budget cuts nothing)
on the first 30 questions of each kind.

Reported per floor and count: the share of off-topic questions left with no memory
(higher is better), the memories an off-topic question gets on average, the share of
on-topic questions' injected memories that are evidence (precision), the share of an
on-topic question's evidence the context holds (recall, averaged over questions) and
the memories an on-topic question gets. Then the default floor and count with a second
floor, on the cosine of the question's nearest memory in its room, below which nothing
is injected (not an option of ``build_context``: what one would do), with that cosine's
10th, 50th and 90th percentiles for each kind of question. Then
``build_context`` itself at its defaults with ``diversity`` 0, 0.1, 0.3 and 0.5:
recall, nDCG over the injected list, precision.

    python benches/bench_context_precision.py [--sets conversations,locomo] [--per-room 20]
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import random
import re
import statistics
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_ingest import CachedModel, DataUnavailableError, VectorCache
from memlane import Memory, OnnxEmbedder
from memlane.agent.context import MIN_SCORE, build_context
from memlane.embeddings import TextTruncatedWarning

OFFTOPIC = Path(__file__).resolve().parent / "data" / "offtopic_questions.json"
#: The count build_context injects by default.
COUNT = inspect.signature(build_context).parameters["inject_limit"].default
FLOORS: tuple[float | None, ...] = (None, 0.10, 0.14, 0.16, 0.18, 0.20, 0.25, 0.30, 0.35, 0.40)
COUNTS = (3, 5, 10, COUNT)
DIVERSITY = (0.0, 0.1, 0.3, 0.5)
#: Floors on the cosine of a question's nearest memory, below which nothing is injected.
GATES = (0.0, 0.20, 0.25, 0.30, 0.35)
#: Candidates each retriever brings for any k up to 25 in a store of turns.
POOL = 100
#: Questions of each set build_context answers to check the replay.
CHECKED = 30

_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Turn:
    id: str
    room: str
    text: str
    at: float
    session: str
    speaker: str


@dataclass(frozen=True)
class Asked:
    text: str
    room: str
    evidence: frozenset[str]  # empty: off-topic


@dataclass
class Corpus:
    name: str
    turns: list[Turn]
    questions: list[Asked]
    offtopic: list[Asked]


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def offtopic(name: str, turns: Sequence[Turn], per_room: int) -> list[Asked]:
    """``per_room`` questions of the template file per room, about subjects whose words
    none of the room's turns holds, drawn with a seed of ``name`` and the room."""
    data = json.loads(OFFTOPIC.read_text(encoding="utf-8"))
    ignore = set(data["ignore"])
    said: dict[str, set[str]] = {}
    for t in turns:
        said.setdefault(t.room, set()).update(words(t.text))
    out: list[Asked] = []
    for room in sorted(said):
        fit = [
            family["template"].format(subject)
            for family in data["families"]
            for subject in family["subjects"]
            if not (words(subject) - ignore) & said[room]
        ]
        drawn = random.Random(f"{name}/{room}").sample(fit, min(per_room, len(fit)))
        out += [Asked(text, room, frozenset()) for text in drawn]
    return out


def conversations(seed: int, users: int, per_room: int) -> Corpus:
    from _conversations import generate

    data = generate(seed=seed, users=users)
    turns = [Turn(t.id, t.user, t.text, t.at.timestamp(), t.session, t.role) for t in data.turns]
    asked = [Asked(q.text, q.user, frozenset(q.evidence)) for q in data.questions]
    name = f"conversations-{'train' if seed == 1 else 'test'}"
    return Corpus(name, turns, asked, offtopic(name, turns, per_room))


def locomo(per_room: int) -> Corpus:
    import _locomo

    if not _locomo.available():
        raise DataUnavailableError(f"no {_locomo.FILE}")
    loaded, questions = _locomo.load()
    turns = [Turn(t.id, t.conversation, t.text, t.at, t.session, t.speaker) for t in loaded]
    asked = [Asked(q.text, q.conversation, frozenset(q.evidence)) for q in questions]
    return Corpus("locomo", turns, asked, offtopic("locomo", turns, per_room))


def store(corpus: Corpus, model: CachedModel) -> Memory:
    mem = Memory(None, model, track_access=False)
    rows = [
        {
            "id": t.id,
            "text": t.text,
            "room_id": t.room,
            "created_at": t.at,
            "session_id": t.session,
            "speaker": t.speaker,
        }
        for t in corpus.turns
    ]
    for start in range(0, len(rows), 2000):
        mem.add_many(rows[start : start + 2000])
    mem.wait_indexed()
    model.cache.save()
    return mem


def ranking(mem: Memory, q: Asked, floor: float | None) -> list[str]:
    """The first ``max(COUNTS)`` memories build_context's search gives at ``floor``: the
    first ``c`` of them are what it injects at count ``c``."""
    hits = mem.search(
        q.text,
        max(COUNTS),
        candidates=POOL,
        min_similarity=floor,
        track_access=False,
        room_id=q.room,
    )
    return [h.record.id for h in hits]


Rankings = dict[float | None, list[list[str]]]


def check_replay(mem: Memory, asked: Iterable[Asked], ranked: Iterable[list[str]]) -> None:
    """The search at the default floor, cut to the default count, is what build_context
    injects."""
    for q, r in zip(asked, ranked, strict=False):
        ctx = build_context(mem, q.text, {"room_id": q.room}, 20_000, track_access=False)
        got = [rec.id for rec in ctx.records["memories"]]
        assert got == r[:COUNT], (q.text, got, r[:COUNT])


@dataclass(frozen=True)
class Scores:
    empty: float  # off-topic questions with no memory
    off_mean: float  # memories an off-topic question gets
    precision: float  # injected memories of on-topic questions that are evidence
    recall: float  # an on-topic question's evidence in its context, averaged
    on_mean: float  # memories an on-topic question gets
    ndcg: float = math.nan  # of the injected list, gains 1 for evidence


def ndcg(ids: Sequence[str], evidence: frozenset[str]) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, x in enumerate(ids) if x in evidence)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(evidence), max(len(ids), 1))))
    return dcg / ideal if ideal else 0.0


def scores(
    on: Sequence[Asked],
    on_sets: Sequence[Sequence[str]],
    off_sets: Sequence[Sequence[str]],
) -> Scores:
    shown = sum(len(s) for s in on_sets)
    right = sum(len(set(s) & q.evidence) for q, s in zip(on, on_sets, strict=True))
    return Scores(
        empty=sum(not s for s in off_sets) / len(off_sets),
        off_mean=statistics.fmean(len(s) for s in off_sets),
        precision=right / shown if shown else 0.0,
        recall=statistics.fmean(
            len(set(s) & q.evidence) / len(q.evidence) for q, s in zip(on, on_sets, strict=True)
        ),
        on_mean=statistics.fmean(len(s) for s in on_sets),
        ndcg=statistics.fmean(ndcg(s, q.evidence) for q, s in zip(on, on_sets, strict=True)),
    )


def floor_name(floor: float | None) -> str:
    return "none" if floor is None else f"{floor:.2f}"


def best_cosine(mem: Memory, q: Asked) -> float:
    """The cosine of the memory nearest the question in its room."""
    hits = mem.search(q.text, 1, mode="vector", explain=True, track_access=False, room_id=q.room)
    return hits[0].explain["cosine"] if hits else -1.0


def floor_table(corpus: Corpus, on: Rankings, off: Rankings) -> dict[str, Any]:
    print(
        "| floor | count | off-topic with no memory | memories per off-topic question "
        "| injected that are evidence | evidence recall | memories per question |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    grid: dict[str, Any] = {}
    for floor in FLOORS:
        for count in COUNTS:
            s = scores(
                corpus.questions,
                [r[:count] for r in on[floor]],
                [r[:count] for r in off[floor]],
            )
            grid[f"{floor_name(floor)}/{count}"] = s.__dict__
            mark = " (default)" if floor == MIN_SCORE and count == COUNT else ""
            print(
                f"| {floor_name(floor)}{mark} | {count} | {s.empty:.3f} | {s.off_mean:.2f} "
                f"| {s.precision:.3f} | {s.recall:.3f} | {s.on_mean:.2f} |",
                flush=True,
            )
    return grid


def gate_table(mem: Memory, corpus: Corpus, on: Rankings, off: Rankings) -> dict[str, Any]:
    """The defaults, with nothing injected for a question whose nearest memory is below
    a second floor (no option of build_context: what such a floor would do)."""
    on_best = [best_cosine(mem, q) for q in corpus.questions]
    off_best = [best_cosine(mem, q) for q in corpus.offtopic]
    print(f"\n{corpus.name}: the cosine of the nearest memory, 10th / 50th / 90th percentile")
    for kind, best in (("on-topic", on_best), ("off-topic", off_best)):
        p = statistics.quantiles(best, n=10)
        print(f"- {kind}: {p[0]:.3f} / {statistics.median(best):.3f} / {p[-1]:.3f}")
    print(f"\n{corpus.name}: the defaults, nothing injected below a floor on the nearest memory")
    print("| floor on the nearest | off-topic with no memory | evidence share | evidence recall |")
    print("|---:|---:|---:|---:|")
    out: dict[str, Any] = {}
    for gate in GATES:
        s = scores(
            corpus.questions,
            [r[:COUNT] if b >= gate else [] for r, b in zip(on[MIN_SCORE], on_best, strict=True)],
            [r[:COUNT] if b >= gate else [] for r, b in zip(off[MIN_SCORE], off_best, strict=True)],
        )
        out[f"{gate:.2f}"] = s.__dict__
        print(f"| {gate:.2f} | {s.empty:.3f} | {s.precision:.3f} | {s.recall:.3f} |", flush=True)
    return out


def diversity_table(mem: Memory, corpus: Corpus) -> dict[str, Any]:
    print(f"\n{corpus.name}: build_context at its defaults, by diversity")
    print("| diversity | evidence recall | nDCG of the injected list | evidence share |")
    print("|---:|---:|---:|---:|")
    out: dict[str, Any] = {}
    for lam in DIVERSITY:
        sets = []
        for q in corpus.questions:
            ctx = build_context(
                mem, q.text, {"room_id": q.room}, 20_000, track_access=False, diversity=lam
            )
            sets.append([rec.id for rec in ctx.records["memories"]])
        s = scores(corpus.questions, sets, [[]])
        out[str(lam)] = s.__dict__
        print(f"| {lam} | {s.recall:.3f} | {s.ndcg:.3f} | {s.precision:.3f} |", flush=True)
    return out


def run(corpus: Corpus, model: CachedModel) -> dict[str, Any]:
    mem = store(corpus, model)
    on = {f: [ranking(mem, q, f) for q in corpus.questions] for f in FLOORS}
    off = {f: [ranking(mem, q, f) for q in corpus.offtopic] for f in FLOORS}
    check_replay(mem, corpus.questions[:CHECKED], on[MIN_SCORE])
    check_replay(mem, corpus.offtopic[:CHECKED], off[MIN_SCORE])
    rooms = len({t.room for t in corpus.turns})
    print(
        f"\n{corpus.name}: {len(corpus.turns):,} turns in {rooms} rooms, "
        f"{len(corpus.questions)} on-topic questions, {len(corpus.offtopic)} off-topic"
    )
    out = {
        "grid": floor_table(corpus, on, off),
        "nearest": gate_table(mem, corpus, on, off),
        "diversity": diversity_table(mem, corpus),
    }
    mem.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="conversations,locomo")
    parser.add_argument("--per-room", type=int, default=20)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TextTruncatedWarning)
    embedder = OnnxEmbedder()
    model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))
    corpora: list[Any] = []
    for name in (n.strip() for n in args.sets.split(",")):
        if name == "conversations":
            corpora += [
                lambda: conversations(1, 10, args.per_room),
                lambda: conversations(0, 20, args.per_room),
            ]
        elif name == "locomo":
            corpora.append(lambda: locomo(args.per_room))
        else:
            parser.error(f"unknown set {name!r}")
    results: dict[str, Any] = {}
    for make in corpora:
        try:
            corpus = make()
        except DataUnavailableError as e:
            print(f"skipped: {e}")
            continue
        results[corpus.name] = run(corpus, model)
    model.cache.save()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
