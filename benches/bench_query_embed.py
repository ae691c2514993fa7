"""One short query at a time through OnnxEmbedder: the single-text path against the old one.

What it measures, in one process, the variants interleaved (all see the same load):

- before: the old call path, rebuilt here: ``encode_batch``, sort by token count, pad
  and run as a batch of one, on a session made with the old options;
- after: ``OnnxEmbedder.embed``: ``encode``, no sort or padding, constant mask rows;
- the session options tried against the default, each on the new call path:
  ``1 thread``, ``no spinning`` (``session.intra_op.allow_spinning=0``) and
  ``spin stops`` (``session.force_spinning_stop=1``: pool threads stop spinning when
  a run returns instead of some 40 ms later).

The others have one intra-op thread per available core (``--threads`` to change).

1. back to back: 200 distinct short questions (SciFact claims of 5 to 20 words, as
   ``Memory.search`` embeds a user's question), one call each, in blocks of 20 that
   the variants take in turns (the order rotates), a pause after each block.
   Latency p50/p99; CPU per query is the process's CPU time over a block and its
   pause (spinning included) divided by the block's queries.
2. sporadic: one query, then 100 ms of quiet (a question now and then), 50 questions
   per variant in turns. Latency p50, and CPU per query with its quiet: what one
   search's embedding costs the machine.
3. batch throughput of 1,000 WordNet glosses, old call path against ``embed_batch``,
   alternating, median of the runs: the batch path must not be slower.

Every variant must return the old path's vectors (within 1e-6). Figures move with
the machine's load: the script prints the load average before and after.

    python benches/bench_query_embed.py [--queries 200] [--rounds 5] [--batch-rounds 5]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from _data import SHARED_DATA, DataUnavailableError, wordnet_texts
from _timing import percentiles
from memlane.embeddings import OnnxEmbedder, _model_files, _onnx
from memlane.embeddings._base import check_text

Vectors = npt.NDArray[np.float32]
Embed = Callable[[list[str]], Vectors]

SCIFACT = SHARED_DATA / "scifact" / "queries.jsonl"
BLOCK = 20
# Longer than the default session's spinning after a run (about 40 ms).
PAUSE = 0.1
SPORADIC = 50


def short_questions(n: int) -> list[str]:
    """The first ``n`` distinct SciFact claims of 5 to 20 words, in file order."""
    if not SCIFACT.is_file():
        raise DataUnavailableError(
            f"SciFact queries not found at {SCIFACT} (expected ../shared/data/ beside the repo)"
        )
    seen: dict[str, None] = {}
    with SCIFACT.open(encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"].strip()
            if 5 <= len(text.split()) <= 20:
                seen.setdefault(text)
            if len(seen) == n:
                break
    if len(seen) < n:
        raise DataUnavailableError(f"{SCIFACT} has only {len(seen)} claims of 5 to 20 words")
    return list(seen)


def session(threads: int, **config: str) -> Any:
    """A session made with the old ``_onnx._load_session`` options, plus ``config`` entries."""
    import onnxruntime as ort

    model = _model_files._package_file(
        _model_files.MODEL_PACKAGE, _model_files.MODEL_FILE, _model_files.MODEL_INSTALL
    )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = False
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )


def old_path(embedder: OnnxEmbedder, sess: Any) -> Embed:
    """The call path every text took before the single-text path, on ``sess``."""
    tokenizer = embedder._tokenizer

    def embed(texts: list[str]) -> Vectors:
        texts = [check_text(t) for t in texts]
        out = np.empty((len(texts), embedder.dimension), dtype=np.float32)
        encodings = tokenizer.encode_batch(texts)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.intp, count=len(texts))
        order = np.argsort(lengths, kind="stable")
        for batch in _onnx._batches(lengths[order].tolist(), 64, _onnx._BATCH_TOKENS):
            rows = order[batch]
            width = int(lengths[rows].max())
            input_ids = np.zeros((len(rows), width), dtype=np.int64)
            for row, i in enumerate(rows):
                input_ids[row, : lengths[i]] = encodings[i].ids
            mask = (np.arange(width) < lengths[rows][:, None]).astype(np.int64)
            feeds = {
                "input_ids": input_ids,
                "attention_mask": mask,
                "token_type_ids": np.zeros_like(input_ids),
            }
            (hidden,) = sess.run(["last_hidden_state"], feeds)
            out[rows] = _onnx._mean_pool_normalised(hidden, mask)
        return out

    return embed


def _median(values: list[float]) -> float:
    return float(np.median(values))


def _turns(labels: list[str], turn: int) -> list[str]:
    """``labels`` rotated by ``turn``: each variant goes first as often as the others."""
    k = turn % len(labels)
    return labels[k:] + labels[:k]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=200, help="distinct short questions")
    parser.add_argument("--rounds", type=int, default=5, help="back-to-back passes")
    parser.add_argument("--batch-texts", type=int, default=1000, help="glosses per batch")
    parser.add_argument("--batch-rounds", type=int, default=5, help="batch runs per path")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (cores)")
    args = parser.parse_args()

    questions = short_questions(args.queries)
    try:
        glosses = random.Random(0).sample(wordnet_texts(), args.batch_texts)
    except DataUnavailableError as e:
        print(f"skipping batch throughput: {e}")
        glosses = []

    after = OnnxEmbedder(threads=args.threads)
    threads = after._threads
    before = old_path(after, session(threads))
    contenders: dict[str, Any] = {
        "1 thread": session(1),
        "no spinning": session(threads, **{"session.intra_op.allow_spinning": "0"}),
        "spin stops": session(threads, **{"session.force_spinning_stop": "1"}),
    }
    paths: dict[str, Callable[[str], Vectors]] = {
        "before": lambda text: before([text])[0],
        "after": after.embed,
    }
    for label, sess in contenders.items():
        variant = copy.copy(after)  # the new call path on another session
        variant._session = sess
        paths[label] = variant.embed

    # Same vectors everywhere, and a warm-up for every session.
    reference = before(questions)
    for label, embed in paths.items():
        drift = float(np.abs(np.stack([embed(q) for q in questions]) - reference).max())
        assert drift <= 1e-6, f"{label} returns other vectors (max difference {drift})"
    if glosses:
        drift = float(np.abs(after.embed_batch(glosses[:256]) - before(glosses[:256])).max())
        assert drift <= 1e-6, f"embed_batch returns other vectors (max difference {drift})"

    tokens = after.count_tokens(questions)
    print(
        f"{after!r}, load average {os.getloadavg()[0]:.2f}\n"
        f"{len(questions)} questions, {np.median(tokens):.0f} tokens median (max {max(tokens)}); "
        f"all variants return the old path's vectors (within 1e-6)"
    )

    labels = list(paths)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    cpu = dict.fromkeys(labels, 0.0)
    blocks = [questions[i : i + BLOCK] for i in range(0, len(questions), BLOCK)]
    turn = 0
    for _ in range(args.rounds):
        for block in blocks:
            for label in _turns(labels, turn):
                embed = paths[label]
                cpu_start = time.process_time()
                for text in block:
                    start = time.perf_counter()
                    embed(text)
                    samples[label].append(time.perf_counter() - start)
                time.sleep(PAUSE)
                cpu[label] += time.process_time() - cpu_start
            turn += 1
    base_p50, base_p99 = percentiles(samples["before"])
    print(f"\n1. back to back, {args.rounds} rounds in blocks of {BLOCK}")
    for label, times in samples.items():
        p50, p99 = percentiles(times)
        print(
            f"  {label:12} p50 {p50:6.2f} ms ({p50 / base_p50:4.2f}x)  "
            f"p99 {p99:6.2f} ms ({p99 / base_p99:4.2f}x)  "
            f"CPU {cpu[label] / len(times) * 1e3:6.2f} ms/query"
        )

    sporadic: dict[str, list[float]] = {label: [] for label in labels}
    sporadic_cpu: dict[str, list[float]] = {label: [] for label in labels}
    for i, text in enumerate(questions[:SPORADIC]):
        for label in _turns(labels, i):
            cpu_start, start = time.process_time(), time.perf_counter()
            paths[label](text)
            sporadic[label].append(time.perf_counter() - start)
            time.sleep(PAUSE)
            sporadic_cpu[label].append(time.process_time() - cpu_start)
    base = _median(sporadic["before"])
    print(f"\n2. sporadic: one query, then {PAUSE * 1e3:.0f} ms of quiet; {SPORADIC} queries")
    for label, times in sporadic.items():
        p50 = _median(times)
        print(
            f"  {label:12} p50 {p50 * 1e3:6.2f} ms ({p50 / base:4.2f}x)  "
            f"CPU {_median(sporadic_cpu[label]) * 1e3:6.2f} ms/query with its quiet"
        )

    if glosses:
        batch_paths: dict[str, Embed] = {"before": before, "after": after.embed_batch}
        rates: dict[str, list[float]] = {label: [] for label in batch_paths}
        cpu_rates: dict[str, list[float]] = {label: [] for label in batch_paths}
        for run in range(args.batch_rounds):
            for label in _turns(list(batch_paths), run):
                time.sleep(PAUSE)
                cpu_start, start = time.process_time(), time.perf_counter()
                batch_paths[label](glosses)
                rates[label].append(len(glosses) / (time.perf_counter() - start))
                cpu_rates[label].append(len(glosses) / (time.process_time() - cpu_start))
        base = _median(rates["before"])
        print(f"\n3. batch of {len(glosses)} WordNet glosses, median of {args.batch_rounds}")
        for label, values in rates.items():
            rate = _median(values)
            print(
                f"  {label:12} {rate:6.0f} texts/s ({rate / base:4.2f}x)  "
                f"{_median(cpu_rates[label]):6.0f} texts/CPU-s"
            )
    print(f"\nload average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
