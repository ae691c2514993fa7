"""OpenAIEmbedder against a local OpenAI-compatible server on loopback: batching, order,
normalisation, retries with backoff, errors, async, and a Memory built on it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import WordHashEmbedder
from memlane import EmbedderUnavailableError, Memory, OpenAIEmbedder
from memlane.embeddings import CachedEmbedder, Embedder

DIM = 16


class FakeOpenAI:
    """Serves POST /v1/embeddings with WordHashEmbedder vectors (scaled, so the client must
    normalise), in reverse order with their indices; fails on demand."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.fail_next: list[int] = []  # status codes to answer before succeeding
        self.model = WordHashEmbedder(DIM)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                owner.headers.append(dict(self.headers))
                if self.path != "/v1/embeddings":
                    return self._send(404, {"error": "no such path"})
                if owner.fail_next:
                    status = owner.fail_next.pop(0)
                    return self._send(status, {"error": "try later"}, {"Retry-After": "0"})
                vectors = owner.model.embed_batch(body["input"]) * 3.0
                data = [
                    {"object": "embedding", "index": i, "embedding": v.tolist()}
                    for i, v in enumerate(vectors)
                ][::-1]
                self._send(200, {"object": "list", "data": data, "model": body["model"]})

            def _send(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    s = FakeOpenAI()
    yield s
    s.close()


def _embedder(server: FakeOpenAI, **kw: Any) -> OpenAIEmbedder:
    opts: dict[str, Any] = {"base_url": server.url, "api_key": "sk-test", "backoff": 0.0}
    opts.update(kw)
    return OpenAIEmbedder("fake-model", **opts)


def test_batches_order_and_normalisation(server: FakeOpenAI) -> None:
    emb = _embedder(server, batch_size=3, dimension=DIM)
    assert isinstance(emb, Embedder) and emb.name == "openai:fake-model"
    texts = [f"text number {i}" for i in range(8)]
    got = emb.embed_batch(texts)
    np.testing.assert_allclose(got, server.model.embed_batch(texts), rtol=1e-5, atol=1e-6)
    assert [len(r["input"]) for r in server.requests] == [3, 3, 2]
    assert all(r["model"] == "fake-model" for r in server.requests)
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert emb.embed("text number 1") == pytest.approx(got[1], abs=1e-6)
    emb.close()


def test_dimension_is_probed_once(server: FakeOpenAI) -> None:
    emb = _embedder(server)
    assert emb.dimension == DIM and emb.dimension == DIM
    assert len(server.requests) == 1


def test_dimensions_parameter_is_sent(server: FakeOpenAI) -> None:
    emb = _embedder(server, dimensions=DIM)
    emb.embed("x")
    assert server.requests[0]["dimensions"] == DIM
    assert emb.name == f"openai:fake-model@{DIM}"


def test_retries_then_succeeds(server: FakeOpenAI) -> None:
    server.fail_next = [503, 429]
    emb = _embedder(server, dimension=DIM, max_retries=3)
    assert emb.embed("hello").shape == (DIM,)
    assert len(server.requests) == 3


def test_gives_up_with_a_named_error(server: FakeOpenAI) -> None:
    server.fail_next = [500] * 5
    emb = _embedder(server, dimension=DIM, max_retries=2)
    with pytest.raises(EmbedderUnavailableError, match="after 3 attempt"):
        emb.embed("hello")
    server.fail_next = [401]
    with pytest.raises(EmbedderUnavailableError, match="HTTP 401"):
        emb.embed("hello")
    assert len(server.requests) == 4  # a 401 is not retried
    wrong = _embedder(server, dimension=DIM + 1)
    with pytest.raises(EmbedderUnavailableError, match="dimension"):
        wrong.embed("hello")
    nowhere = OpenAIEmbedder(
        "m", base_url="http://127.0.0.1:9/v1", dimension=DIM, max_retries=0, timeout=2
    )
    with pytest.raises(EmbedderUnavailableError, match="ConnectError"):
        nowhere.embed("hello")


def test_async(server: FakeOpenAI) -> None:
    emb = _embedder(server, batch_size=2, dimension=DIM)
    server.fail_next = [502]

    async def main() -> np.ndarray:
        try:
            return await emb.aembed_batch(["a b", "c d", "e f", "g h", "i"])
        finally:
            await emb.aclose()

    got = asyncio.run(main())
    np.testing.assert_allclose(
        got, server.model.embed_batch(["a b", "c d", "e f", "g h", "i"]), rtol=1e-5, atol=1e-6
    )
    assert len(server.requests) == 4  # three batches, one retried


def test_memory_on_the_http_embedder_with_a_cache(server: FakeOpenAI, tmp_path: Path) -> None:
    emb = _embedder(server, dimension=DIM)
    with Memory(tmp_path / "h", emb) as mem:
        mem.add_many([{"text": "red apples"}, {"text": "green pears"}, {"text": "red apples"}])
        assert len(server.requests) == 1
        assert sum(len(r["input"]) for r in server.requests) == 2  # a repeated text once
        mem.add("green pears")  # embedded before: its vector is cached
        assert len(server.requests) == 1
        assert mem.search("red apples", mode="vector", k=1)[0].record.text == "red apples"
        mem.search("red apples", mode="vector", k=1)
        assert len(server.requests) == 1  # the query was cached after the first add
    cached = CachedEmbedder(emb)
    cached.embed_batch(["x y", "x y", "z"])
    n = len(server.requests)
    cached.embed_batch(["z", "x y"])
    assert len(server.requests) == n and cached.cache.hits == 2
