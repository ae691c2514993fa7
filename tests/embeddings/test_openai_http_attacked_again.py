"""OpenAIEmbedder and OpenAIChat against the attacks on the first round of fixes
(test_openai_http_attacked.py, whose loopback server this reuses): answers compressed
past the cap, answers of many small numbers that decoding would swell, sync tries held
past their timeout by headers sent a byte at a time, credentials in headers of other
names and in the URL's query, and close() under calls in flight."""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np
import pytest
from test_openai_http_attacked import (
    CLIENTS,
    ERRORS,
    Answer,
    Loopback,
    embedder,
    reply,
    send,
    vectors,
)

from memlane import EmbedderUnavailableError


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], Loopback]]:
    started: list[Loopback] = []

    def start(answer: Answer) -> Loopback:
        started.append(Loopback(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def run(call: Callable[[Any], Any], acall: Callable[[Any], Any], client: Any, how: str) -> Any:
    return call(client) if how == "sync" else asyncio.run(acall(client))


# -- compression: asked for none, refused unread ----------------------------------------------


def gzipped(status: int, body: Callable[[Any], bytes]) -> Answer:
    """Answers ``status`` with ``body(request)``, gzipped, though asked for no compression."""

    def answer(h: BaseHTTPRequestHandler, request: Any) -> None:
        raw = body(request)
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Encoding", "gzip")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    return answer


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("how", ["sync", "async"])
def test_answers_are_asked_for_uncompressed(
    serve: Callable[[Answer], Loopback], kind: str, how: str
) -> None:
    server = serve(lambda h, r: send(h, reply(r)))
    build, call, acall = CLIENTS[kind]
    run(call, acall, build(server), how)
    assert server.headers[0]["accept-encoding"] == "identity"  # httpx asks for zstd and gzip


@functools.cache
def inflating(good: str) -> bytes:
    """``good`` (a JSON object) padded past any cap, to 48 MiB, gzipped: some 50 KB."""
    gz = zlib.compressobj(wbits=31)
    parts = [gz.compress(good[:-1].encode() + b', "pad": "')]
    parts += [gz.compress(b" " * 2**20) for _ in range(48)]
    return b"".join([*parts, gz.compress(b'"}'), gz.flush()])


def bomb(request: Any) -> bytes:
    return inflating(json.dumps(reply(request)))


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_compressed_answer_is_refused_unread(
    serve: Callable[[Answer], Loopback], kind: str, how: str
) -> None:
    build, call, acall = CLIENTS[kind]
    client = build(serve(gzipped(200, bomb)))
    with pytest.raises(ERRORS[kind], match=r"answered compressed \('gzip'\).*refused unread"):
        run(call, acall, client, how)


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_compressed_error_page_is_not_read(serve: Callable[[Answer], Loopback], how: str) -> None:
    server = serve(gzipped(503, lambda r: gzip.compress(b"the page of an overloaded server")))
    build, call, acall = CLIENTS["chat"]
    with pytest.raises(ERRORS["chat"], match=r"2 attempt.*HTTP 503: \(a body compressed with"):
        run(call, acall, build(server, max_retries=1, backoff=0), how)
    assert len(server.bodies) == 2  # retried all the same: the status says it may be


# -- an answer's values: counted before decoding ----------------------------------------------


def numbers(count: int) -> Answer:
    """One row of ``count`` short numbers: few bytes, many Python objects once decoded."""
    row = b'{"index": 0, "embedding": [' + b"0.1," * (count - 1) + b"0.1]}"
    return lambda h, r: send(h, b'{"data": [' + row + b"]}")


@pytest.mark.parametrize("how", ["sync", "async"])
def test_an_answer_of_more_values_than_its_vectors_need_is_refused(
    serve: Callable[[Answer], Loopback], how: str
) -> None:
    # Two vectors of 3 numbers: about 1,200 values with room to spare, not 20,000 (80 KB,
    # well under the byte cap).
    emb = embedder(serve(numbers(20000)))
    with pytest.raises(EmbedderUnavailableError, match=r"more than \d+ JSON values"):
        run(lambda e: e.embed_batch(["a", "b"]), lambda e: e.aembed_batch(["a", "b"]), emb, how)
    # Without a dimension, one text may be as wide as the widest model assumed, no wider.
    wide = embedder(serve(numbers(20000)), dimension=None)
    with pytest.raises(EmbedderUnavailableError, match=r"more than \d+ JSON values"):
        run(lambda e: e.embed("a"), lambda e: e.aembed_batch(["a"]), wide, how)


@pytest.mark.parametrize("how", ["sync", "async"])
def test_until_the_width_is_known_the_first_text_goes_alone(
    serve: Callable[[Answer], Loopback], how: str
) -> None:
    """Without a dimension, a batch's limits would assume the widest model's vectors
    (100 MB for 128 texts): the first text alone tells the width, the rest are held to it."""
    server = serve(lambda h, r: send(h, vectors(r, 4096)))
    emb = embedder(server, dimension=None, batch_size=4)
    texts = [f"text {i}" for i in range(7)]
    got = run(lambda e: e.embed_batch(texts), lambda e: e.aembed_batch(texts), emb, how)
    assert got.shape == (7, 4096) and emb.dimension == 4096
    sizes = [len(body["input"]) for body in server.bodies]
    # The first alone; the batches after it (async: at once, in any order) held to 4.
    assert sizes[0] == 1 and sorted(sizes[1:]) == [2, 4]
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, atol=1e-6)


# -- the sync deadline: headers a byte at a time ----------------------------------------------


def slow_headers(server_stop: threading.Event) -> Answer:
    """Answers ``slow`` requests with headers sent a byte every 50 ms for 20 s (unless the
    test ends first), then a good answer; others at once."""

    def answer(h: BaseHTTPRequestHandler, request: Any) -> None:
        raw = json.dumps(reply(request)).encode()
        if "slow" not in json.dumps(request):
            send(h, raw)
            return
        h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Pad: " % len(raw))
        end = time.monotonic() + 20
        while not server_stop.is_set() and time.monotonic() < end:
            h.wfile.write(b"a")
            time.sleep(0.05)
        h.wfile.write(b"\r\n\r\n" + raw)

    return answer


SLOW_TEXT = [{"role": "user", "content": "slow"}]
# Each client's sync and async call of a request its server answers slowly.
SLOW: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "embedder": (lambda c: c.embed("slow"), lambda c: c.aembed_batch(["slow"])),
    "chat": (lambda c: c.complete(SLOW_TEXT), lambda c: c.acomplete(SLOW_TEXT)),
}


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("how", ["sync", "async"])
def test_headers_sent_a_byte_at_a_time_time_out(
    serve: Callable[[Answer], Loopback], kind: str, how: str
) -> None:
    server = serve(lambda h, r: slow_headers(server.stop)(h, r))
    build = CLIENTS[kind][0]
    client = build(server, timeout=0.5, max_retries=1, backoff=0)
    started = time.monotonic()
    with pytest.raises(ERRORS[kind], match=r"after 2 attempt\(s\): .*no complete answer within"):
        run(*SLOW[kind], client, how)
    # Two tries of 0.5 s; held by each read alone, the first would take the 20 s.
    assert time.monotonic() - started < 10
    assert len(server.bodies) == 2


