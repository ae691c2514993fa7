"""OpenAIEmbedder and OpenAIChat (over memlane.openai_http) against hostile loopback
servers and hostile arguments: an answer dribbled a byte at a time or without end,
garbage bodies, lying indices and widths, clients used from one event loop after
another, requests JSON cannot carry, and credentials a message or repr could show.
Each answer ends in the client's own memlane error, never a raw exception."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from memlane import (
    EmbedderUnavailableError,
    InvalidArgumentError,
    Memory,
    OpenAIEmbedder,
)
from memlane.agent.llm import LLMError, OpenAIChat
from memlane.openai_http import MAX_ANSWER

MSGS = [{"role": "user", "content": "hi"}]
KEY = "sk-SECRET-abcdef123456"

Answer = Callable[[BaseHTTPRequestHandler, Any], None]


class Loopback:
    """A loopback HTTP/1.1 server (connections kept alive, as real servers keep them)
    whose every POST is answered by ``answer(handler, request_body)``; it records the
    requests' bodies and headers. ``stop`` is set at close, for answers that go on."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.bodies: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self.stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                owner.bodies.append(
                    json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                )
                try:
                    owner.answer(self, owner.bodies[-1])
                except OSError:  # the client hung up, as it should on a hostile answer
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def send(h: BaseHTTPRequestHandler, body: Any, status: int = 200) -> None:
    """Answer with ``body`` (bytes as they are, anything else as JSON)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(raw)))
    h.end_headers()
    h.wfile.write(raw)


def chunked(h: BaseHTTPRequestHandler, parts: Iterator[bytes]) -> None:
    """Answer 200 with a chunked body of ``parts``, each sent as it comes."""
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    for part in parts:
        h.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        h.wfile.flush()
    h.wfile.write(b"0\r\n\r\n")


def vectors(request: Any, width: int = 3) -> dict[str, Any]:
    """A good embeddings answer: one unit-ish vector per input, with its index."""
    rows = [
        {"index": i, "embedding": ([1.0] + [0.5] * width)[:width]}
        for i, _ in enumerate(request["input"])
    ]
    return {"data": rows}


def reply(request: Any) -> Any:
    """The good answer to either client's request."""
    if "input" in request:
        return vectors(request)
    return {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], Loopback]]:
    started: list[Loopback] = []

    def start(answer: Answer) -> Loopback:
        started.append(Loopback(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def embedder(server: Loopback, **kw: Any) -> OpenAIEmbedder:
    options: dict[str, Any] = {"base_url": server.url, "api_key": "sk-test", "max_retries": 0}
    options.update({"dimension": 3, **kw})
    return OpenAIEmbedder("m", **options)


def chat(server: Loopback, **kw: Any) -> OpenAIChat:
    options: dict[str, Any] = {"base_url": server.url, "api_key": "sk-test", "max_retries": 0}
    options.update(kw)
    return OpenAIChat("m", **options)


# Each client: how to build it, and its sync and async call (its error: ERRORS).
CLIENTS: dict[str, tuple[Callable[..., Any], Callable[[Any], Any], Callable[[Any], Any]]] = {
    "embedder": (embedder, lambda c: c.embed_batch(["x"]), lambda c: c.aembed_batch(["x"])),
    "chat": (chat, lambda c: c.complete(MSGS), lambda c: c.acomplete(MSGS)),
}
ERRORS = {"embedder": EmbedderUnavailableError, "chat": LLMError}


# -- the deadline: timeout bounds a whole try, not each read ---------------------------------


def dribbled(server_stop: threading.Event, request: Any) -> Iterator[bytes]:
    """A good answer after blanks sent a byte at a time, for 10 s unless the test ends
    first: a client held to each read alone takes it whole, late."""
    end = time.monotonic() + 10
    while not server_stop.is_set() and time.monotonic() < end:
        yield b" "
        time.sleep(0.02)
    yield json.dumps(reply(request)).encode()


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_dribbled_answer_times_out(
    serve: Callable[[Answer], Loopback], kind: str, run: str
) -> None:
    server = serve(lambda h, r: chunked(h, dribbled(server.stop, r)))
    build, call, acall = CLIENTS[kind]
    client = build(server, timeout=0.5, max_retries=1, backoff=0)
    # Each try has its own deadline: two tries, both late.
    with pytest.raises(ERRORS[kind], match=r"after 2 attempt\(s\): .*no complete answer within"):
        if run == "sync":
            call(client)
        else:
            asyncio.run(acall(client))
    assert len(server.bodies) == 2


# -- the size cap ---------------------------------------------------------------------------


def flood(size: int, width: int = 3) -> Answer:
    """A good answer (vectors ``width`` wide) padded past ``size`` bytes, sent in 64 KiB
    chunks."""

    def answer(h: BaseHTTPRequestHandler, request: Any) -> None:
        def parts() -> Iterator[bytes]:
            good = vectors(request, width) if "input" in request else reply(request)
            yield json.dumps(good)[:-1].encode() + b', "pad": "'
            for _ in range(size // 2**16 + 1):
                yield b" " * 2**16
            yield b'"}'

        chunked(h, parts())

    return answer


@pytest.mark.parametrize("run", ["sync", "async"])
def test_an_answer_larger_than_its_vectors_need_is_refused(
    serve: Callable[[Answer], Loopback], run: str
) -> None:
    # One vector of 3 numbers: its cap is about a megabyte, well under 4 MiB.
    emb = embedder(serve(flood(4 * 2**20)))
    with pytest.raises(EmbedderUnavailableError, match=r"answered with more than \d+ bytes"):
        if run == "sync":
            emb.embed("x")
        else:
            asyncio.run(emb.aembed_batch(["x"]))
    # A batch of wide vectors may take more: the cap grows with texts times width.
    big = embedder(serve(flood(4 * 2**20, 1536)), dimension=1536)
    got = big.embed_batch(["a"] * 128)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, atol=1e-6)


def test_a_chat_reply_is_capped(serve: Callable[[Answer], Loopback]) -> None:
    llm = chat(serve(flood(MAX_ANSWER)))
    with pytest.raises(LLMError, match=f"answered with more than {MAX_ANSWER} bytes"):
        llm.complete(MSGS)
    assert chat(serve(flood(2**20))).complete(MSGS) == "hello"  # a long reply is fine


# -- garbage bodies ---------------------------------------------------------------------------


def rows(*embeddings: Any) -> bytes:
    return json.dumps(
        {"data": [{"index": i, "embedding": e} for i, e in enumerate(embeddings)]}
    ).encode()


GARBAGE = {
    "nested deeper than Python recurses": b'{"data": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    "data a string": json.dumps({"data": "abc"}).encode(),
    "data an object": json.dumps({"data": {"a": {"index": 0, "embedding": [1, 0, 0]}}}).encode(),
    "a row a list": json.dumps({"data": [[1.0, 0.0, 0.0]]}).encode(),
    "a row a number": json.dumps({"data": [5]}).encode(),
    "the body a list": json.dumps([{"index": 0, "embedding": [1, 0, 0]}]).encode(),
    "an embedding a string": rows("abc"),
    "an embedding null": rows(None),
    "numbers written as strings": rows(["1", "0", "0"]),
    "booleans": rows([True, False, False]),
    "a nested list": rows([[1, 0, 0]]),
    "an int of 400 digits": b'{"data": [{"index": 0, "embedding": [1' + b"0" * 400 + b", 0, 0]}]}",
    "a float beyond float32": rows([1e39, 0, 0]),
    "NaN": b'{"data": [{"index": 0, "embedding": [NaN, 0, 0]}]}',
    "Infinity": b'{"data": [{"index": 0, "embedding": [Infinity, 0, 0]}]}',
    "a zero vector": rows([0, 0, 0]),
    "a vector too short to normalise": rows([1e-45, 0, 0]),
    "the wrong width": rows([1, 0]),
    "no rows": rows(),
}


@pytest.mark.parametrize("body", GARBAGE.values(), ids=GARBAGE)
def test_garbage_embeddings_raise_the_embedder_error(
    serve: Callable[[Answer], Loopback], body: bytes
) -> None:
    emb = embedder(serve(lambda h, r: send(h, body)))
    with pytest.raises(EmbedderUnavailableError, match="embeddings returned"):
        emb.embed("hello")


def test_a_store_keeps_nothing_of_a_garbage_answer(
    serve: Callable[[Answer], Loopback], tmp_path: Path
) -> None:
    garbage: list[bytes] = []
    server = serve(lambda h, r: send(h, garbage[0] if garbage else vectors(r)))
    with Memory(tmp_path / "m", embedder(server)) as mem:
        mem.add("seed")
        for body in (GARBAGE["a row a list"], GARBAGE["an int of 400 digits"]):
            garbage[:] = [body]
            with pytest.raises(EmbedderUnavailableError):
                mem.add("another text")
            with pytest.raises(EmbedderUnavailableError):
                mem.search("another text")
        assert mem.count() == 1


def test_a_chat_reply_nested_too_deep(serve: Callable[[Answer], Loopback]) -> None:
    deep = b'{"choices": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    with pytest.raises(LLMError, match="nested too deeply"):
        chat(serve(lambda h, r: send(h, deep))).complete(MSGS)


# -- indices ----------------------------------------------------------------------------------


def unit(i: int) -> list[float]:
    return [float(i == j) for j in range(16)]


INDICES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "strings ('10' sorts before '2')": lambda n: [
        {"index": str(i), "embedding": unit(i)} for i in range(n)
    ],
    "missing on some rows": lambda n: [
        {"embedding": unit(i), **({"index": i} if i % 2 else {})} for i in range(n)
    ][::-1],
    "missing on all rows": lambda n: [{"embedding": unit(i)} for i in range(n)],
    "repeated": lambda n: [{"index": 0, "embedding": unit(i)} for i in range(n)],
    "out of range": lambda n: [{"index": i + 1, "embedding": unit(i)} for i in range(n)],
    "booleans": lambda n: [{"index": bool(i), "embedding": unit(i)} for i in range(n)],
    "floats": lambda n: [{"index": float(i), "embedding": unit(i)} for i in range(n)],
    "objects": lambda n: [{"index": {}, "embedding": unit(i)} for i in range(n)],
}


@pytest.mark.parametrize("make", INDICES.values(), ids=INDICES)
def test_indices_must_be_a_permutation(
    serve: Callable[[Answer], Loopback], make: Callable[[int], list[dict[str, Any]]]
) -> None:
    server = serve(lambda h, r: send(h, {"data": make(len(r["input"]))}))
    with pytest.raises(EmbedderUnavailableError, match="'index' values are not the ints 0 to 11"):
        embedder(server, dimension=16).embed_batch([f"text {i}" for i in range(12)])


def test_rows_in_any_order_go_to_their_texts(serve: Callable[[Answer], Loopback]) -> None:
    order = [3, 0, 11, 7, 1, 10, 2, 9, 4, 8, 5, 6]
    server = serve(
        lambda h, r: send(h, {"data": [{"index": i, "embedding": unit(i)} for i in order]})
    )
    got = embedder(server, dimension=16).embed_batch([f"text {i}" for i in range(12)])
    np.testing.assert_array_equal(got, np.eye(12, 16, dtype=np.float32))


# -- the width, when no dimension is given ----------------------------------------------------


def test_the_first_answer_fixes_the_width(serve: Callable[[Answer], Loopback]) -> None:
    widths = iter([3, 4, 3])
    server = serve(lambda h, r: send(h, vectors(r, next(widths))))
    emb = embedder(server, dimension=None, batch_size=1)
    with pytest.raises(EmbedderUnavailableError, match="dimension 4, expected 3"):
        emb.embed_batch(["a", "b"])
    assert emb.dimension == 3 and len(server.bodies) == 2  # no probe: the answer told it
    assert emb.embed("c").shape == (3,)


def test_a_width_of_zero_is_refused(serve: Callable[[Answer], Loopback], tmp_path: Path) -> None:
    server = serve(lambda h, r: send(h, vectors(r, 0)))
    with pytest.raises(EmbedderUnavailableError, match="dimension 0"):
        _ = embedder(server, dimension=None).dimension
    with pytest.raises(EmbedderUnavailableError, match="dimension 0"):
        Memory(tmp_path / "m", embedder(server, dimension=None))


# -- event loops ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", CLIENTS)
def test_async_calls_from_one_event_loop_after_another(
    serve: Callable[[Answer], Loopback], kind: str
) -> None:
    server = serve(lambda h, r: send(h, reply(r)))
    build, _, acall = CLIENTS[kind]
    client = build(server)
    for _ in range(3):  # as a script or a test suite calls asyncio.run, again and again
        asyncio.run(acall(client))
    assert len(server.bodies) == 3
    # The clients of closed loops are dropped: at most the last one is left.
    assert len(client._aclients) <= 1


def test_a_closed_client_is_the_client_error(serve: Callable[[Answer], Loopback]) -> None:
    """httpx raises RuntimeError on a closed client (a close() racing a call)."""
    emb = embedder(serve(lambda h, r: send(h, reply(r))))
    emb._client = httpx.Client()
    emb._client.close()
    with pytest.raises(EmbedderUnavailableError, match=r"RuntimeError: .*closed"):
        emb.embed("x")


# -- requests JSON cannot carry, and arguments checked when the client is built ---------------


def test_a_request_json_cannot_carry_is_an_argument_error(
    serve: Callable[[Answer], Loopback],
) -> None:
    server = serve(lambda h, r: send(h, reply(r)))
    emb, llm = embedder(server), chat(server)
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        emb.embed_batch(["fine", "x\udfff"])
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        llm.complete([{"role": "user", "content": "hi \ud800"}])
    with pytest.raises(InvalidArgumentError, match="set is not JSON serializable"):
        llm.chat(MSGS, tools=[{"f": {1, 2}}])
    with pytest.raises(InvalidArgumentError, match="not JSON compliant"):
        llm.chat(MSGS, top_p=float("nan"))
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        asyncio.run(llm.acomplete([{"role": "user", "content": "\ud800"}]))
    assert server.bodies == []  # nothing was sent


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": "0.5"}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"extra": {"x": object()}}, "extra"),
        ({"extra": {"x": float("nan")}}, "extra"),
        ({"extra": {"x": "\ud800"}}, "extra"),
        ({"extra": [("x", 1)]}, "extra"),
    ],
)
def test_chat_options_are_checked(options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1", **options)


@pytest.mark.parametrize("cls", [OpenAIEmbedder, OpenAIChat])
@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"base_url": 123}, "base_url must be a str"),
        ({"base_url": "not a url"}, "base_url must be an http"),
        ({"base_url": "ftp://127.0.0.1"}, "base_url must be an http"),
        ({"base_url": "http://127.0.0.1:port"}, "base_url is not a URL"),
        ({"api_key": "k\u00e9y-secret"}, "api_key must be a str of printable ASCII"),
        ({"api_key": "key\r\nX-Injected: 1"}, "api_key must be a str of printable ASCII"),
        ({"api_key": 42}, "api_key"),
        ({"headers": {"X-Note": "a\nb"}}, "headers\\['X-Note'\\]"),
        ({"headers": {"X-Note": "caf\u00e9"}}, "headers\\['X-Note'\\]"),
        ({"headers": {"Bad: name": "v"}}, "header name"),
        ({"headers": {"": "v"}}, "header name"),
        ({"headers": [("X", "v")]}, "headers must be a dict"),
    ],
)
def test_connection_settings_are_checked(
    cls: type[OpenAIEmbedder | OpenAIChat], options: dict[str, Any], named: str
) -> None:
    settings: dict[str, Any] = {"base_url": "http://127.0.0.1:9/v1", **options}
    with pytest.raises(InvalidArgumentError, match=named) as caught:
        cls("m", **settings)
    assert "secret" not in str(caught.value)  # a refused key is not quoted


