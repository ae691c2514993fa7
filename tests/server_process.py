"""Runs ``memlane serve`` in a process of its own for a test, on a free port."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

SERVING = re.compile(r"serving .* on (http://\S+)")


class ServeProcess:
    """``memlane serve ARGS`` on ``port`` (0: any free); ``url`` once it listens. A context
    manager: stops it."""

    def __init__(
        self,
        *args: str | Path,
        env: dict[str, str] | None = None,
        port: int = 0,
        preexec_fn: Callable[[], Any] | None = None,
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memlane", "serve", *map(str, args), "--port", str(port)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=preexec_fn,
        )
        assert self.proc.stderr is not None
        said: list[str] = []
        for line in self.proc.stderr:
            said.append(line)
            found = SERVING.search(line)
            if found:
                self.url = found.group(1)
                break
        else:
            self.proc.wait()
            raise AssertionError(f"memlane serve did not start:\n{''.join(said)}")
        # Keep reading, so a full pipe never holds the server up.
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
