"""The HTTP base of OpenAIEmbedder and OpenAIChat (memlane.openai_http) against a scripted
loopback server: retry counts, the waits (backoff, Retry-After, the cap), giving up, the
error type, timeouts and dropped connections, the async path, headers and closing."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import memlane.openai_http as openai_http
from memlane import EmbedderUnavailableError, InvalidArgumentError, MemlaneError, OpenAIEmbedder
from memlane.agent.llm import LLMError, OpenAIChat
from memlane.openai_http import MAX_WAIT, OpenAIHTTPClient

OK = {"status": 200, "body": '{"ok": true}'}


class ScriptServer:
    """Answers each POST with the next scripted reply: a dict of ``status`` (200),
    ``headers`` ({}) and ``body`` ("{}"), ``"drop"`` to close the connection unanswered,
    or ``"hang"`` to answer nothing until the server closes (the client times out,
    however loaded the machine). An empty script answers 200 ``{}``."""

    def __init__(self) -> None:
        self.script: deque[dict[str, Any] | str] = deque()
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.bodies: list[Any] = []
        self.closing = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                owner.paths.append(self.path)
                owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                owner.bodies.append(
                    json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                )
                reply = owner.script.popleft() if owner.script else {}
                if reply == "hang":
                    owner.closing.wait()
                if reply in ("drop", "hang"):
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                assert isinstance(reply, dict)
                raw = reply.get("body", "{}").encode()
                self.send_response(reply.get("status", 200))
                for name, value in {
                    "Content-Length": str(len(raw)),
                    **reply.get("headers", {}),
                }.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def push(self, *replies: dict[str, Any] | str) -> None:
        self.script.extend(replies)

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class Client(OpenAIHTTPClient):
    """The base as a subclass uses it, with an error of its own."""

    class Failed(MemlaneError, RuntimeError):
        pass

    _error = Failed

    def __init__(self, url: str, **kw: Any) -> None:
        options: dict[str, Any] = {
            "base_url": url,
            "api_key": "sk-test",
            "headers": None,
            "timeout": 5.0,
            "max_retries": 3,
            "backoff": 0.5,
        }
        options.update(kw)
        super().__init__("the-model", **options)

    def post(self, body: Any = None) -> Any:
        return self._post_json("things", body or {"q": 1})

    async def apost(self, body: Any = None) -> Any:
        return await self._apost_json("things", body or {"q": 1})


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    s = ScriptServer()
    yield s
    s.close()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between tries, recorded instead of slept (sync and async)."""
    seen: list[float] = []

    async def asleep(seconds: float) -> None:
        seen.append(seconds)

    monkeypatch.setattr(openai_http, "_sleep", seen.append)
    monkeypatch.setattr(openai_http, "_asleep", asleep)
    return seen


def test_posts_json_to_the_path_with_the_headers(server: ScriptServer) -> None:
    server.push(OK)
    with Client(server.url + "/", headers={"X-Extra": "1"}) as client:
        assert client.post({"a": [1, 2]}) == {"ok": True}
    assert server.paths == ["/v1/things"] and server.bodies == [{"a": [1, 2]}]
    sent = server.headers[0]
    assert sent["authorization"] == "Bearer sk-test"
    assert sent["content-type"] == "application/json" and sent["x-extra"] == "1"


def test_the_api_key_defaults_to_the_environment(
    server: ScriptServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    Client(server.url, api_key=None).post()
    Client(server.url, api_key="").post()  # an empty key sends none
    monkeypatch.delenv("OPENAI_API_KEY")
    Client(server.url, api_key=None).post()
    assert [h.get("authorization") for h in server.headers] == ["Bearer sk-env", None, None]


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_each_retryable_status_is_retried(
    server: ScriptServer, waits: list[float], status: int
) -> None:
    server.push({"status": status}, OK)
    assert Client(server.url).post() == {"ok": True}
    assert len(server.bodies) == 2 and waits == [0.5]


def test_backoff_doubles_and_is_capped(server: ScriptServer, waits: list[float]) -> None:
    server.push(*[{"status": 503}] * 7, OK)
    assert Client(server.url, max_retries=7, backoff=0.5).post() == {"ok": True}
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, MAX_WAIT]
    assert len(server.bodies) == 8


def test_retry_after_is_honoured_when_it_is_a_number(
    server: ScriptServer, waits: list[float]
) -> None:
    def after(value: str) -> dict[str, Any]:
        return {"status": 429, "headers": {"Retry-After": value}}

    server.push(
        after("2"),
        after("0.25"),
        after("999"),  # capped
        after("-3"),  # floored
        after("Wed, 21 Oct 2015 07:28:00 GMT"),  # a date: the backoff instead
        after("nan"),  # not finite: the backoff instead
        OK,
    )
    assert Client(server.url, max_retries=6, backoff=0.1).post() == {"ok": True}
    assert waits == pytest.approx([2.0, 0.25, MAX_WAIT, 0.0, 0.1 * 2**4, 0.1 * 2**5])


