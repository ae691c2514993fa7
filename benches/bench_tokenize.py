"""Tokenizing for the default model: memlane's WordPiece against the ``tokenizers`` library.

What it measures, in one process, the two interleaved (both see the same load):

1. one batch, as ``OnnxEmbedder.embed_batch`` tokenizes it (cut at 256 tokens with
   [CLS] and [SEP], no padding): 32 chat messages (the synthetic conversations of
   ``benches/_conversations.py``) and 64 SciFact abstracts (``../shared/data/``).
   Median time per batch over ``--rounds`` rounds;
2. one short text, as ``Memory.search`` embeds a question (``encode``);
3. ``OnnxEmbedder.embed`` of one short question, end to end, with each tokenizer
   (``tokenizers`` put behind the embedder as memlane used it before): the median
   latency must not move beyond noise.

Both tokenizers must give the same ids. Figures move with the machine's load: the
script prints the load average before and after.

    python benches/bench_tokenize.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from tokenizers import Tokenizer

import _conversations
from _data import SHARED_DATA
from memlane._core import WordPiece
from memlane.embeddings import OnnxEmbedder
from memlane.embeddings._model_files import TOKENIZER_FILE
from memlane.embeddings._onnx import DEFAULT_MAX_LENGTH
from memlane.embeddings.tokenizer import HfTokenizer


def _median_us(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median microseconds per call of each, the calls interleaved round by round."""
    samples: dict[str, list[float]] = {label: [] for label in calls}
    for r in range(rounds):
        order = list(calls) if r % 2 == 0 else list(reversed(calls))
        for label in order:
            start = time.perf_counter()
            calls[label]()
            samples[label].append(time.perf_counter() - start)
    return {label: float(np.median(s)) * 1e6 for label, s in samples.items()}


def _report(title: str, medians: dict[str, float]) -> None:
    ours, theirs = medians["memlane"], medians["tokenizers"]
    print(f"{title}: memlane {ours:9.1f} us, tokenizers {theirs:9.1f} us ({theirs / ours:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="rounds per measurement")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")

    theirs = Tokenizer.from_file(str(TOKENIZER_FILE))
    theirs.no_padding()
    theirs.enable_truncation(DEFAULT_MAX_LENGTH)
    ours = WordPiece.from_file(TOKENIZER_FILE, DEFAULT_MAX_LENGTH)

    turns = _conversations.generate(seed=0, users=2, sessions=4).turns
    chat = [t.text for t in random.Random(0).sample(turns, 32)]
    batches = {"32 chat messages": chat}
    corpus = SHARED_DATA / "scifact" / "corpus.jsonl"
    if corpus.is_file():
        with corpus.open(encoding="utf-8") as f:
            batches["64 SciFact abstracts"] = [json.loads(next(f))["text"] for _ in range(64)]
    else:
        print(f"skipping the abstracts: {corpus} not found")

    for label, texts in batches.items():
        assert [e.ids for e in ours.encode_batch(texts)] == [
            e.ids for e in theirs.encode_batch(texts)
        ]
        tokens = [len(e) for e in ours.encode_batch(texts)]
        medians = _median_us(
            {
                "memlane": lambda texts=texts: ours.encode_batch(texts),
                "tokenizers": lambda texts=texts: theirs.encode_batch(texts),
            },
            args.rounds,
        )
        _report(f"{label} ({np.mean(tokens):.0f} tokens on average), per batch", medians)

    question = "which city does my sister live in these days?"
    medians = _median_us(
        {"memlane": lambda: ours.encode(question), "tokenizers": lambda: theirs.encode(question)},
        args.rounds * 10,
    )
    _report("one question, encode", medians)

    after = OnnxEmbedder()
    before = OnnxEmbedder()
    before._tokenizer = HfTokenizer(Tokenizer.from_file(str(TOKENIZER_FILE)), before.max_length)
    questions = [f"{question} ({i})" for i in range(args.rounds)]
    assert np.allclose(after.embed(question), before.embed(question), atol=1e-6)
    samples: dict[str, list[float]] = {"memlane": [], "tokenizers": []}
    for i, q in enumerate(questions):
        pair = [("memlane", after), ("tokenizers", before)]
        for label, embedder in pair if i % 2 == 0 else reversed(pair):
            start = time.perf_counter()
            embedder.embed(q)
            samples[label].append(time.perf_counter() - start)
    _report(
        "OnnxEmbedder.embed of one question",
        {label: float(np.median(s)) * 1e6 for label, s in samples.items()},
    )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
