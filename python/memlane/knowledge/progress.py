"""A one-line progress bar on stderr for long ingestions (no dependency)."""

from __future__ import annotations

import sys
import time
from typing import Literal, TextIO

__all__ = ["ProgressBar", "ProgressOption"]

#: ``True``: a bar when stderr is a terminal; ``"always"``: a bar regardless; ``False``: none.
ProgressOption = bool | Literal["always"]


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    m, s = divmod(seconds, 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class ProgressBar:
    """``files 12/340 [####......] 3.5%  210 fragments  25.1/s  eta 04:10``, redrawn in place.

    Redraws at most every ``interval`` seconds (and at :meth:`close`); on a
    stream that is not a terminal (``"always"``), each redraw is a new line.
    """

    def __init__(
        self,
        total: int,
        *,
        enabled: ProgressOption = True,
        stream: TextIO | None = None,
        label: str = "ingest",
        width: int = 24,
        interval: float = 0.5,
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        tty = bool(isatty()) if callable(isatty) else False
        self.enabled = enabled == "always" or (enabled is True and tty)
        self._tty = tty
        self.total = max(0, total)
        self.label = label
        self.width = width
        self.interval = interval
        self.files = 0
        self.fragments = 0
        self._start = time.monotonic()
        self._drawn = 0.0
        self._last_len = 0

    def update(self, files: int = 0, fragments: int = 0) -> None:
        self.files += files
        self.fragments += fragments
        if self.enabled and time.monotonic() - self._drawn >= self.interval:
            self._draw()

    def line(self) -> str:
        elapsed = time.monotonic() - self._start
        frac = self.files / self.total if self.total else 1.0
        filled = round(self.width * min(frac, 1.0))
        rate = self.fragments / elapsed if elapsed > 0 else 0.0
        eta = elapsed / frac - elapsed if 0 < frac < 1 else 0.0
        return (
            f"{self.label} {self.files}/{self.total} files "
            f"[{'#' * filled}{'.' * (self.width - filled)}] {100 * frac:.1f}%  "
            f"{self.fragments} fragments  {rate:.1f}/s  "
            f"{'eta ' + _duration(eta) if 0 < frac < 1 else _duration(elapsed)}"
        )

    def _draw(self, final: bool = False) -> None:
        self._drawn = time.monotonic()
        text = self.line()
        if self._tty:
            pad = " " * max(0, self._last_len - len(text))
            self.stream.write("\r" + text + pad + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self._last_len = len(text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(final=True)
            self.enabled = False
