"""memlane serve stopped (SIGTERM) while a client follows /v1/events: the stream ends
at the signal, and the server stops without waiting out its graceful timeout. Before,
the stream's loop never ended: uvicorn cancelled it after 2 s and logged an "Exception
in ASGI application" traceback for an ordinary stop."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from server_process import SERVING


def serve(store: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``memlane serve`` with its stderr in ``log`` (read after it stops); its URL."""
    args = ["serve", "--store", str(store), "--create", "--embedder", "none", "--port", "0"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memlane", *args], stderr=out, stdout=subprocess.DEVNULL
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if found := SERVING.search(log.read_text()):
            return proc, found.group(1)
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"memlane serve did not start:\n{log.read_text()}")


def test_sigterm_ends_the_event_streams_cleanly(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    proc, url = serve(tmp_path / "s", log)
    following, ended = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            with httpx.stream("GET", f"{url}/v1/events", timeout=httpx.Timeout(60)) as r:
                for line in r.iter_lines():
                    if line.startswith(": following"):
                        following.set()
            ended.set()  # the server sent the stream's end
        except BaseException as e:  # a stream cut off, not ended
            failed.append(e)

    threading.Thread(target=follow, daemon=True).start()
    try:
        assert following.wait(60)
        proc.terminate()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert ended.wait(10), failed
    said = log.read_text()
    for bad in ("Traceback", "Exception in ASGI application", "timeout graceful shutdown"):
        assert bad not in said, said
