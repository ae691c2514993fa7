"""Headless Chromium for a test, driven over the DevTools protocol (Debian's
``chromium`` package; tests that need it skip without it, and fail where
``MEMLANE_REQUIRE_BROWSER`` is set, as CI does)."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

LISTENING = re.compile(r"DevTools listening on (ws://\S+)")
WIDTH = 1280


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    return None


class Browser:
    """One headless browser with one page; :meth:`run` evaluates JavaScript in it."""

    def __init__(self) -> None:
        binary = find_chromium()
        if binary is None:
            if os.environ.get("MEMLANE_REQUIRE_BROWSER"):
                pytest.fail("MEMLANE_REQUIRE_BROWSER is set but chromium is not installed")
            pytest.skip("no chromium (Debian: apt-get install chromium)")
        self._profile = tempfile.TemporaryDirectory(prefix="memlane-chromium-")
        self.proc = subprocess.Popen(
            [
                binary,
                "--headless=new",
                "--no-sandbox",  # tests run as root in CI
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile.name}",
                f"--window-size={WIDTH},900",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            # Its own process group, so that close ends its helpers too.
            start_new_session=True,
        )
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if found := LISTENING.search(line):
                browser_ws = found.group(1)
                break
        else:
            raise AssertionError("chromium did not start")
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        port = re.search(r":(\d+)/", browser_ws).group(1)  # type: ignore[union-attr]
        pages = httpx.get(f"http://127.0.0.1:{port}/json/list").json()
        page = next(p for p in pages if p["type"] == "page")
        self._closing = contextlib.ExitStack()
        self._ws = self._closing.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))
        self._ids = itertools.count(1)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        self._ws.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=60))
            if message.get("id") == number:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait("document.readyState === 'complete'")

    def run(self, script: str) -> Any:
        """The value of ``script`` (a promise is awaited)."""
        reply = self.send(
            "Runtime.evaluate", expression=script, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in reply:
            raise AssertionError(f"{script}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait(self, condition: str, timeout: float = 60) -> Any:
        """Waits until ``condition`` is truthy and returns it (the page loads and asks its
        server in its own time)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.run(condition)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"never true: {condition}")
            time.sleep(0.05)

    def screenshot(self, path: Path, selector: str | None = None) -> None:
        """The page as it shows, or the element ``selector`` names, whole."""
        params: dict[str, Any] = {"format": "png"}
        if selector is not None:
            # A window as tall as the page, so the element is laid out as it is captured
            # (a capture beyond the window lays the page out anew, wider without the
            # scroll bar, after the element was measured).
            height = self.run("document.documentElement.scrollHeight")
            self.send(
                "Emulation.setDeviceMetricsOverride",
                width=WIDTH,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            params["clip"] = self.run(
                f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                ".getBoundingClientRect(); return {x: r.left + scrollX, y: r.top + scrollY,"
                " width: r.width, height: r.height, scale: 1}; })()"
            )
        try:
            data = self.send("Page.captureScreenshot", **params)["data"]
        finally:
            if selector is not None:
                self.send("Emulation.clearDeviceMetricsOverride")
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self._closing.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        # Chromium's helper processes may outlive it for a moment, still writing into
        # the profile (seen on a busy machine: "Directory not empty" removing it).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for attempt in range(50):
            try:
                self._profile.cleanup()
                return
            except OSError:
                if attempt == 49:
                    raise
                time.sleep(0.1)
