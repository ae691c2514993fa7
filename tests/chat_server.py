"""A scripted chat-completions server on loopback, for tests (no outside service is reached).

>>> with ScriptedChatServer(["hello", (503, "busy"), "again"]) as server:   # doctest: +SKIP
...     OpenAIChat("m", base_url=server.base_url).complete([...])

Each POST to ``/chat/completions`` takes the next scripted response: a str
(the assistant's content), a ``(status, body)`` tuple (an HTTP error), a dict
(a raw JSON body) or a callable of the request body returning one of those.
Requests are recorded in ``server.requests``.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Script = str | tuple[int, str] | dict[str, Any] | Callable[[dict[str, Any]], Any]


def completion(content: str, model: str = "scripted") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


class ScriptedChatServer:
    def __init__(self, script: Iterable[Script] = ()) -> None:
        self.script: deque[Script] = deque(script)
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.requests.append(body)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, "not found")
                item: Any = outer.script.popleft() if outer.script else (500, "script exhausted")
                if callable(item):
                    item = item(body)
                if isinstance(item, tuple):
                    return self._send(*item)
                if isinstance(item, str):
                    item = completion(item)
                return self._send(200, json.dumps(item))

            def _send(self, status: int, text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status in (429, 503):
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def push(self, *items: Script) -> None:
        self.script.extend(items)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedChatServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
