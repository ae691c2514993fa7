"""Choosing the default relevance floor of ``build_context`` and ``AgentMemory``'s
auto-inject (``min_score``).

What it does: stores two corpora in two stores opened as a user opens one,
``memlane.Memory(path)`` with the default embedder (all-MiniLM-L6-v2, ONNX):

- the dated conversation set of ``benches/_conversations.py`` (seed 0, 20 users x 30
  sessions, every turn a memory in its user's room, as ``bench_conversations.py``
  stores it); a question's relevant hit is the turn that answers it. Users
  ``u00, u02, ...`` are the *train* split, the odd ones the *test* split;
- the same set's *facts*: each user's current fact statements alone (about ten per
  user: for a changed fact, the turn stating the change), the shape of the ``memories``
  an agent's reflection keeps while the turns go to its history, and what
  auto-inject searches. Same questions, same splits. In the store of every turn a
  relevant turn with a low cosine is outranked anyway, so the relevant hits of its top 5
  are the high-cosine ones; among ten facts it is not, and a floor would cut it;
- SciFact, each abstract (title, blank line, text) one memory; a hit is relevant
  when its abstract is in the query's qrels. The 809 *train* queries tune, the 300
  *test* ones report. Abstract vectors come from the vector cache of
  ``benches/.cache/`` (the same model; computed once).

Each question is asked through ``Memory.search`` with its defaults (hybrid, weighted
fusion), no floor, ``k=50`` and ``explain=True``, and each hit's two candidate
signals are kept: the **cosine** similarity (what ``min_similarity`` cuts) and the
fused **score** (what ``threshold`` cuts: ``0.5 * cosine + 0.5 * bm25 / ceiling``
times a boost in [0.89, 1], but the cosine alone when no stored text shares a word
with the query, so the same pair can score twice as much in one store as in
another). A floor ``t`` on a signal keeps the hits at or above ``t``; the engine
applies it before it cuts to ``k`` (5, ``build_context``'s ``inject_limit``), so it
is replayed on the pool: filter, then take the first 5.

Criterion (as ``tune_knowledge_threshold.py``): **the highest floor of the grid 0.00,
0.01, ... that keeps at least 95 % of the relevant hits the top 5 holds with no
floor**, on each train split, and the lowest of the three, so it holds on all. One
more bound: a fact that matters although it shares no word and little meaning with
the question must stay, as "Alice is vegan" for "what should I cook?" (issue 34); the
floor is at most its signal, rounded down. The default is the lower of the two bounds.
It is then measured on the test splits through the real API (not replayed), beside
the per-corpus floors, so the cost of each bound shows.
What a floor is for: off-topic questions left with no hit at all. Two kinds, each
exact from the question's best signal over the store (the vector retriever's first
is always a candidate): 500 WordNet glosses (seeded sample), and the other corpus's
questions (SciFact's test claims asked in a random user's room; the conversation
questions asked of the SciFact store).

    python benches/tune_context_floor.py [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _conversations import Question, generate
from bench_conversations import fill
from bench_ingest import (
    CachedModel,
    DataUnavailableError,
    VectorCache,
    document_text,
    scifact_corpus,
)
from bench_quality import Qrels, load_qrels, load_queries
from memlane import Memory
from memlane.embeddings import OnnxEmbedder, TextTruncatedWarning

K = 5
POOL = 50
TARGET = 0.95
GRID = [round(0.01 * i, 2) for i in range(0, 81)]
SIGNALS = ("cosine", "score")
OFF_TOPIC = 500
# A question and the fact it needs though they share no word (issue 34).
MUST = ("what should I cook?", "Alice is vegan")
WORDNET = Path(__file__).resolve().parents[1].parent / "shared/data/wordnet/wordnet30_glosses.jsonl"


@dataclass
class Pool:
    """One question's hits with no floor, best first: both signals and judged relevance."""

    signal: dict[str, np.ndarray]
    relevant: np.ndarray


