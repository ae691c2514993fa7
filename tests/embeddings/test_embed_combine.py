"""Single texts asked by several threads at once are embedded in one model run
(memlane.embeddings._combine, used by OnnxEmbedder.embed), with the vectors each would
get alone, each caller getting its own."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory
from memlane.embeddings import OnnxEmbedder
from memlane.embeddings._combine import Combiner, in_lanes
from memlane.errors import InvalidArgumentError

# Distinct topics, of 3 to 40 tokens: a batch of them is padded to its longest.
TEXTS = [
    "ok",
    "Alice keeps bees on the roof of her flat",
    "The quarterly report is due on the first Monday of April",
    "Deploy the service with docker compose and restart the worker",
    "My sister's cat is called Pepper and hates the vacuum cleaner",
    "Bob is allergic to peanuts, so order the curry without them",
    "The train to Lyon leaves at seven from platform four",
    "Water the tomatoes twice a week in summer and once in winter, "
    "more often when the leaves curl, less when it rains",
    "Jazz records from the fifties",
    "Refactor the billing module before the audit in November",
    "The wifi password is written on the back of the router",
    "Carol prefers tea to coffee in the afternoon",
]


def wait_until(check: Callable[[], bool], what: str) -> None:
    """Polls ``check`` until it holds; the deadline only stops a test that would hang."""
    deadline = time.monotonic() + 60
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


class GatedSession:
    """The embedder's real onnxruntime session, counting the texts of each run; the
    first run waits for ``gate``, so the other threads' texts queue behind it."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.gate = threading.Event()
        self.runs: list[int] = []
        self.threads: set[int] = set()
        self.lock = threading.Lock()

    def run(self, outputs: Any, feeds: dict[str, np.ndarray]) -> Any:
        with self.lock:
            self.runs.append(len(feeds["input_ids"]))
            self.threads.add(threading.get_ident())
            first = len(self.runs) == 1
        if first:
            assert self.gate.wait(60)
        return self.session.run(outputs, feeds)


def queued(embedder: OnnxEmbedder) -> int:
    """Texts waiting for the run in flight."""
    return len(embedder._combined._waiting)


def concurrently(
    work: Callable[[int], Any], n: int, gated: GatedSession, embedder: OnnxEmbedder
) -> list[Any]:
    """``work(0)`` starts the first run, which waits until ``work(1..n-1)`` have queued
    their texts behind it; the results in the order of ``i``."""
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            results[i] = work(i)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    threads[0].start()
    wait_until(lambda: len(gated.runs) == 1, "the first run")
    for t in threads[1:]:
        t.start()
    wait_until(lambda: queued(embedder) == n - 1, "the other texts to queue")
    gated.gate.set()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> tuple[OnnxEmbedder, GatedSession]:
    embedder = OnnxEmbedder(threads=1)  # one run at a time: the others queue
    session = GatedSession(embedder._session)
    monkeypatch.setattr(embedder, "_session", session)
    return embedder, session


def test_texts_asked_together_share_one_run_with_the_vectors_each_gets_alone(
    gated: tuple[OnnxEmbedder, GatedSession],
) -> None:
    embedder, session = gated
    alone = OnnxEmbedder()
    expected = [alone.embed(text) for text in TEXTS]
    got = concurrently(lambda i: embedder.embed(TEXTS[i]), len(TEXTS), session, embedder)
    # The first text alone, then the others in runs of 8, each padded to its longest.
    assert session.runs == [1, 8, len(TEXTS) - 9]
    for text, vector, want in zip(TEXTS, got, expected, strict=True):
        assert vector.shape == (384,)
        np.testing.assert_allclose(vector, want, rtol=0, atol=1e-5, err_msg=text)


def test_concurrent_searches_each_get_their_own_hits(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = OnnxEmbedder(threads=1)
    mem = make_store("combined", embedder)
    mem.add_many([{"text": t, "id": str(i)} for i, t in enumerate(TEXTS)])
    # Not the stored texts, which the embedding cache would answer without the model.
    questions = [f"{t}?" for t in TEXTS]
    alone = OnnxEmbedder()
    expected = [
        mem.search("", 5, mode="vector", query_embedding=alone.embed(q), track_access=False)
        for q in questions
    ]
    session = GatedSession(embedder._session)
    monkeypatch.setattr(embedder, "_session", session)

    def search(i: int) -> Any:
        return mem.search(questions[i], 5, mode="vector", track_access=False)

    got = concurrently(search, len(questions), session, embedder)
    assert session.runs == [1, 8, len(questions) - 9]
    for i, (hits, want) in enumerate(zip(got, expected, strict=True)):
        assert hits[0].record.id == str(i)
        assert [h.record.id for h in hits] == [h.record.id for h in want]
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in want], atol=1e-5)


