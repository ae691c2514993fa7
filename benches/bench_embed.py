"""Embedding throughput of OnnxEmbedder on short texts, against a naive runner.

What it measures: texts per second of wall time and of CPU time, best of a few runs, for
  - naive: the shipped tokenizer.json as is (every text padded to 128 tokens),
    batches of 64 in input order;
  - unsorted: each batch padded to its own longest text, input order;
  - memlane: ``OnnxEmbedder.embed_batch`` (sorted by token count, then padded per batch).
All three run the same onnxruntime session and the script checks that they
return the same vectors, so only the padding differs.

Texts: a fixed sample of WordNet glosses (median 11 words) and synthetic 16-token texts.

    python benches/bench_embed.py [--texts 512] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from _data import DataUnavailableError, wordnet_texts
from memlane.embeddings import OnnxEmbedder, _model_files, _onnx

Vectors = npt.NDArray[np.float32]


def _runner(session: object, tokenizer: Tokenizer, batch: int) -> Callable[[list[str]], Vectors]:
    """Embed in input order, batch by batch, padded however ``tokenizer`` pads."""

    def run(texts: list[str]) -> Vectors:
        out = []
        for start in range(0, len(texts), batch):
            encodings = tokenizer.encode_batch(texts[start : start + batch])
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(encodings), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, e in enumerate(encodings):
                ids[row, : len(e.ids)] = e.ids
                mask[row, : len(e.ids)] = e.attention_mask
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            (hidden,) = session.run(["last_hidden_state"], feeds)  # type: ignore[attr-defined]
            out.append(_onnx._mean_pool_normalised(hidden, mask))
        return np.concatenate(out)

    return run


def _rates(
    embed: Callable[[list[str]], Vectors], texts: list[str], repeat: int
) -> tuple[float, float]:
    """Texts per second of wall time and per second of this process's CPU time (best runs).

    CPU time counts every thread's work and not the time spent waiting for a core,
    so it still compares the runners when other processes load the machine.
    """
    wall = cpu = float("inf")
    for _ in range(repeat):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        embed(texts)
        wall = min(wall, time.perf_counter() - wall_start)
        cpu = min(cpu, time.process_time() - cpu_start)
    return len(texts) / wall, len(texts) / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=512, help="texts per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    args = parser.parse_args()

    embedder = OnnxEmbedder()
    tokenizer_file = _model_files.default_tokenizer_path()
    # One session for all three: a second one's idle threads would spin against the first.
    session = embedder._session
    shipped = Tokenizer.from_file(str(tokenizer_file))  # pads to 128, cuts at 128
    per_batch = Tokenizer.from_file(str(tokenizer_file))
    per_batch.no_padding()
    per_batch.enable_truncation(embedder.max_length)
    runners = {
        "naive (pad to 128)": _runner(session, shipped, 64),
        "unsorted (pad per batch)": _runner(session, per_batch, 64),
        "memlane (sort, pad per batch)": embedder.embed_batch,
    }

    corpora = {"16-token texts": [f"text {i} " + "word " * 12 for i in range(args.texts)]}
    try:
        corpora["WordNet glosses"] = random.Random(0).sample(wordnet_texts(), args.texts)
    except DataUnavailableError as e:
        print(f"skipping WordNet glosses: {e}")

    print(f"{embedder!r}, {args.texts} texts per run, best of {args.repeat}")
    for corpus, texts in corpora.items():
        tokens = [len(e.ids) for e in per_batch.encode_batch(texts)]
        print(f"\n{corpus}: {np.mean(tokens):.1f} tokens on average (max {max(tokens)})")
        reference = embedder.embed_batch(texts[:256])
        rates = {}
        for label, embed in runners.items():
            drift = float(np.abs(embed(texts[:256]) - reference).max())
            assert drift < 1e-4, f"{label} returns other vectors (max difference {drift})"
            rates[label] = _rates(embed, texts, args.repeat)
        naive_wall, naive_cpu = rates["naive (pad to 128)"]
        for label, (wall, cpu) in rates.items():
            print(
                f"  {label:30} {wall:6.0f} texts/s ({wall / naive_wall:5.2f}x naive)"
                f"  {cpu:6.0f} texts/CPU-s ({cpu / naive_cpu:5.2f}x naive)"
            )


if __name__ == "__main__":
    main()