@dataclass
class Ask:
    """A question as the bench asks it: text, scope and which hit ids are relevant."""

    text: str
    scope: dict[str, str]
    relevant: Callable[[Any], bool]


def progress(message: str) -> None:
    print(f"\r{message}", end="", file=sys.stderr, flush=True)


def pools(mem: Memory, asks: list[Ask]) -> list[Pool]:
    out = []
    for a in asks:
        hits = mem.search(a.text, POOL, explain=True, track_access=False, **a.scope)
        sig = {
            "cosine": np.array([h.explain["cosine"] or 0.0 for h in hits], float),
            "score": np.array([h.score for h in hits], float),
        }
        out.append(Pool(sig, np.array([a.relevant(h) for h in hits], bool)))
    return out


def replay(ps: list[Pool], signal: str, t: float | None) -> dict[str, float]:
    """Relevant hits kept (of those the top K holds with no floor), unrelated hits cut,
    precision, and questions left with a relevant hit."""
    base_rel = base_irr = kept_rel = kept_irr = found = 0
    for p in ps:
        base_rel += int(p.relevant[:K].sum())
        base_irr += int((~p.relevant[:K]).sum())
        keep = np.ones(len(p.relevant), bool) if t is None else p.signal[signal] >= t
        kept = p.relevant[keep][:K]
        kept_rel += int(kept.sum())
        kept_irr += int((~kept).sum())
        found += int(kept.any())
    return figures(base_rel, base_irr, kept_rel, kept_irr, found, len(ps))


def figures(
    base_rel: int, base_irr: int, kept_rel: int, kept_irr: int, found: int, n: int
) -> dict[str, float]:
    return {
        "relevant_kept": kept_rel / base_rel if base_rel else 0.0,
        "unrelated_cut": 1 - kept_irr / base_irr if base_irr else 0.0,
        "precision": kept_rel / (kept_rel + kept_irr) if kept_rel + kept_irr else 0.0,
        "found": found / n if n else 0.0,
    }


def choose(ps: list[Pool], signal: str) -> float:
    """The highest floor of the grid keeping at least TARGET of the relevant hits."""
    return max(t for t in GRID if replay(ps, signal, t)["relevant_kept"] >= TARGET)


def measured(
    mem: Memory, asks: list[Ask], base: list[Pool], signal: str, t: float
) -> dict[str, float]:
    """Floor ``t`` on the test questions through the real API."""
    base_rel = sum(int(p.relevant[:K].sum()) for p in base)
    base_irr = sum(int((~p.relevant[:K]).sum()) for p in base)
    kept_rel = kept_irr = found = 0
    cut = {"min_similarity": t} if signal == "cosine" else {"threshold": t}
    for a in asks:
        hits = mem.search(a.text, K, track_access=False, **cut, **a.scope)
        rel = [a.relevant(h) for h in hits]
        kept_rel += sum(rel)
        kept_irr += len(rel) - sum(rel)
        found += int(any(rel))
    return figures(base_rel, base_irr, kept_rel, kept_irr, found, len(asks))


def best_signals(mem: Memory, asks: list[Ask]) -> dict[str, np.ndarray]:
    """Each off-topic question's best cosine and best score over the store: it gets no
    hit under any higher floor on that signal."""
    cos, score = [], []
    for a in asks:
        (v,) = mem.search(a.text, 1, mode="vector", explain=True, track_access=False, **a.scope)
        cos.append(v.explain["cosine"])
        (h,) = mem.search(a.text, 1, track_access=False, **a.scope)
        score.append(h.score)
    return {"cosine": np.array(cos), "score": np.array(score)}


def percentiles(ps: list[Pool], signal: str) -> str:
    rel = np.concatenate([p.signal[signal][:K][p.relevant[:K]] for p in ps])
    irr = np.concatenate([p.signal[signal][:K][~p.relevant[:K]] for p in ps])

    def q(x: np.ndarray) -> str:
        return "/".join(f"{v:.2f}" for v in np.percentile(x, [5, 25, 50, 75, 95]))

    return f"relevant {q(rel)}; unrelated {q(irr)} (5/25/50/75/95th percentiles)"