def test_a_late_try_leaves_other_threads_requests_alone(
    serve: Callable[[Answer], Loopback],
) -> None:
    """Each try's deadline cuts its own connection's waits only: calls in other threads on
    the same client go on while one times out."""
    server = serve(lambda h, r: slow_headers(server.stop)(h, r))
    emb = embedder(server, timeout=2)
    done, answered, errors = threading.Event(), [], []

    def others() -> None:
        while not done.is_set():
            try:
                answered.append(emb.embed("fast"))
            except Exception as e:  # any error is the test's failure
                errors.append(e)

    threads = [threading.Thread(target=others) for _ in range(2)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(EmbedderUnavailableError, match="no complete answer within"):
            emb.embed("slow")
        assert time.monotonic() - started < 10  # not the 20 s the headers take
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert errors == [] and answered


# -- credentials in headers of any name and in the query ---------------------------------------

SECRETS = {
    "X-Goog-Api-Key": "goog-SECRET-0123456789",
    "Ocp-Apim-Subscription-Key": "apim-SECRET-0123456789",
    "Cookie": "session=cookie-SECRET-0123456789",
    "X-Auth-Token": "token-SECRET-0123456789",
}
IN_QUERY = "query-SECRET-0123456789"


def echoing(paths: list[str]) -> Answer:
    """An error page that quotes the request line (its query too) and the credentials;
    the paths asked for go in ``paths``."""

    def echo(h: BaseHTTPRequestHandler, request: Any) -> None:
        paths.append(h.path)
        lines = [h.requestline, *(f"{name}: {h.headers[name]}" for name in SECRETS)]
        send(h, "\r\n".join(lines).encode(), 400)

    return echo


@pytest.mark.parametrize("kind", CLIENTS)
def test_no_credential_is_shown(
    serve: Callable[[Answer], Loopback], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    paths: list[str] = []
    server = serve(echoing(paths))
    build, call, _ = CLIENTS[kind]
    client = build(server, base_url=f"{server.url}?api_key={IN_QUERY}", headers=SECRETS)
    with pytest.raises(ERRORS[kind], match="HTTP 400") as caught:
        call(client)
    shown = f"{caught.value} {client!r} {client.base_url}"
    leaked = [s for s in (*SECRETS.values(), IN_QUERY) if s.split("=")[-1] in shown]
    assert leaked == [] and str(caught.value).count("[redacted]") == 5
    assert client.base_url == server.url
    # All were sent, and the request went to the path, the query after it.
    path = "embeddings" if kind == "embedder" else "chat/completions"
    assert paths == [f"/v1/{path}?api_key={IN_QUERY}"]
    assert all(server.headers[0][name.lower()] == value for name, value in SECRETS.items())


# -- close() under calls in flight ------------------------------------------------------------


def test_close_lets_the_calls_in_flight_end(serve: Callable[[Answer], Loopback]) -> None:
    held, go = threading.Event(), threading.Event()

    def answer(h: BaseHTTPRequestHandler, request: Any) -> None:
        if request["input"] == ["held"]:
            held.set()
            go.wait(10)
        send(h, vectors(request))

    emb = embedder(serve(answer), timeout=10)
    got: list[Any] = []
    call = threading.Thread(target=lambda: got.append(emb.embed_batch(["held"])))
    call.start()
    assert held.wait(10)
    client = emb._client
    assert client is not None
    emb.close()  # the call in flight keeps its connection ...
    assert not client.is_closed and emb._client is None
    assert emb.embed("another").shape == (3,)  # ... and a new call opens a new client
    go.set()
    call.join()
    assert len(got) == 1 and got[0].shape == (1, 3)
    assert client.is_closed  # closed by the end of its last call
    emb.close()
    assert emb._client is None and not emb._calls
