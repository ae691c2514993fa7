"""What a pause costs the search after it: memlane and chromadb, given the query's vector.

``bench_user_latency.py`` finds a search dearer right after a model run than right after
another search. This asks why: is it what the model's run reads (23 MB of weights, which
evict the store's data from the caches), or only the time that passes? One store of
each (100,000 WordNet glosses by default, filled from the cached vectors as
``bench_user_latency.py`` fills them), then for each SciFact question, each system's
search given the question's vector is timed after each of these, their order rotating
from question to question:

- another search: the previous question's, on the same system (the caches as a loop of
  searches leaves them);
- spinning 1, 2 and 4 ms, and as long as the model takes (its median on these
  questions): a loop reading the clock, which touches no memory;
- sleeping as long as the model takes;
- the model's run on another text (what a new question's search waits for).

If spinning as long as the model costs as much as the model, the caches are emptied by
the machine (the other programs and guests sharing its cores and last-level cache)
while the time passes, not by the run. memlane searches with its defaults (hybrid,
access tracking on) and the text gets trailing spaces, new to the engine each time, so
it retrieves anew; both return 10 hits.

    python benches/bench_pause.py [--size 100000] [--queries 150] [--no-chroma]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_user_latency import K, fill_chroma, fill_memlane, inputs, settled

SPINS_MS = (1.0, 2.0, 4.0)


def spin(seconds: float) -> None:
    """Keeps this core busy for ``seconds`` without touching memory."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="memories in each store")
    parser.add_argument("--queries", type=int, default=150, help="questions timed")
    parser.add_argument("--no-chroma", action="store_true")
    args = parser.parse_args()
    chroma = not args.no_chroma
    data = inputs(chroma)
    if data is None:
        return
    texts, vectors, questions = data[0][: args.size], data[1][: args.size], data[2]
    random.Random(0).shuffle(questions)
    asked, others = questions[: args.queries], questions[args.queries : 2 * args.queries]
    if len(others) < args.queries:
        raise SystemExit(f"{2 * args.queries} SciFact texts needed, {len(questions)} available")

    root = Path(tempfile.mkdtemp(prefix="memlane-bench-pause-"))
    try:
        print(f"filling {args.size:,} memories", file=sys.stderr)
        mem, _ = fill_memlane(root / "memlane", texts, vectors)
        embedder = mem.embedder
        assert embedder is not None
        col: Any = fill_chroma(root / "chroma", texts, vectors, embedder) if chroma else None
        settled(mem)
        vecs = [embedder.embed(q) for q in asked]
        model_s = statistics.median(
            _timed(lambda t=t: embedder.embed(t)) for t in others[: min(50, len(others))]
        )
        searches: dict[str, Callable[[int, str], object]] = {
            "memlane": lambda i, pad: mem.search(asked[i] + pad, k=K, query_embedding=vecs[i]),
        }
        if col is not None:
            searches["chromadb"] = lambda i, _pad: col.query(
                query_embeddings=[vecs[i]], n_results=K
            )
        pauses: dict[str, Callable[[int, str], object]] = {
            "another search": lambda i, who: searches[who](i - 1, " " * 40),
            **{f"spin {ms:g} ms": lambda _i, _w, s=ms / 1e3: spin(s) for ms in SPINS_MS},
            f"spin {model_s * 1e3:.1f} ms (the model's time)": lambda _i, _w: spin(model_s),
            f"sleep {model_s * 1e3:.1f} ms": lambda _i, _w: time.sleep(model_s),
            "the model's run": lambda i, _w: embedder.embed(others[i]),
        }
        samples: dict[tuple[str, str], list[float]] = {}
        for rep in range(2):
            for i in range(1, len(asked)):
                print(
                    f"\rround {rep + 1}/2, question {i}/{len(asked) - 1}", end="", file=sys.stderr
                )
                names = list(pauses)
                names = names[i % len(names) :] + names[: i % len(names)]
                for j, pause in enumerate(names):
                    for who in list(searches) if (i + j) % 2 else list(searches)[::-1]:
                        pauses[pause](i, who)
                        pad = " " * (1 + j + len(names) * rep)
                        t = time.perf_counter()
                        searches[who](i, pad)
                        samples.setdefault((pause, who), []).append(time.perf_counter() - t)
        print(file=sys.stderr)
        mem.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    systems = ["memlane"] + (["chromadb"] if chroma else [])
    print(
        f"{args.size:,} memories, {len(asked) - 1} questions twice, search given the vector, "
        f"k = {K}; p50 ms (and against after another search)"
    )
    print("| before the search | " + " | ".join(systems) + " |")
    print("| --- |" + " ---: |" * len(systems))
    base = {who: statistics.median(samples[("another search", who)]) for who in systems}
    for pause in pauses:
        cells = []
        for who in systems:
            p50 = statistics.median(samples[(pause, who)])
            cells.append(f"{p50 * 1e3:.3f} ({(p50 - base[who]) * 1e3:+.3f})")
        print(f"| {pause} | " + " | ".join(cells) + " |")


def _timed(call: Callable[[], object]) -> float:
    t = time.perf_counter()
    call()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