# -- the two corpora -----------------------------------------------------------------------


def conversation_store(root: Path) -> tuple[Memory, list[Question]]:
    data = generate(seed=0)
    mem = Memory(root / "conversations")
    took = fill(mem, data, progress)
    print(f"\nconversations: {len(data.turns):,} turns stored in {took:.0f} s", file=sys.stderr)
    return mem, data.questions


def conversation_asks(questions: list[Question], parity: int) -> list[Ask]:
    return [
        Ask(q.text, {"room_id": q.user}, lambda h, ev=q.evidence: h.record.id in ev)
        for q in questions
        if int(q.user[1:]) % 2 == parity
    ]


def must_keep() -> dict[str, float]:
    """The cosine and the score of the fact that must stay, in a store holding it alone."""
    with Memory(None) as mem:
        mem.add(MUST[1])
        (hit,) = mem.search(MUST[0], 1, explain=True, track_access=False)
    return {"cosine": float(hit.explain["cosine"]), "score": hit.score}


def facts_store(root: Path, questions: list[Question]) -> Memory:
    data = generate(seed=0)
    said = {t.id: t for t in data.turns}
    mem = Memory(root / "facts")
    mem.add_many(
        {
            "id": tid,
            "text": said[tid].text,
            "room_id": q.user,
            "created_at": said[tid].at,
        }
        for q in questions
        for tid in q.evidence
    )
    mem.wait_indexed()
    return mem


