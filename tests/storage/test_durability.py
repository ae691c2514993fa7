"""A write that returned survives `kill -9`: a writer process is killed at random instants,
mid-transaction, mid-snapshot or mid-indexing, and every reopen must hold every acknowledged
write and an index consistent with the database. On PostgreSQL, a process following the
writer must end up holding the same."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import TESTS, StoreFactory, WordHashEmbedder
from memlane import Memory

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs kill -9")

WRITER = textwrap.dedent(
    """
    import random, sys
    sys.path.insert(0, sys.argv[3])
    from conftest import StoreFactory, WordHashEmbedder
    from memlane import Memory

    rng = random.Random(int(sys.argv[2]))
    mem = Memory(sys.argv[1], WordHashEmbedder(), snapshot_every=40, dedup_window=0)
    live = [r.id for r in mem.list(limit=10**6)]
    print("READY", flush=True)
    n = 0
    while True:
        n += 1
        roll = rng.random()
        if roll < 0.5:
            r = mem.add(f"note {sys.argv[2]}-{n} about topic {n % 17}", agent_id=f"a{n % 3}")
            live.append(r.id)
            print("ADD", r.id, flush=True)
        elif roll < 0.8:
            items = [{"text": f"batch {sys.argv[2]}-{n}-{i} topic {i}"} for i in range(70)]
            recs = mem.add_many(items)
            live.extend(r.id for r in recs)
            print("ADD", *[r.id for r in recs], flush=True)
        elif roll < 0.9 and live:
            victim = live.pop(rng.randrange(len(live)))
            print("DELETING", victim, flush=True)
            mem.delete(victim)
            print("DEL", victim, flush=True)
        elif live:
            target = rng.choice(live)
            print("UPDATING", target, n, flush=True)
            mem.update(target, text=f"updated {n}", importance=0.9)
            print("UPD", target, n, flush=True)
        if rng.random() < 0.3:
            mem.search("topic", k=3)
    """
)


def _run_and_kill(store: str | Path, script: Path, seed: int, tests_dir: Path) -> list[list[str]]:
    proc = subprocess.Popen(
        [sys.executable, str(script), str(store), str(seed), str(tests_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.strip() == "READY", proc.stderr.read() if proc.stderr else ""
    # Killed once it acknowledged as many writes as the seed says, wherever it then is
    # (a write, a snapshot, the linking): a count, not a time, so that a loaded machine
    # kills it as far in as an idle one.
    lines: list[str] = []
    acknowledged, kill_at = 0, random.Random(seed).randint(30, 120)
    while acknowledged < kill_at:
        if not (line := proc.stdout.readline()):
            break  # it died: its exit code says how, below
        lines.append(line)
        acknowledged += line.split()[0] in ("ADD", "DEL", "UPD")
    os.kill(proc.pid, signal.SIGKILL)
    # The rest through the reader that read READY: communicate() reads the raw pipe and
    # drops what readline() had buffered, acknowledged writes among it.
    out = "".join(lines) + proc.stdout.read()
    err = proc.stderr.read() if proc.stderr else ""
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err
    # A line cut by the kill was never acknowledged.
    return [line.split() for line in out.splitlines(keepends=True) if line.endswith("\n")]


def test_kill_9_loses_no_acknowledged_write(tmp_path: Path, make_store: StoreFactory) -> None:
    store = make_store.location("store")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    tests_dir = TESTS
    alive: set[str] = set()
    updated: dict[str, str] = {}
    # On PostgreSQL, another process follows the writer throughout.
    follower = None
    if make_store.backend == "postgres":
        follower = Memory(store, WordHashEmbedder(), dedup_window=0, track_access=False)
    for seed in range(4):
        # The one write in flight at the kill (announced, never acknowledged) may or
        # may not have happened.
        in_flight_delete: str | None = None
        in_flight_update: tuple[str, str] | None = None
        for parts in _run_and_kill(store, script, seed, tests_dir):
            if not parts:
                continue
            kind, *rest = parts
            in_flight_delete = rest[0] if kind == "DELETING" else None
            in_flight_update = (rest[0], f"updated {rest[1]}") if kind == "UPDATING" else None
            if kind == "ADD":
                alive.update(rest)
            elif kind == "DEL":
                alive.discard(rest[0])
                updated.pop(rest[0], None)
            elif kind == "UPD":
                updated[rest[0]] = f"updated {rest[1]}"
        emb = WordHashEmbedder()
        if follower is not None:
            # A process that watched the writer die holds what the database holds.
            wait_for_follower(follower)
        with make_store("store", emb, dedup_window=0) as mem:
            records = {r.id: r for r in mem.list(limit=10**6)}
            # The database agrees with the index.
            assert mem._db.count() == len(records)
            # Every acknowledged add is there, every acknowledged delete is not;
            # at most the one write in flight at the kill may be extra (or missing).
            if in_flight_delete is not None and in_flight_delete not in records:
                alive.discard(in_flight_delete)
                updated.pop(in_flight_delete, None)
            assert alive <= set(records)
            assert len(set(records) - alive) <= 70
            for rid, text in updated.items():
                maybe = (
                    in_flight_update[1] if in_flight_update and in_flight_update[0] == rid else None
                )
                assert records[rid].text in (text, maybe)
            if in_flight_update is not None and in_flight_update[0] in records:
                updated[in_flight_update[0]] = records[in_flight_update[0]].text
            # The index agrees with the database.
            assert len(mem) == len(records) == mem.count()
            sample = random.Random(seed).sample(sorted(alive), min(25, len(alive)))
            for rid in sample:
                rec = records[rid]
                by_text = mem.search(rec.text, k=100, mode="text", track_access=False)
                assert rid in {h.record.id for h in by_text}
                # Restricted to the records written with it (a handful), the graph is
                # scanned exactly: this checks the index's content, not HNSW recall.
                by_vector = mem.search(
                    rec.text,
                    k=5,
                    mode="vector",
                    query_embedding=emb.embed(rec.text),
                    start=rec.created_at,
                    end=float(np.nextafter(rec.created_at, np.inf)),
                    track_access=False,
                    explain=True,
                )
                mine = [h.explain for h in by_vector if h.record.id == rid]
                assert mine and mine[0] is not None
                # The index holds this very vector (f16-accurate by default).
                assert mine[0]["cosine"] == pytest.approx(1.0, abs=2e-3)
            alive = set(records)  # adopt what an unacknowledged write left
            if follower is not None:
                assert {r.id: r.text for r in follower.list(limit=10**6)} == {
                    rid: r.text for rid, r in records.items()
                }
                for rid in sample:
                    hits = follower.search(records[rid].text, k=100, mode="text")
                    assert rid in {h.record.id for h in hits}
    if follower is not None:
        follower.close()
    assert len(alive) > 100


def wait_for_follower(mem: Memory, timeout: float = 30.0) -> None:
    """Until ``mem`` has applied every change committed so far."""
    target = mem._db.seq()
    start = time.perf_counter()
    while mem._sync.seq < target:
        assert time.perf_counter() - start < timeout, (mem._sync.seq, target)
        time.sleep(0.01)


def test_embeddings_in_the_database_rebuild_the_index(tmp_path: Path) -> None:
    emb = WordHashEmbedder()
    with Memory(tmp_path / "s", emb) as mem:
        recs = mem.add_many([{"text": f"entry {i} of many"} for i in range(200)])
    import shutil

    shutil.rmtree(tmp_path / "s" / "index")
    with pytest.warns(RuntimeWarning), Memory(tmp_path / "s", emb) as mem:
        v = emb.embed("entry 42 of many")
        hit = mem.search("x", mode="vector", query_embedding=v, k=1, track_access=False)
        assert hit[0].record.id == recs[42].id
        stored = mem.get(recs[42].id, include_embedding=True).embedding
        assert stored is not None
        # Kept in half floats over the largest component (the index holds no more).
        np.testing.assert_allclose(stored, v, rtol=0, atol=float(np.abs(v).max()) * 2**-11)


def test_exit_without_close_is_clean(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[2])
        from conftest import StoreFactory, WordHashEmbedder
        from memlane import Memory

        mem = Memory(sys.argv[1], WordHashEmbedder())
        mem.add_many([{"text": f"parting note {i}"} for i in range(3000)])
        # No close(): the interpreter exits while the store links vectors.
        """
    )
    tests_dir = TESTS
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "s"), str(tests_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    with Memory(tmp_path / "s", WordHashEmbedder()) as mem:
        assert len(mem) == 3000
