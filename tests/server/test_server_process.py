"""memlane serve as a process: another client follows an agent's changes through the
event stream, and two servers over one PostgreSQL store serve the same data."""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from pg_server import PgServer
from server_process import ServeProcess


def follow(url: str, into: queue.Queue[Any], ready: threading.Event) -> None:
    """Puts each event of the stream at ``url`` into ``into`` (type, data), until the
    server stops."""
    try:
        with httpx.stream("GET", url, timeout=httpx.Timeout(60, read=None)) as r:
            kind = None
            for line in r.iter_lines():
                if line.startswith(": following"):
                    ready.set()
                elif line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    into.put((kind, json.loads(line[6:])))
    except httpx.RemoteProtocolError:
        pass  # the server stopped mid-stream, as it does at the end of the test


def test_another_client_follows_adds_supersedes_and_deletes(tmp_path: Path) -> None:
    with ServeProcess(tmp_path / "s", "--create", "--embedder", "none") as server:
        events: queue.Queue[Any] = queue.Queue()
        ready = threading.Event()
        threading.Thread(
            target=follow,
            args=(f"{server.url}/v1/events?user_id=alice", events, ready),
            daemon=True,
        ).start()
        assert ready.wait(60)
        with httpx.Client(base_url=server.url, timeout=60) as c:
            c.post("/v1/memories", json={"text": "Bob likes jazz", "user_id": "bob"})
            first = c.post("/v1/memories", json={"text": "Alice is 30", "user_id": "alice"})
            old = first.json()["id"]
            new = c.post(f"/v1/memories/{old}/supersede", json={"text": "Alice is 31"}).json()
            c.delete(f"/v1/memories/{new['id']}")
        got = [events.get(timeout=60) for _ in range(3)]
        assert [(k, e["id"], e["record"]["text"]) for k, e in got] == [
            ("add", old, "Alice is 30"),
            ("supersede", new["id"], "Alice is 31"),
            ("delete", new["id"], "Alice is 31"),
        ]
        assert got[1][1]["supersedes"] == old
        assert events.empty()  # bob's add was not Alice's


def test_two_servers_over_one_postgresql_store_serve_the_same_data(
    pg_server: PgServer, tmp_path: Path
) -> None:
    url = pg_server.url(schema="served_twice")
    first = ServeProcess(url, "--embedder", "none")
    with first, ServeProcess(url, "--embedder", "none") as second:
        a = httpx.Client(base_url=first.url, timeout=60)
        b = httpx.Client(base_url=second.url, timeout=60)
        added = a.post("/v1/memories", json={"text": "the deploy key rotates on Fridays"})
        assert added.status_code == 201
        # The second server follows the store's change log (LISTEN/NOTIFY and polling):
        # it may see the add a moment later, never a different one.
        deadline = time.monotonic() + 60
        while True:
            hits = b.post("/v1/search", json={"query": "deploy key", "mode": "text"}).json()
            if hits["hits"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert [h["record"]["id"] for h in hits["hits"]] == [added.json()["id"]]
        assert b.get(f"/v1/memories/{added.json()['id']}").status_code == 200
        b.delete(f"/v1/memories/{added.json()['id']}")
        assert a.get(f"/v1/memories/{added.json()['id']}").status_code == 404  # read from the db
        a.close()
        b.close()


def test_max_streams_flag_bounds_the_streams_served(tmp_path: Path) -> None:
    """``memlane serve --max-streams 1``: a second follower is refused (503) while the
    first follows, and served once it has gone."""
    with ServeProcess(
        tmp_path / "s", "--create", "--embedder", "none", "--max-streams", "1"
    ) as server:
        events: queue.Queue[Any] = queue.Queue()
        ready = threading.Event()
        url = f"{server.url}/v1/events?user_id=alice"
        stream = httpx.stream("GET", url, timeout=httpx.Timeout(60, read=None))
        first = stream.__enter__()
        try:
            assert first.status_code == 200
            second = httpx.get(url, timeout=60)
            assert second.status_code == 503
            assert second.json()["error"] == {
                "type": "ServiceUnavailable",
                "message": "this server serves at most 1 event stream at once, and all are "
                "taken; try again later",
            }
        finally:
            stream.__exit__(None, None, None)
        # The slot comes back once the server sees the first follower gone.
        deadline = time.monotonic() + 60
        threading.Thread(target=follow, args=(url, events, ready), daemon=True).start()
        while not ready.wait(0.2):
            assert time.monotonic() < deadline
