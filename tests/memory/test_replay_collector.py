"""A large replay pauses the garbage collector for the process, and gives it back: by
threshold, so that what the caller does to the collector meanwhile stands, and so that a
child forked at any step of it collects again."""

from __future__ import annotations

import gc
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane._memory import collector, sync
from memlane.coerce import _vector_checks, usable_vectors


@pytest.fixture
def rebuilt(tmp_path: Path, word_embedder: WordHashEmbedder) -> Iterator[Path]:
    """A store of 300 memories whose snapshot is gone: the next open replays them all."""
    with Memory(tmp_path / "s", embedder=word_embedder) as mem:
        mem.add_many({"text": f"note {i} on kites"} for i in range(300))
    shutil.rmtree(tmp_path / "s" / "index")
    yield tmp_path / "s"


def _collecting() -> bool:
    return gc.isenabled() and gc.get_threshold()[0] > 0


def _watch_collector(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether automatic collection was on as each batch of a replay was applied."""
    seen: list[bool] = []
    apply = sync.IndexSync._apply_rows

    def watched(self: sync.IndexSync, *args: object) -> None:
        seen.append(_collecting())
        apply(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sync.IndexSync, "_apply_rows", watched)
    return seen


def test_a_large_replay_pauses_the_collector_and_turns_it_back_on(
    rebuilt: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync, "_PAUSE_COLLECTOR_ROWS", 100)
    seen = _watch_collector(monkeypatch)
    before = gc.get_threshold()
    assert gc.isenabled()
    with Memory(rebuilt, embedder=word_embedder) as mem:
        assert gc.isenabled() and gc.get_threshold() == before
        assert len(mem) == 300 and mem.search("note 7 on kites", k=1)[0].record.text == (
            "note 7 on kites"
        )
    # Batches of 4,096 rows: the one batch was counted before it was applied.
    assert seen == [False]


def test_a_collector_the_caller_turned_off_stays_off(
    rebuilt: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync, "_PAUSE_COLLECTOR_ROWS", 100)
    gc.disable()
    try:
        Memory(rebuilt, embedder=word_embedder).close()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_small_replay_leaves_the_collector_alone(
    rebuilt: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _watch_collector(monkeypatch)
    Memory(rebuilt, embedder=word_embedder).close()
    assert seen == [True]


def test_the_quick_check_of_stored_vectors_agrees_with_the_full_one() -> None:
    rng = np.random.default_rng(7)
    v = rng.standard_normal((500, 16)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v[:40] *= np.float32(10.0) ** rng.integers(-45, 39, 40)[:, None].astype(np.float32)
    v[40, 3] = np.nan
    v[41, 0] = np.inf
    v[42] = 0
    v[43] = 1e-45
    v[44] = 3e38
    v[45] = 1e-20
    v[46] = 1e18
    finite, nonzero, scalable, _ = _vector_checks(v)
    full = finite & nonzero & scalable
    assert not full[40:45].any() and full[45:47].all()
    assert (usable_vectors(v) == full).all()


def test_a_child_forked_during_a_replay_collects_again(
    rebuilt: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync, "_PAUSE_COLLECTOR_ROWS", 100)
    seen: list[int] = []
    apply = sync.IndexSync._apply_rows

    def forking(self: sync.IndexSync, *args: object) -> None:
        pid = os.fork()
        if pid == 0:
            os._exit(0 if _collecting() else 1)
        seen.append(os.waitpid(pid, 0)[1])
        apply(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sync.IndexSync, "_apply_rows", forking)
    Memory(rebuilt, embedder=word_embedder).close()
    assert seen == [0] and gc.isenabled()


def test_what_the_caller_does_to_the_collector_during_a_replay_stands(
    rebuilt: Path, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread's replay is paused mid-way while this one turns the collector off,
    then sets its own thresholds: both stand once the replay ends."""
    monkeypatch.setattr(sync, "_PAUSE_COLLECTOR_ROWS", 100)
    inside, go_on = threading.Event(), threading.Event()
    apply = sync.IndexSync._apply_rows

    def held(self: sync.IndexSync, *args: object) -> None:
        inside.set()
        assert go_on.wait(30)
        apply(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sync.IndexSync, "_apply_rows", held)
    before = gc.get_threshold()
    opened = threading.Thread(target=lambda: Memory(rebuilt, embedder=word_embedder).close())
    opened.start()
    try:
        assert inside.wait(30) and not _collecting()
        gc.disable()
        go_on.set()
        opened.join(30)
        assert not opened.is_alive()
        assert not gc.isenabled() and gc.get_threshold() == before
        # Thresholds the caller sets during a pause are not undone by its end either.
        with collector.paused():
            gc.set_threshold(500, before[1], before[2])
        assert gc.get_threshold() == (500, before[1], before[2])
    finally:
        go_on.set()
        gc.set_threshold(*before)
        gc.enable()


@pytest.mark.parametrize(
    ("pausers", "pause_set"),
    [
        (0, False),  # thresholds saved, the pause's not yet set; or given back, not forgotten
        (0, True),  # the pause's set, not yet counted; or the count back to 0, not given back
        (1, True),  # mid-pause
    ],
)
def test_a_child_forked_at_any_step_of_a_pause_collects_again(
    pausers: int, pause_set: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's handler, run on each state a fork can leave a pause in."""
    before = gc.get_threshold()
    monkeypatch.setattr(collector, "_pausers", pausers)
    monkeypatch.setattr(collector, "_saved", before)
    try:
        if pause_set:
            gc.set_threshold(0, *before[1:])
        collector.after_fork()
        assert gc.get_threshold() == before
        assert collector._saved is None and collector._pausers == 0
    finally:
        gc.set_threshold(*before)
