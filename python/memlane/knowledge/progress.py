"""The ingest progress bar on stderr, drawn by tqdm.

tqdm rather than rich: it is one small pure-Python package with no dependency of
its own; rich would bring pygments and more for a single bar.
tqdm gives the rate, the ETA, terminal-width handling and redraw throttling that
the hand-written bar lacked.

The bar counts files, and moves within a write batch as its fragments are
embedded (a batch of 2,048 fragments may hold every file of a small folder, so
counting only finished files showed 0% until the end).
"""

from __future__ import annotations

import sys
from typing import Any, Literal, TextIO

from memlane.printable import printable

__all__ = ["ProgressBar", "ProgressOption"]

#: ``True``: a bar when stderr is a terminal; ``"always"``: a bar regardless; ``False``: none.
ProgressOption = bool | Literal["always"]

# tqdm puts ", " before the postfix: "[00:04<00:06, 2.95 files/s, 12/30 files, 210 fragments 51/s]"
_FORMAT = "{desc}: {percentage:5.1f}%|{bar}| [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


class ProgressBar:
    """``ingest:  42.0%|████▏    | [00:04<00:06, 2.95 files/s, 12/30 files, 210 fragments 51.2/s]``.

    ``update`` counts finished files and embedded fragments. Between
    ``start_batch`` and the files of that batch finishing, each embedded
    fragment moves the bar by its share of the batch's files, so the bar, the
    rate and the ETA move while the model runs. Redraws at most every
    ``interval`` seconds (and at ``close``).
    """

    def __init__(
        self,
        total: int,
        *,
        enabled: ProgressOption = True,
        stream: TextIO | None = None,
        label: str = "ingest",
        interval: float = 0.5,
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        tty = bool(isatty()) if callable(isatty) else False
        self.enabled = enabled == "always" or (enabled is True and tty)
        self.total = max(0, total)
        self.files = 0
        self.fragments = 0
        self._batch_files = 0
        self._batch_fragments = 0
        self._credit = 0.0  # bar units moved ahead of finished files, within the batch
        self._bar: Any = None
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total,
                desc=printable(label),  # a folder's name: no escape reaches the terminal
                unit=" files",
                file=self.stream,
                mininterval=interval,
                miniters=0,
                smoothing=0.1,
                dynamic_ncols=tty,
                ncols=None if tty else 100,
                bar_format=_FORMAT,
                postfix=self._postfix(),
                leave=True,
            )

    def _postfix(self) -> str:
        text = f"{self.files}/{self.total} files, {self.fragments} fragments"
        elapsed = self._bar.format_dict["elapsed"] if self._bar is not None else 0.0
        if self.fragments and elapsed > 0:
            text += f" {self.fragments / elapsed:.1f}/s"
        return text

    def start_batch(self, files: int, fragments: int) -> None:
        """The next ``fragments`` embedded belong to these ``files`` files."""
        self._batch_files = max(0, files)
        self._batch_fragments = max(0, fragments)
        self._credit = 0.0

    def update(self, files: int = 0, fragments: int = 0) -> None:
        """``files`` more finished (ingested, unchanged, skipped or failed) and
        ``fragments`` more embedded."""
        self.files += files
        self.fragments += fragments
        step = 0.0
        if fragments and self._batch_fragments:
            # The batch's share, never more than its files (a retry embeds again).
            ahead = self._batch_files * fragments / self._batch_fragments
            ahead = min(ahead, self._batch_files - self._credit)
            self._credit += ahead
            step += ahead
        if files:
            taken = min(self._credit, float(files))
            self._credit -= taken
            step += files - taken
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            if step:
                self._bar.update(step)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.close()
            self._bar = None
        self.enabled = False
