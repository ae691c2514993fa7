"""A writer process stopped inside its transaction (SIGSTOP, a debugger, a frozen VM)
holds the change counter's row lock: before, every other writer of the PostgreSQL store
waited for it for good. The server now ends such a session once it has sat idle in its
transaction for ``IDLE_IN_TRANSACTION_SECONDS`` (shortened here), undoing its write, and
the others go on; the stopped writer, let go, gets a ``StorageError``. A re-embedding,
which runs the model inside its one transaction, lifts the bound for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.storage import pg_schema
from pg_server import PgServer

# A bound for a hang, far beyond the shortened timeout; not a latency the test asserts.
HANG = 120.0

STOPPED = textwrap.dedent(
    """
    import os, signal, sys
    import memlane.storage.postgres as pg
    from memlane.storage import pg_schema
    pg_schema.IDLE_IN_TRANSACTION_SECONDS = 1
    from memlane import Memory, StorageError
    mem = Memory(sys.argv[1], None, cache_dir=sys.argv[2])
    insert = pg.PostgresStore.insert

    def stopped(self, conn, rows):
        # The change counter's row is locked by now (next_seq): stop holding it.
        print("stopping", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        return insert(self, conn, rows)

    pg.PostgresStore.insert = stopped
    try:
        mem.add("the stopped writer's note")
        print("stored", flush=True)
    except StorageError as e:
        print("refused:", e, flush=True)
    """
)


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads a process's state in /proc")
def test_a_writer_stopped_in_its_transaction_holds_the_others_up_no_longer(
    pg_server: PgServer, tmp_path: Path
) -> None:
    location = pg_server.url(schema="stopped_writer")
    mem = Memory(location, None, cache_dir=tmp_path / "main")
    mem.add("a first note")
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPED, location, str(tmp_path / "writer")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "stopping"
        start = time.monotonic()
        while not stopped(proc.pid):
            assert time.monotonic() - start < HANG
            time.sleep(0.01)
        done = threading.Event()

        def write() -> None:
            mem.add("the other writer's note")
            done.set()

        threading.Thread(target=write, daemon=True).start()
        assert done.wait(HANG), "the other writer waited for the stopped one"
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out.startswith("refused:"), out
    texts = sorted(r.text for r in mem.list(limit=10))
    assert texts == ["a first note", "the other writer's note"]
    mem.close()


class SlowEmbedder(WordHashEmbedder):
    """Takes longer than the shortened bound over each batch it embeds."""

    def embed_batch(self, texts: Sequence[str]) -> Any:
        time.sleep(2.5)
        return super().embed_batch(texts)


def test_a_re_embedding_sits_idle_in_its_transaction_as_long_as_the_model_runs(
    pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening with another embedder (``reembed=True``) embeds every text inside one
    transaction: the bound is lifted for it, so a model slower than the bound still
    re-embeds the store (before the lift, the server ended the session mid-way)."""
    monkeypatch.setattr(pg_schema, "IDLE_IN_TRANSACTION_SECONDS", 1)
    location = pg_server.url(schema="slow_reembed")
    with Memory(location, None, cache_dir=tmp_path / "a") as mem:
        mem.add_many([{"text": f"note {i} about foxes"} for i in range(3)])
    with Memory(location, SlowEmbedder(), cache_dir=tmp_path / "b", reembed=True) as mem:
        hits = mem.search("foxes", mode="vector")
        assert len(hits) == 3
