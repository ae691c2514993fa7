"""Core memory edits under contention, on both backends: every append that threads make at
once to one block with room to spare lands, none is refused. An edit is embedded between its
read and its commit, so another writer nearly always commits first; an edit that lost was
tried again at once, behind the writer that beat it, and after 32 losses in a row it was
refused (``ConflictError``, reported to the model as a ``store_error``), which four threads
appending to one block met a few times in 160 appends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.agent import CoreMemory, MemoryTools

SCOPE = {"user_id": "alice", "agent_id": "helper"}
THREADS, APPENDS = 4, 25


class MeddlingEmbedder(WordHashEmbedder):
    """Runs the calling thread's ``meddle`` (if set) before each embedding it makes, once
    per embedding, never within itself: another writer commits while that thread's edit is
    embedded, as a writer in another process may, every time."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def embed_batch(self, texts: Sequence[str]) -> Any:
        meddle: Callable[[], bool] | None = getattr(self.local, "meddle", None)
        if meddle is not None:
            self.local.meddle = None  # the meddling writer's own edit is embedded plainly
            try:
                again = meddle()
            finally:
                self.local.meddle = meddle if again else None
        return super().embed_batch(list(texts))


def _append_at_once(
    mem: Memory, embedder: MeddlingEmbedder, first: Callable[[], bool] | None = None
) -> list[dict[str, Any]]:
    """``THREADS`` threads each making ``APPENDS`` appends to block ``human`` through the
    model's tool; ``first`` meddles with the embeddings of thread 0. The failed results."""
    failed: list[dict[str, Any]] = []
    start = threading.Barrier(THREADS, timeout=60)

    def appending(worker: int) -> None:
        tools = MemoryTools(mem, SCOPE, core=CoreMemory(mem, SCOPE))
        start.wait()
        if worker == 0:
            embedder.local.meddle = first
        for i in range(APPENDS):
            call = {"label": "human", "content": f"fact {worker}.{i}"}
            result = tools.handle_tool_call("core_memory_append", call)
            if not result["ok"]:
                failed.append(result["error"])

    threads = [threading.Thread(target=appending, args=(w,)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed


def _check_block(mem: Memory, also: Sequence[str] = ()) -> None:
    """Every append is in the block once, each thread's in its order, and nothing else."""
    lines = CoreMemory(mem, SCOPE).get("human").value.split("\n")
    made = [f"fact {w}.{i}" for w in range(THREADS) for i in range(APPENDS)]
    assert sorted(lines) == sorted([*made, *also])
    for w in range(THREADS):
        mine = [line for line in lines if line.startswith(f"fact {w}.")]
        assert mine == [f"fact {w}.{i}" for i in range(APPENDS)]


def test_threads_appending_at_once_all_land(make_store: StoreFactory) -> None:
    embedder = MeddlingEmbedder()
    mem = make_store("contention", embedder)
    CoreMemory(mem, SCOPE).define("human", limit=100_000)
    assert _append_at_once(mem, embedder) == []
    _check_block(mem)


def test_an_append_beaten_more_than_32_times_in_a_row_still_lands(
    make_store: StoreFactory,
) -> None:
    """While thread 0's first append is embedded, another agent's append commits, 40 times
    over (the edit is applied again each time to what it left), and the other threads append
    at once: the append lands once that agent is done, and so do all the others."""
    embedder = MeddlingEmbedder()
    mem = make_store("beaten", embedder)
    CoreMemory(mem, SCOPE).define("human", limit=100_000)
    other = CoreMemory(mem, SCOPE)  # another process's, as far as this one can tell
    meddled: list[str] = []

    def meddle() -> bool:
        meddled.append(f"other {len(meddled)}")
        other.append("human", meddled[-1])
        return len(meddled) < 40

    assert _append_at_once(mem, embedder, meddle) == []
    assert len(meddled) == 40
    _check_block(mem, meddled)
    versions = mem.history(CoreMemory(mem, SCOPE).get("human").id)
    assert len(versions) == 1 + THREADS * APPENDS + 40  # the block as defined, one per append


def test_an_edit_stuck_in_its_embedding_holds_up_no_other_block(make_store: StoreFactory) -> None:
    # One block's edit that lost once took the turn and hung in its embedding (a stuck
    # request to an embedding API): every edit of every other block of the scope waited
    # 30 s for that turn. Turns are a block's own now.
    from memlane import edits

    release, stuck = threading.Event(), threading.Event()

    class Hangs(WordHashEmbedder):
        meddle: Callable[[], object] | None = None

        def embed_batch(self, texts: Sequence[str]) -> Any:
            if any("PERSONA-EDIT" in t for t in texts):
                if Hangs.meddle is not None:  # another writer commits first: it lost once
                    meddle, Hangs.meddle = Hangs.meddle, None
                    meddle()
                else:  # its try again, with the turn: it hangs
                    stuck.set()
                    release.wait(120)
            return super().embed_batch(list(texts))

    mem = make_store("stuck", Hangs())
    for label in ("persona", "human"):
        CoreMemory(mem, SCOPE).define(label, limit=100_000)
    Hangs.meddle = lambda: CoreMemory(mem, SCOPE).append("persona", "another writer")
    hung = threading.Thread(target=lambda: CoreMemory(mem, SCOPE).append("persona", "PERSONA-EDIT"))
    hung.start()
    try:
        assert stuck.wait(60)
        tools = MemoryTools(mem, SCOPE, core=CoreMemory(mem, SCOPE))
        call = {"label": "human", "content": "likes tea"}
        assert tools.handle_tool_call("core_memory_append", call)["ok"]
        assert not release.is_set() and hung.is_alive()  # made while the other hung
        assert {key[-1] for key in edits._writers} == {"persona"}  # a block's own turn
    finally:
        release.set()
        hung.join(60)
    assert "likes tea" in CoreMemory(mem, SCOPE).get("human").value
