"""Choosing ingestion's default chunker: retrieval quality, and what the model never reads.

The default model (all-MiniLM-L6-v2) reads the first 256 tokens of a text, [CLS] and
[SEP] included: the rest of a longer fragment is in no vector. For each chunker this
reports, on two corpora:

- SciFact (BEIR; ``../shared/data/scifact``): the abstracts judged relevant to the 300
  test queries plus ``--distractors`` other abstracts (seeded sample), each written as a
  ``.txt`` file (title, blank line, text) and ingested with ``Memory.ingest`` (default
  model, vectors cached in ``benches/.cache/``). Every test query is asked through
  ``search_knowledge(query, k=50, threshold=None)``; a document's rank is its first
  fragment's. recall@10 and nDCG@10 over documents.
- The repository's own markdown (``docs/``, ``README.md``, ``ARCHITECTURE.md``,
  ``benches/README.md``): fragments, fragments longer than the model reads, and whether
  a sentence's meaning is in a vector: ``--sentences`` sentences of 40 characters or more
  (seeded sample) each asked in vector mode (``search_knowledge(sentence, k=5,
  mode="vector", threshold=None)``); found when one of the five fragments holds it.
  A sentence past what the model reads of its fragment is in no vector.

    python benches/bench_chunking.py [--distractors 1500] [--sentences 300] [--seed 7]
        [--markdown-only]
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench_ingest import (
    CachedModel,
    DataUnavailableError,
    VectorCache,
    scifact_corpus,
    write_corpus,
)
from bench_quality import load_qrels, load_queries, ndcg_at, recall_at
from memlane import Memory
from memlane.embeddings import OnnxEmbedder, TextTruncatedWarning
from memlane.knowledge import MarkdownSplitter, RecursiveCharacterSplitter, TokenSplitter
from memlane.knowledge.chunking import default_chunkers

REPO = Path(__file__).resolve().parents[1]
#: The model's limit less [CLS] and [SEP].
READ = 254
MARKDOWN = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "benches" / "README.md"]


def chunkers() -> dict[str, Callable[[bool], Any]]:
    """Name -> (markdown? -> chunker) of the candidates."""
    tokens = TokenSplitter(chunk_size=READ)
    count = tokens.count_tokens

    def chars(md: bool) -> Any:
        return MarkdownSplitter() if md else RecursiveCharacterSplitter()

    def recursive(size: int, overlap: int) -> Callable[[bool], Any]:
        def make(md: bool) -> Any:
            if md:
                return MarkdownSplitter(size, overlap, length=count)
            return RecursiveCharacterSplitter(size, overlap, length=count)

        return make

    return {
        "1,000/200 characters (before)": chars,
        "TokenSplitter 512/20 (elizaOS)": lambda md: TokenSplitter(),
        "TokenSplitter 254/20": lambda md: TokenSplitter(chunk_size=READ),
        "recursive, 254/40 tokens": recursive(READ, 40),
        "recursive, 128/20 tokens": recursive(128, 20),
        "default (ingest's own)": lambda md: default_chunkers()[1 if md else 0],
    }


def markdown_files() -> list[Path]:
    return sorted((REPO / "docs").rglob("*.md")) + MARKDOWN


def unread(make: Callable[[bool], Any], count: Callable[[str], int]) -> tuple[int, int]:
    """(fragments, fragments longer than the model reads) of the repository's markdown."""
    total = over = 0
    for path in markdown_files():
        for chunk in make(True).split(path.read_text(encoding="utf-8")):
            if not chunk.content.strip():
                continue
            total += 1
            over += count(chunk.content) > READ
    return total, over


def sentences(count: int, seed: int) -> list[str]:
    """A seeded sample of the markdown's prose sentences (40 characters or more)."""
    found = []
    for path in markdown_files():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith(("#", "|", "```", "    ")):
                continue
            found += [s.strip() for s in re.split(r"(?<=[.!?]) ", line) if len(s.strip()) >= 40]
    found = sorted(set(found))
    return random.Random(seed).sample(found, min(count, len(found)))


def sentence_recall(make: Callable[[bool], Any], model: CachedModel, asked: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "md"
        folder.mkdir()
        for i, path in enumerate(markdown_files()):
            shutil.copy(path, folder / f"{i:02d}-{path.name}")
        mem = Memory(Path(tmp) / "store", embedder=model)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TextTruncatedWarning)
                mem.ingest(folder, chunker=make(True), shared=True)
            found = 0
            for sentence in asked:
                hits = mem.search_knowledge(sentence, k=5, mode="vector", threshold=None)
                found += any(sentence in " ".join(h.record.text.split()) for h in hits)
        finally:
            mem.close()
    return found / len(asked)


def scifact(
    make: Callable[[bool], Any],
    model: CachedModel,
    folder: Path,
    queries: dict[str, str],
    qrels: Any,
) -> tuple[float, float, int, int]:
    with tempfile.TemporaryDirectory() as store:
        mem = Memory(store, embedder=model)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TextTruncatedWarning)
                report = mem.ingest(folder, chunker=make(False), shared=True)
            recall, ndcg = [], []
            for qid, gains in qrels.items():
                hits = mem.search_knowledge(queries[qid], k=50, threshold=None)
                ranked = list(dict.fromkeys(Path(h.record.metadata["source"]).stem for h in hits))
                recall.append(recall_at(ranked, gains, 10))
                ndcg.append(ndcg_at(ranked, gains, 10))
        finally:
            mem.close()
    # Counted here: the embedder warns of a cut only when it embeds, not from the cache.
    chunker, count = make(False), TokenSplitter().count_tokens
    texts = [p.read_text(encoding="utf-8") for p in folder.iterdir()]
    cut = sum(count(c.content) > READ for t in texts for c in chunker.split(t))
    return float(np.mean(recall)), float(np.mean(ndcg)), report.fragments, cut


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--distractors", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--markdown-only", action="store_true")
    args = parser.parse_args()
    embedder = OnnxEmbedder()
    model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))
    asked = sentences(args.sentences, args.seed)
    if args.markdown_only:
        print(f"{len(asked)} sentences of {len(markdown_files())} markdown files")
        print("| chunker | sentences found (vector, top 5) |")
        print("| --- | ---: |")
        for name, make in chunkers().items():
            print(f"| {name} | {sentence_recall(make, model, asked):.3f} |", flush=True)
            model.cache.save()
        return
    try:
        docs = scifact_corpus()
    except DataUnavailableError as e:
        raise SystemExit(str(e)) from None
    qrels = load_qrels("test")
    queries = load_queries()
    judged = {d for gains in qrels.values() for d in gains}
    others = [d for d in docs if d["_id"] not in judged]
    chosen = [d for d in docs if d["_id"] in judged]
    chosen += random.Random(args.seed).sample(others, min(args.distractors, len(others)))
    count = TokenSplitter().count_tokens
    print(
        f"SciFact: {len(chosen)} abstracts, {len(qrels)} test queries; markdown: "
        f"{len(markdown_files())} files of this repository"
    )
    print("| chunker | SciFact recall@10 | nDCG@10 | fragments | cut | markdown fragments | cut |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "scifact"
        write_corpus(chosen, folder)
        for name, make in chunkers().items():
            recall, ndcg, fragments, cut = scifact(make, model, folder, queries, qrels)
            md_total, md_over = unread(make, count)
            model.cache.save()
            print(
                f"| {name} | {recall:.3f} | {ndcg:.3f} | {fragments:,} | {cut:,} "
                f"| {md_total:,} | {md_over:,} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