def test_a_key_from_the_environment_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k\u00e9y")
    with pytest.raises(InvalidArgumentError, match=r"\$OPENAI_API_KEY"):
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1")


# -- credentials stay out of messages and reprs -----------------------------------------------


def echo(h: BaseHTTPRequestHandler, request: Any) -> None:
    """A proxy's error page that quotes the request's credentials (first, so that they
    fall in what a message quotes), as header lines and as JSON."""
    names = ("Authorization", "api-key")
    lines = "".join(f"{name}: {h.headers[name]}\r\n" for name in names if name in h.headers)
    fields = json.dumps({name: h.headers[name] for name in names if name in h.headers})
    send(h, f"{lines}{fields}".encode(), 400)


@pytest.mark.parametrize("kind", CLIENTS)
def test_an_echoed_request_does_not_show_the_key(
    serve: Callable[[Answer], Loopback], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve(echo)
    build, call, _ = CLIENTS[kind]
    for options in (
        {"api_key": KEY},
        {"api_key": None, "headers": {"Authorization": f"Bearer {KEY}"}},
        {"api_key": None, "headers": {"api-key": KEY}},
    ):
        with pytest.raises(ERRORS[kind], match="HTTP 400") as caught:
            call(build(server, **options))
        assert KEY not in str(caught.value) and "[redacted]" in str(caught.value)
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"  # it was sent, all the same


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_key_in_the_url_is_not_shown(
    serve: Callable[[Answer], Loopback], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve(echo)
    build, call, _ = CLIENTS[kind]
    url = f"http://user:{KEY}@{server.url.removeprefix('http://')}"
    client = build(server, base_url=url, api_key=None)
    assert KEY not in repr(client) and client.base_url == server.url
    with pytest.raises(ERRORS[kind], match="HTTP 400") as caught:
        call(client)
    assert KEY not in str(caught.value) and "[redacted]" in str(caught.value)
    basic = base64.b64encode(f"user:{KEY}".encode()).decode()
    assert server.headers[0]["authorization"] == f"Basic {basic}"  # the URL's userinfo is sent
    # Nor when the server cannot be reached (a new client: the old one's connection lives).
    server.close()
    with pytest.raises(ERRORS[kind], match="ConnectError") as caught:
        call(build(server, base_url=url, api_key=None))
    assert KEY not in str(caught.value)


def test_the_chat_url_is_shown_without_userinfo() -> None:
    llm = OpenAIChat("m", base_url=f"https://user:{KEY}@example.com/v1/")
    assert llm.url == "https://example.com/v1/chat/completions" and KEY not in repr(llm)


def test_short_keys_do_not_mangle_messages(serve: Callable[[Answer], Loopback]) -> None:
    server = serve(lambda h, r: send(h, b"the model x is busy", 503))
    with pytest.raises(LLMError, match="HTTP 503: the model x is busy"):
        chat(server, api_key="x").complete(MSGS)


def test_answers_are_still_read_whole(serve: Callable[[Answer], Loopback]) -> None:
    """Streamed in pieces, a good answer comes back as it was sent."""

    def pieces(h: BaseHTTPRequestHandler, r: Any) -> None:
        raw = json.dumps(reply(r)).encode()
        chunked(h, (raw[i : i + 5] for i in range(0, len(raw), 5)))

    server = serve(pieces)
    assert chat(server).complete(MSGS) == "hello"
    assert embedder(server).embed("x") == pytest.approx(np.array([1, 0.5, 0.5]) / np.sqrt(1.5))
    assert asyncio.run(chat(server).acomplete(MSGS)) == "hello"
