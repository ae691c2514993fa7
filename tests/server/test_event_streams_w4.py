"""GET /v1/events, driven on an event loop the test steps itself (the app called as an
ASGI app, the stream's body read as it is sent):

- a stream waits for its events: however many times the loop turns, a stream with
  nothing to send does no work (it looked at its queue every 50 ms before, so 4,000
  idle followers took a core from every other request), and one event wakes it;
- an app serves at most ``max_streams`` at once, and refuses more (503);
- a stream that fell behind gets the newest events after one ``lost`` event, and that
  event comes even when nothing is written after the burst.

Nothing here waits on the clock for what it asserts: the deadlines only stop a broken
stream from hanging the test."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import Memory
from memlane._memory.events import Subscription
from memlane.server import create_app
from memlane.server import stream as stream_module


@pytest.fixture
def mem(make_store: StoreFactory) -> Iterator[Memory]:
    m = make_store("streams")
    yield m
    m.close()


class Follower:
    """One ``GET /v1/events`` request to ``app``, run as a task of the running loop."""

    def __init__(self, app: Any, query: bytes = b"") -> None:
        self.sent: list[dict[str, Any]] = []
        self._gone = asyncio.Event()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/v1/events",
            "raw_path": b"/v1/events",
            "root_path": "",
            "query_string": query,
            "headers": [(b"host", b"127.0.0.1:8765")],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8765),
        }
        self.task = asyncio.ensure_future(app(scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def leave(self) -> None:
        self._gone.set()

    @property
    def status(self) -> int | None:
        starts = [m["status"] for m in self.sent if m["type"] == "http.response.start"]
        return starts[0] if starts else None

    @property
    def text(self) -> str:
        return b"".join(m.get("body", b"") for m in self.sent if "body" in m).decode()

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line[6:]) for line in self.text.split("\n") if line.startswith("data: ")]


async def until(ready: Callable[[], bool], limit: float = 30.0) -> bool:
    """Turns the loop until ``ready()`` (False after ``limit`` seconds: a guard only)."""
    deadline = time.monotonic() + limit
    while not ready():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.001)
    return True


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """Each look a subscription's reader takes at its queue (``get``), by its timeout."""
    seen: list[float | None] = []
    real = Subscription.get

    def counted(self: Subscription, timeout: float | None = None) -> Any:
        seen.append(timeout)
        return real(self, timeout)

    monkeypatch.setattr(Subscription, "get", counted)
    return seen


async def test_an_idle_stream_does_no_work_until_an_event_comes(
    mem: Memory, looks: list[float | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No pause between looks: a stream that looks on a timer looks at every turn.
    monkeypatch.setattr(stream_module, "POLL", 0)
    app = create_app(mem)
    follower = Follower(app)
    assert await until(lambda: ": following" in follower.text), follower.sent
    for _ in range(20):
        await asyncio.sleep(0)
    idle = len(looks)
    for _ in range(500):
        await asyncio.sleep(0)  # 500 turns of the loop, nothing written
    assert len(looks) == idle, f"an idle stream looked at its queue {len(looks) - idle} times"
    mem.add("Alice likes tea")
    assert await until(lambda: len(follower.events()) == 1), follower.text
    for _ in range(500):
        await asyncio.sleep(0)
    # Woken once: it read the event, found the queue empty, and waits again.
    assert len(looks) - idle <= 2, len(looks) - idle
    assert follower.events()[0]["record"]["text"] == "Alice likes tea"
    follower.leave()
    await asyncio.wait_for(follower.task, 30)
    assert not mem.events  # its subscription ended with it


async def test_streams_end_when_the_server_stops(mem: Memory) -> None:
    """As ``memlane serve`` stops them: its flag turns true (no event is written)."""
    stopped: list[bool] = []
    app = create_app(mem)
    app.state.stopping = lambda: bool(stopped)
    followers = [Follower(app) for _ in range(3)]
    assert await until(lambda: all(": following" in f.text for f in followers))
    stopped.append(True)
    await asyncio.wait_for(asyncio.gather(*(f.task for f in followers)), 30)
    for f in followers:
        assert f.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert not mem.events


async def test_an_app_serves_at_most_max_streams(mem: Memory) -> None:
    app = create_app(mem, max_streams=2)
    first, second = Follower(app), Follower(app)
    assert await until(lambda: ": following" in first.text and ": following" in second.text)
    third = Follower(app)
    await asyncio.wait_for(third.task, 30)
    assert third.status == 503
    assert json.loads(third.text)["error"]["type"] == "ServiceUnavailable"
    first.leave()
    await asyncio.wait_for(first.task, 30)
    fourth = Follower(app)  # a place came free
    assert await until(lambda: ": following" in fourth.text), fourth.sent
    second.leave()
    fourth.leave()
    await asyncio.wait_for(asyncio.gather(second.task, fourth.task), 30)
    assert not mem.events and app.state.followers.count == 0


def test_max_streams_is_checked(mem: Memory) -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(Exception, match="max_streams"):
            create_app(mem, max_streams=bad)  # type: ignore[arg-type]


async def test_a_stream_that_fell_behind_gets_the_newest_events(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_module, "QUEUE", 3)
    app = create_app(mem)
    follower = Follower(app)
    assert await until(lambda: ": following" in follower.text)
    # Written while the stream cannot read (the loop is busy here): 10 events, room for 3.
    mem.add_many([{"text": f"note {n}"} for n in range(10)])
    # Nothing is written after: the lost event must come anyway.
    await until(lambda: len(follower.events()) >= 4, limit=10)
    got = [e["count"] if e["type"] == "lost" else e["record"]["text"] for e in follower.events()]
    assert got == [7, "note 7", "note 8", "note 9"]
    assert "event: lost\n" in follower.text
    follower.leave()
    await asyncio.wait_for(follower.task, 30)