def scifact_store(root: Path) -> Memory:
    warnings.simplefilter("ignore", TextTruncatedWarning)
    docs = scifact_corpus()
    inner = OnnxEmbedder()
    model = CachedModel(inner, VectorCache(inner.name, inner.dimension))
    texts = [document_text(d) for d in docs]
    vectors = np.empty((len(texts), model.dimension), np.float32)
    started = time.perf_counter()
    for s in range(0, len(texts), 256):
        vectors[s : s + 256] = model.embed_batch(texts[s : s + 256])
        progress(f"SciFact abstracts: {min(s + 256, len(texts))}/{len(texts)}")
    print(f" ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    try:
        model.cache.save()
    except OSError as e:  # another bench saving the same cache at the same moment
        print(f"vector cache not saved: {e}", file=sys.stderr)
    mem = Memory(root / "scifact")  # the default embedder embeds the queries
    for s in range(0, len(docs), 1000):
        mem.add_many(
            {"id": d["_id"], "text": t, "embedding": v}
            for d, t, v in zip(
                docs[s : s + 1000], texts[s : s + 1000], vectors[s : s + 1000], strict=True
            )
        )
    mem.wait_indexed()
    return mem


def scifact_asks(queries: dict[str, str], qrels: Qrels) -> list[Ask]:
    return [
        Ask(queries[qid], {}, lambda h, g=gains: g.get(h.record.id, 0) > 0)
        for qid, gains in qrels.items()
    ]


def glosses(seed: int) -> list[str]:
    if not WORDNET.is_file():
        return []
    with WORDNET.open(encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    return random.Random(seed).sample(texts, OFF_TOPIC)


# -- report ----------------------------------------------------------------------------------


def row(label: str, f: dict[str, float], extra: str = "") -> str:
    cells = " | ".join(
        f"{f[c]:.3f}" for c in ("relevant_kept", "unrelated_cut", "precision", "found")
    )
    return f"| {label} | {cells} |{extra}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7, help="seed of the off-topic samples")
    args = parser.parse_args()
    try:
        queries = load_queries()
        sci_train, sci_test = load_qrels("train"), load_qrels("test")
    except (DataUnavailableError, FileNotFoundError) as e:
        print(f"skipped: {e}")
        return
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="memlane-tune-floor-") as tmp:
        root = Path(tmp)
        conv, questions = conversation_store(root)
        facts = facts_store(root, questions)
        sci = scifact_store(root)
        users = sorted({q.user for q in questions})
        gloss = glosses(args.seed)
        sets: dict[str, dict[str, Any]] = {
            "conversations": {
                "mem": conv,
                "train": conversation_asks(questions, 0),
                "test": conversation_asks(questions, 1),
                "off": {
                    "WordNet glosses": [
                        Ask(g, {"room_id": rng.choice(users)}, bool) for g in gloss
                    ],
                    "SciFact test claims": [
                        Ask(queries[q], {"room_id": rng.choice(users)}, bool) for q in sci_test
                    ],
                },
            },
            "conversation facts": {
                "mem": facts,
                "train": conversation_asks(questions, 0),
                "test": conversation_asks(questions, 1),
                "off": {
                    "WordNet glosses": [
                        Ask(g, {"room_id": rng.choice(users)}, bool) for g in gloss
                    ],
                    "SciFact test claims": [
                        Ask(queries[q], {"room_id": rng.choice(users)}, bool) for q in sci_test
                    ],
                },
            },
            "SciFact": {
                "mem": sci,
                "train": scifact_asks(queries, sci_train),
                "test": scifact_asks(queries, sci_test),
                "off": {
                    "WordNet glosses": [Ask(g, {}, bool) for g in gloss],
                    "conversation questions": [Ask(q.text, {}, bool) for q in questions],
                },
            },
        }
        for s in sets.values():
            s["train_pools"] = pools(s["mem"], s["train"])
            s["test_pools"] = pools(s["mem"], s["test"])
            s["best"] = {name: best_signals(s["mem"], asks) for name, asks in s["off"].items()}
        print(file=sys.stderr)

        must = must_keep()
        floors: dict[str, float] = {}
        for signal in SIGNALS:
            per = {name: choose(s["train_pools"], signal) for name, s in sets.items()}
            kept = math.floor(must[signal] * 100) / 100
            floors[signal] = min(*per.values(), kept)
            print(f"\n## Floor on the {signal}")
            print(f"- {MUST[1]!r} for {MUST[0]!r}: {must[signal]:.3f}, so at most {kept:.2f}")
            for name, t in per.items():
                print(f"- {name} train: highest floor keeping >= {TARGET:.0%}: {t:.2f}")
            print(f"- default (the lowest bound): **{floors[signal]:.2f}**")
            for name, s in sets.items():
                spread = percentiles(s["train_pools"], signal)
                print(f"- {name} train, {signal} of the top {K}: {spread}")
            for name, s in sets.items():
                offs = list(s["best"])
                print(
                    f"\n| {name}, train (replayed) | relevant kept | unrelated cut | precision "
                    "| with a relevant hit | " + " | ".join(f"{o}: no hit" for o in offs) + " |"
                )
                print("|---|---:|---:|---:|---:|" + "---:|" * len(offs))
                curve = sorted({0.1, 0.12, 0.14, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, *per.values()})
                for t in (None, *curve):
                    none = "".join(
                        " - |" if t is None else f" {float((b[signal] < t).mean()):.3f} |"
                        for b in s["best"].values()
                    )
                    print(
                        row(
                            "none" if t is None else f"{t:.2f}",
                            replay(s["train_pools"], signal, t),
                            none,
                        )
                    )
            for name, s in sets.items():
                offs = list(s["best"])
                print(
                    f"\n| {name}, test (real API) | relevant kept | unrelated cut | precision "
                    "| with a relevant hit | " + " | ".join(f"{o}: no hit" for o in offs) + " |"
                )
                print("|---|---:|---:|---:|---:|" + "---:|" * len(offs))
                base = replay(s["test_pools"], signal, None)
                print(row("none", base, " - |" * len(offs)))
                for t in sorted({floors[signal], *per.values()}):
                    none = "".join(
                        f" {float((b[signal] < t).mean()):.3f} |" for b in s["best"].values()
                    )
                    got = measured(s["mem"], s["test"], s["test_pools"], signal, t)
                    label = f"**{t:.2f}**" if t == floors[signal] else f"{t:.2f}"
                    print(row(label, got, none))
        for s in sets.values():
            s["mem"].close()


if __name__ == "__main__":
    main()
