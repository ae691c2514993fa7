"""What a conversation option costs a search: hybrid ``Memory.search`` with a given vector
on a store of 100,000 conversation turns, each in a session and with its speaker, the
option (``--option``: ``context_weight``, contextual BM25, or ``speaker_weight``, the
speaker field; ``date_weight``, the date pass; ``when_weight``, the when pass;
``answer_weight``, the answer's share of its question's cosine; ``question_weight``, what
a memory that asks loses) at 0
against the engine's default in one run; ``--option alpha`` times the fixed weight 0.5
against the default adaptive fusion (its per-query weight). ``--dated`` ends each
question with the month and year of a stored turn ("... in March 2025"), so that the
date pass applies (the sets' questions name no date); ``--when`` starts each with
"When", so that the when pass applies.

The turns are the real chats of ``bench_quality.py``'s conversation sets (conversations
and chitchat, train and test: about 45,000 turns with their sessions and cached vectors),
stored again until the store holds ``--size`` records, each copy in sessions of its own
with its vectors jittered (so the graph holds no exact copies). The queries are those
sets' test questions with their cached vectors; each is searched with both settings,
which take turns going first, with trailing spaces that differ between the two so each
search retrieves anew. Reported: the p50 of each setting and the per-query difference
(its median among the queries where either setting went first, the two averaged), in
milliseconds.

Run with ``--baseline`` against another build (``PYTHONPATH`` pointing at its
``python/`` folder) to time that build's default search on the same store.

    python benches/bench_context_latency.py [--option speaker_weight] [--size 100000]
        [--queries 400] [--baseline] [--dated] [--when]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np

from bench_ingest import CachedModel, VectorCache
from bench_quality import SETS
from memlane import Memory, OnnxEmbedder, _core
from memlane.embeddings import TextTruncatedWarning


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--option",
        choices=(
            "context_weight",
            "answer_weight",
            "question_weight",
            "speaker_weight",
            "date_weight",
            "when_weight",
            "alpha",
        ),
        default="context_weight",
    )
    parser.add_argument("--dated", action="store_true", help="questions that name a month")
    parser.add_argument("--when", action="store_true", help="questions that ask when")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--baseline", action="store_true", help="time the default only")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TextTruncatedWarning)
    embedder = OnnxEmbedder()
    model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))
    turns: list[tuple[str, str, float, str | None, np.ndarray]] = []
    queries: list[tuple[str, np.ndarray]] = []
    for name in ("conversations", "chitchat"):
        for split in ("train", "test"):
            qs = SETS[name](split)
            vecs = model.embed_batch([d.text for d in qs.docs])
            for d, v in zip(qs.docs, vecs, strict=True):
                session = f"{name}-{split}-{d.session}"
                turns.append((d.text, session, float(d.at or 0.0), d.speaker, v))
            if split == "test":
                qvecs = model.embed_batch([q.text for q in qs.queries])
                queries += [(q.text, v) for q, v in zip(qs.queries, qvecs, strict=True)]
    rng = np.random.default_rng(0)
    mem = Memory(None, model, track_access=False, dedup_window=0)
    rows = []
    for i in range(args.size):
        text, session, at, speaker, v = turns[i % len(turns)]
        copy = i // len(turns)
        if copy:
            v = v + rng.normal(0, 0.02, v.shape).astype(np.float32)
        rows.append(
            {
                "text": text,
                "embedding": v,
                "session_id": f"{copy}-{session}",
                "created_at": at,
                "speaker": speaker,
            }
        )
    for start in range(0, len(rows), 5000):
        mem.add_many(rows[start : start + 5000])
    mem.wait_indexed()
    picked = [queries[i] for i in rng.permutation(len(queries))[: args.queries]]
    if args.dated:
        months = [time.strftime("%B %Y", time.gmtime(t[2])) for t in turns]
        picked = [(f"{text} in {months[rng.integers(len(months))]}", v) for text, v in picked]
    if args.when:
        picked = [(f"When {text}", v) for text, v in picked]
    # The setting timed against the default: the option off, or the fixed weight.
    given = _core.DEFAULT_ALPHA if args.option == "alpha" else 0.0
    settings = [{}] if args.baseline else [{args.option: given}, {}]
    times: list[list[float]] = [[] for _ in settings]
    for round_ in range(2):  # the first round warms the caches
        for n, (text, v) in enumerate(picked):
            for j in range(len(settings)):
                at = (j + n) % len(settings)
                pad = " " * (1 + at + round_ * len(settings))
                t0 = time.perf_counter()
                mem.search(text + pad, 10, query_embedding=v, **settings[at])
                if round_:
                    times[at].append(time.perf_counter() - t0)
    mem.close()
    size = f"{args.size:,} turns, {len(picked)} queries"
    if args.baseline:
        print(f"{size}: default search p50 {statistics.median(times[0]) * 1e3:.3f} ms")
        return
    p50 = [statistics.median(t) * 1e3 for t in times]
    # The second search of a pair finds the first's cache lines: the difference's median
    # is taken apart for each order, and the two averaged.
    diffs = [b - a for a, b in zip(times[0], times[1], strict=True)]
    diff = statistics.mean(statistics.median(diffs[first::2]) for first in (0, 1)) * 1e3
    print(
        f"{size}: {args.option}={given} p50 {p50[0]:.3f} ms, "
        f"the default p50 {p50[1]:.3f} ms, "
        f"per-query difference {diff:+.3f} ms (median of each order, averaged)"
    )


if __name__ == "__main__":
    main()