def test_gives_up_after_the_retries_with_the_subclass_error(
    server: ScriptServer, waits: list[float]
) -> None:
    server.push(*[{"status": 500, "body": "boom"}] * 3, OK)
    client = Client(server.url, max_retries=2)
    with pytest.raises(Client.Failed, match=r"things \(model 'the-model'\) failed after 3 attempt"):
        client.post()
    assert len(server.bodies) == 3 and len(waits) == 2
    assert server.script  # the OK after the last try was not asked for
    server.script.clear()
    server.push({"status": 503, "body": "busy"}, OK)
    with pytest.raises(Client.Failed, match=r"after 1 attempt\(s\): HTTP 503: busy"):
        Client(server.url, max_retries=0).post()
    assert len(server.bodies) == 4 and len(waits) == 2


def test_other_statuses_are_not_retried(server: ScriptServer, waits: list[float]) -> None:
    for status in (400, 401, 404, 422):
        server.push({"status": status, "body": "no"}, OK)
        with pytest.raises(Client.Failed, match=rf"after 1 attempt\(s\): HTTP {status}: no"):
            Client(server.url).post()
        server.script.clear()
    assert len(server.bodies) == 4 and waits == []


def test_a_body_that_is_not_json(server: ScriptServer) -> None:
    server.push({"body": "<html>"})
    with pytest.raises(Client.Failed, match="not JSON"):
        Client(server.url).post()
    assert len(server.bodies) == 1  # a 200 is not retried, whatever its body


def test_network_failures_are_retried(server: ScriptServer, waits: list[float]) -> None:
    # The timeout is what a hung try waits; the answered ones take a fraction of it.
    server.push("hang", "drop", OK)
    assert Client(server.url, timeout=1.0, max_retries=2, backoff=0.0).post() == {"ok": True}
    assert len(server.bodies) == 3 and waits == [0.0, 0.0]
    server.push("hang", "hang")
    with pytest.raises(Client.Failed, match=r"after 2 attempt.*no complete answer within"):
        Client(server.url, timeout=1.0, max_retries=1).post()
    closed = ScriptServer()
    closed.close()
    with pytest.raises(Client.Failed, match=r"after 2 attempt.*ConnectError"):
        Client(closed.url, max_retries=1).post()


def test_async_retries_waits_and_gives_up(server: ScriptServer, waits: list[float]) -> None:
    server.push({"status": 503, "headers": {"Retry-After": "3"}}, {"status": 502}, OK)
    server.push(*[{"status": 500}] * 3, {"status": 401})

    async def go() -> Any:
        async with Client(server.url, max_retries=2, backoff=0.5) as client:
            got = await client.apost()
            with pytest.raises(Client.Failed, match=r"after 3 attempt.*HTTP 500"):
                await client.apost()
            with pytest.raises(Client.Failed, match=r"after 1 attempt.*HTTP 401"):
                await client.apost()
            return got

    assert asyncio.run(go()) == {"ok": True}
    assert waits == [3.0, 1.0, 0.5, 1.0]
    assert len(server.bodies) == 7


def test_async_network_failure(waits: list[float]) -> None:
    closed = ScriptServer()
    closed.close()

    async def go() -> None:
        async with Client(closed.url, max_retries=1) as client:
            await client.apost()

    with pytest.raises(Client.Failed, match=r"after 2 attempt.*ConnectError"):
        asyncio.run(go())
    assert waits == [0.5]


def test_closing(server: ScriptServer) -> None:
    client = Client(server.url)
    client.close()  # nothing open yet: a no-op
    client.post()
    sync = client._client
    assert sync is not None and not sync.is_closed
    client.close()
    client.close()
    assert sync.is_closed and client._client is None
    client.post()  # a closed client opens a new one
    assert client._client is not None and client._client is not sync
    with client as same:
        assert same is client
    assert client._client is None

    async def go() -> None:
        async with client:
            await client.apost()
            client.post()
            (aclient,) = client._aclients.values()  # the running loop's
            assert client._client is not None
        assert aclient.is_closed
        assert not client._aclients and client._client is None  # both closed
        await client.aclose()  # again: a no-op

    asyncio.run(go())


def test_settings_are_checked() -> None:
    for bad in (
        {"max_retries": -1},
        {"max_retries": True},
        {"max_retries": 1.5},
        {"backoff": float("nan")},
        {"backoff": -1},
        {"timeout": float("inf")},
        {"timeout": "5"},
    ):
        with pytest.raises(InvalidArgumentError):
            Client("http://127.0.0.1:9/v1", **bad)
    with pytest.raises(InvalidArgumentError, match="model"):
        OpenAIHTTPClient(
            "",
            base_url="http://x",
            api_key=None,
            headers=None,
            timeout=1,
            max_retries=0,
            backoff=0,
        )


def test_the_clients_raise_their_own_errors(server: ScriptServer) -> None:
    """OpenAIEmbedder and OpenAIChat share this base; each keeps its exception type."""
    assert issubclass(OpenAIEmbedder, OpenAIHTTPClient) and issubclass(OpenAIChat, OpenAIHTTPClient)
    server.push({"body": "not json"}, {"body": "not json"})
    with pytest.raises(
        EmbedderUnavailableError, match="embeddings returned a body that is not JSON"
    ):
        OpenAIEmbedder("m", base_url=server.url, dimension=4).embed("x")
    with (
        OpenAIChat("m", base_url=server.url) as chat,
        pytest.raises(LLMError, match="chat/completions returned a body that is not JSON"),
    ):
        chat.complete([{"role": "user", "content": "hi"}])
    assert server.paths == ["/v1/embeddings", "/v1/chat/completions"]
