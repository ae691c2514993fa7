"""``IngestReport``: what one ingestion did, file by file."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, fields
from typing import Any

from memlane.printable import printable

__all__ = ["IngestReport"]


@dataclass(slots=True)
class IngestReport:
    """The outcome of [`Memory.ingest`][memlane.Memory.ingest] and its siblings.

    Paths are relative to their knowledge root (POSIX separators); in the report of
    [`ingest_config`][memlane.Memory.ingest_config], to its ``root``.

    Attributes:
        seen: files (or texts) considered, excluding those skipped.
        ingested: documents stored for the first time, as path -> document id.
        unchanged: documents whose file and settings have not changed (nothing written).
        replaced: documents whose changed file replaced their fragments, path -> id.
        failed: files that could not be read or parsed, path -> reason; the
            others were ingested all the same.
        skipped: hidden files, unsupported types, empty files and paths that
            lead outside the root, path -> reason.
        pruned: documents removed because their file is gone, path -> id.
        limited: documents refused by an [`IngestLimits`][memlane.knowledge.IngestLimits] limit,
            path -> which limit and by how much (also in ``failed``; nothing of them
            is stored, and an earlier version of the document stays as it was).
        fragments: fragments written.
        truncated: fragments longer than the embedding model reads (their vectors
            stand for their beginning), as the model reported them.
        seconds: wall time.
    """

    seen: int = 0
    ingested: dict[str, str] = field(default_factory=dict)
    unchanged: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    pruned: dict[str, str] = field(default_factory=dict)
    limited: dict[str, str] = field(default_factory=dict)
    fragments: int = 0
    truncated: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when no file failed."""
        return not self.failed

    @property
    def documents(self) -> dict[str, str]:
        """Every document present after the run (ingested, replaced, unchanged), path -> id."""
        return {**self.unchanged, **self.ingested, **self.replaced}

    def merge(self, other: IngestReport) -> None:
        """Adds ``other``'s counts and files to this report (for several roots in one run)."""
        self.seen += other.seen
        for mine, theirs in (
            (self.ingested, other.ingested),
            (self.unchanged, other.unchanged),
            (self.replaced, other.replaced),
            (self.failed, other.failed),
            (self.skipped, other.skipped),
            (self.pruned, other.pruned),
            (self.limited, other.limited),
        ):
            mine.update(theirs)
        self.fragments += other.fragments
        self.truncated += other.truncated
        self.seconds += other.seconds

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (what ``memlane ingest --json`` prints and the
        server answers): ``ok`` and every field."""
        return {"ok": self.ok, **{f.name: getattr(self, f.name) for f in fields(self)}}

    def rebase(self, folder: str) -> None:
        """Makes its paths relative to another folder, from which ``folder`` is the path
        to their root (``"docs"``: ``a.md`` becomes ``docs/a.md``; a folder's path keeps
        its closing ``/``)."""
        if folder in ("", "."):
            return
        for f in fields(self):
            paths = getattr(self, f.name)
            if isinstance(paths, dict):
                rebased = {_joined(folder, path): v for path, v in paths.items()}
                paths.clear()
                paths.update(rebased)

    def summary(self) -> str:
        """One line: the counts."""
        parts = [
            f"{self.seen} seen",
            f"{len(self.ingested)} ingested",
            f"{len(self.unchanged)} unchanged",
            f"{len(self.replaced)} replaced",
            f"{len(self.failed)} failed",
            f"{len(self.skipped)} skipped",
        ]
        if self.pruned:
            parts.append(f"{len(self.pruned)} pruned")
        if self.limited:
            parts.append(f"{len(self.limited)} over a size limit")
        cut = f" ({self.truncated} cut by the model's length limit)" if self.truncated else ""
        return (
            ", ".join(parts) + f"; {self.fragments} fragments written{cut} in {self.seconds:.1f} s"
        )

    def __str__(self) -> str:
        """The summary, then the files that failed, were skipped or pruned, a line each;
        a file's name and reason as a terminal is to show them (``printable``): they
        come from the folder ingested."""
        lines = [self.summary()]
        for title, items in (("failed", self.failed), ("skipped", self.skipped)):
            if items:
                lines.append(f"{title}:")
                lines.extend(
                    f"  {printable(path)}: {printable(reason)}"
                    for path, reason in sorted(items.items())
                )
        if self.pruned:
            lines.append("pruned:")
            lines.extend(f"  {printable(path)}" for path in sorted(self.pruned))
        return "\n".join(lines)


def _joined(folder: str, path: str) -> str:
    joined = posixpath.normpath(posixpath.join(folder, path))
    return joined + "/" if path.endswith("/") else joined
