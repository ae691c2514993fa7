"""``memlane serve`` as a process, against clients that hold its connections: a request
head that never ends (slowloris) or never stops (a header or a trailer of megabytes),
more connections than it serves. Before any key is checked each held a connection and a
file descriptor for ever, or grew the server by what was sent. Clients that keep a
connection alive, pipeline requests, follow events or send a body slowly are served as
before."""

from __future__ import annotations

import resource
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server_process import ServeProcess

KEY = "k" * 32
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    args = ["--create", "--embedder", "none", "--api-key", KEY]
    with ServeProcess(tmp_path / "s", *args, "--head-timeout", "0.5") as s:
        yield s


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_a_head_that_never_ends_is_answered_408_and_closed(server: ServeProcess) -> None:
    with _connect(server.url) as sock:
        sock.sendall(b"GET /v1/count HTTP/1.1\r\nHost: x\r\n")
        answer = _answer(sock)  # within the socket's timeout (10 s)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"head took over 0.5 s" in answer
    assert httpx.get(f"{server.url}/v1/count", headers=AUTH).json() == {"count": 0}


#: Heads that never end: in a header, in the URL, in a chunked body's trailer (the
#: trailers are headers too; httptools kept one of any length).
ENDLESS = {
    "header": b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: ",
    "url": b"GET /health?x=",
    "trailer": b"POST /v1/import HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
    + KEY.encode()
    + b"\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: ",
}


@pytest.mark.parametrize("where", sorted(ENDLESS))
def test_a_head_of_megabytes_is_not_read(server: ServeProcess, where: str) -> None:
    """The server stops reading past 64 KiB (431, or a reset while the client still
    sends); it read and kept all 8 MiB before."""
    chunk, sent = b"a" * 65536, 0
    with _connect(server.url) as sock:
        sock.sendall(ENDLESS[where])
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(128):
                sock.sendall(chunk)
                sent += 1
            _answer(sock)
    assert sent < 64
    assert httpx.get(f"{server.url}/v1/count", headers=AUTH).json() == {"count": 0}


def test_a_body_sent_slowly_is_served(server: ServeProcess) -> None:
    """Slower in all than the head timeout: a body is not timed."""
    body = b'{"text": "' + b"slow but steady " * 8 + b'"}'
    with _connect(server.url) as sock:
        sock.sendall(
            b"POST /v1/memories HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + KEY.encode()
            + b"\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
        )
        for i in range(0, len(body), 16):
            sock.sendall(body[i : i + 16])
            time.sleep(0.15)
        assert _answer(sock).startswith(b"HTTP/1.1 201 ")
    assert httpx.get(f"{server.url}/v1/count", headers=AUTH).json() == {"count": 1}


def test_a_head_of_over_64_kib_in_one_write_is_refused(server: ServeProcess) -> None:
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: aaaaaaaa\r\n" * 7000 + b"\r\n"
    with _connect(server.url) as sock:
        sock.sendall(head)
        assert _answer(sock).startswith(b"HTTP/1.1 431 ")


def test_a_pipelined_stream_is_not_cut_by_the_head_timeout(server: ServeProcess) -> None:
    """The second of two requests sent at once runs after the first is answered: it is
    no head waited for (it was answered 408 mid-stream)."""
    with _connect(server.url) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + KEY.encode()
            + b"\r\n\r\n"
        )
        got = b""
        while b": following" not in got:  # the stream has begun
            got += sock.recv(65536)
        sock.settimeout(1.5)  # three head timeouts, and the stream stays open
        with pytest.raises(TimeoutError):
            while chunk := sock.recv(65536):
                got += chunk
    assert got.count(b"HTTP/1.1 200 ") == 2 and b"408" not in got


def test_a_request_answered_before_its_body_still_times_the_next_head(
    server: ServeProcess,
) -> None:
    """A 404 before the body: once the body is in, half a head is let go as any is."""
    with _connect(server.url) as sock:
        sock.sendall(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 404 ")
        sock.sendall(b"{}{}GET /v1/count HTTP/1.1\r\n")
        assert b"HTTP/1.1 408 " in _answer(sock)  # within the socket's timeout (5 s)


def test_keep_alive_requests_are_served_past_the_head_timeout(tmp_path: Path) -> None:
    """Each head is timed from the answer before it, not from the connection."""
    args = ["--create", "--embedder", "none", "--api-key", KEY, "--head-timeout", "2"]
    with (
        ServeProcess(tmp_path / "s", *args) as server,
        httpx.Client(base_url=server.url, headers=AUTH) as client,
    ):
        for _ in range(5):
            assert client.get("/v1/count").status_code == 200
            time.sleep(0.5)


def test_connections_past_the_limit_are_refused_until_one_closes(tmp_path: Path) -> None:
    args = ["--create", "--embedder", "none", "--api-key", KEY, "--max-connections", "3"]
    with ServeProcess(tmp_path / "s", *args) as server:
        held = [_connect(server.url) for _ in range(3)]
        try:
            refused = httpx.get(f"{server.url}/v1/count", headers=AUTH)
            assert refused.status_code == 503 and b"too many connections" in refused.content
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + 10
        while (r := httpx.get(f"{server.url}/v1/count", headers=AUTH)).status_code == 503:
            assert time.monotonic() < deadline, "the closed connections were never let go"
            time.sleep(0.05)
        assert r.json() == {"count": 0}


def _small_files() -> None:
    """In the server's process: no file over 1 MiB, a write past it failing with EFBIG
    (as a full disk fails with ENOSPC) instead of the signal that would end the process."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


def test_an_upload_the_server_has_no_room_for_is_a_storage_error(tmp_path: Path) -> None:
    """A 500 with the raw OSError before; now a 503 that names no place on the server."""
    args = ["--create", "--embedder", "none", "--api-key", KEY]
    with ServeProcess(tmp_path / "s", *args, preexec_fn=_small_files) as server:
        lines = "".join(f'{{"text": "fact number {i} of many"}}\n' for i in range(60_000))
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as c:
            for route in ("/v1/import", "/v1/ingest?name=notes.md&shared=true"):
                r = c.post(route, content=lines.encode())
                assert r.status_code == 503, r.text
                error = r.json()["error"]
                assert error["type"] == "StorageError" and "no room" in error["message"]
                assert "memlane-" not in error["message"]
            assert c.get("/v1/count").json() == {"count": 0}