def test_a_failed_run_is_run_again_text_by_text_so_a_failure_is_its_texts_own(
    gated: tuple[OnnxEmbedder, GatedSession],
) -> None:
    # A text the model failed on (a NaN its tokens make, say) failed every text that
    # shared its run: on a server, one user's question failed the others' searches.
    embedder, session = gated
    real = session.session
    poison = np.array(embedder._tokenizer.encode(TEXTS[1]).ids)

    class Broken:
        def run(self, outputs: Any, feeds: dict[str, np.ndarray]) -> Any:
            ids = feeds["input_ids"]
            if any(np.array_equal(row[: len(poison)], poison) for row in ids):
                raise RuntimeError("the model failed")
            return real.run(outputs, feeds)

    session.session = Broken()

    def embed(i: int) -> Any:
        try:
            return embedder.embed(TEXTS[i])
        except RuntimeError as e:
            return e

    got = concurrently(embed, 4, session, embedder)
    assert isinstance(got[1], RuntimeError) and "the model failed" in str(got[1])
    alone = OnnxEmbedder()
    for i in (0, 2, 3):
        np.testing.assert_allclose(got[i], alone.embed(TEXTS[i]), atol=1e-5)
    session.session = real
    np.testing.assert_allclose(embedder.embed(TEXTS[1]), alone.embed(TEXTS[1]), atol=1e-5)
    assert queued(embedder) == 0


def test_a_forked_child_embeds_while_a_thread_of_its_parent_held_a_lane() -> None:
    # The child's combiner kept the parent's taken lanes and queue: its embed waited
    # for a run no thread of the child would ever finish.
    entered, gate = threading.Event(), threading.Event()

    def run(items: list[int]) -> list[int]:
        if items == [1]:
            entered.set()
            assert gate.wait(60)
        return [x * 10 for x in items]

    combine: Combiner[int, int] = Combiner(run, lanes=1)
    holder = threading.Thread(target=combine, args=(1,))
    holder.start()
    assert entered.wait(60)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its own call ran
        signal.alarm(30)
        os._exit(0 if combine(2) == 20 else 1)
    _, status = os.waitpid(pid, 0)
    gate.set()
    holder.join()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_text_without_tokens_fails_its_caller_only(embedder: OnnxEmbedder) -> None:
    with pytest.raises(InvalidArgumentError, match="no tokens the model can read"):
        embedder.embed("\u200b\u200b")
    assert embedder.embed("ok").shape == (384,)


@pytest.fixture(scope="module")
def embedder() -> OnnxEmbedder:
    return OnnxEmbedder()


def test_combiner_runs_a_lane_each_then_batches_of_at_most_most() -> None:
    gate, batches, lock = threading.Event(), [], threading.Lock()

    def run(items: list[int]) -> list[int]:
        with lock:
            batches.append(list(items))
        if items[0] < 2:  # the two lanes' first runs wait until the others queued
            assert gate.wait(60)
        return [x * 10 for x in items]

    combine: Combiner[int, int] = Combiner(run, lanes=2, most=3)
    results: dict[int, int] = {}
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, combine(i))) for i in range(8)
    ]
    for t in threads[:2]:
        t.start()
    wait_until(lambda: len(batches) == 2, "both lanes' runs")
    for t in threads[2:]:
        t.start()
    wait_until(lambda: len(combine._waiting) == 6, "the others to queue")
    gate.set()
    for t in threads:
        t.join()
    assert results == {i: i * 10 for i in range(8)}
    assert sorted(map(len, batches)) == [1, 1, 3, 3]
    assert sorted(x for b in batches for x in b) == list(range(8))
    assert combine._free == 2 and not combine._waiting
    assert combine(9) == 90 and batches[-1] == [9]


def test_in_lanes_does_every_item_and_raises_the_first_error() -> None:
    done: list[int] = []
    in_lanes(done.append, list(range(50)), 3)
    assert sorted(done) == list(range(50))

    def fail_on_7(i: int) -> None:
        if i == 7:
            raise ValueError("seven")

    with pytest.raises(ValueError, match="seven"):
        in_lanes(fail_on_7, list(range(50)), 3)


def test_a_batch_call_spreads_its_runs_over_the_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [f"{t} ({i})" for i in range(12) for t in TEXTS]
    alone = OnnxEmbedder(threads=1)
    expected = alone.embed_batch(texts)
    embedder = OnnxEmbedder(threads=2)
    session = GatedSession(embedder._session)
    session.gate.set()
    monkeypatch.setattr(embedder, "_session", session)
    np.testing.assert_allclose(embedder.embed_batch(texts), expected, rtol=0, atol=1e-5)
    assert len(session.runs) >= 2 and sum(session.runs) == len(texts)
    assert len(session.threads) == 2
