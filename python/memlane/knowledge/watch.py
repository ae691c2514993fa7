"""Keeping a knowledge folder in sync as its files appear, change and vanish.

``watch`` first brings the store in line with the folder (an ingest that
prunes what is gone), then follows the operating system's file events through
watchdog's ``Observer``. Events only say *which paths*
to look at: they are gathered until the folder has been quiet for ``debounce``
seconds (an editor's save, a ``git checkout`` or a copy is a burst of them), and
then each path's state on disk decides what happens. A path that is a file is
ingested (unchanged bytes are left alone; a changed file replaces only its own
document), a folder's files too, and a path that no longer exists removes the
documents at or below it with their fragments. Which path stands for a file reached
by two (a link to it) is decided as an ingest decides it, from a walk of the whole
folder: a second path is skipped, and its document, if it had one, removed. Paths the
ingest would skip (hidden names, unsupported types) are ignored, so editors' swap and
backup files never reach the store. A folder deleted and made again (or another one
renamed in its place) is followed again once it is back, and synced whole; the watch
looks every ``_CHECK`` seconds, since the observer says nothing of it. A symbolic link
put in its place that leads elsewhere is not followed unless ``follow_outside``: it is
said to ``on_error`` once, and the watch keeps waiting for the folder.
"""

from __future__ import annotations

import dataclasses
import logging
import stat
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from memlane import coerce
from memlane.errors import InvalidArgumentError, MemlaneError, NotFoundError, shown
from memlane.knowledge.documents import knowledge_documents, remove_documents
from memlane.knowledge.ingest import ingest_path, ingest_sources, roots_apart
from memlane.knowledge.loaders import loader_for
from memlane.knowledge.pipeline import IngestOptions, Owner
from memlane.knowledge.report import IngestReport
from memlane.knowledge.walk import Source, exists, relative_path, resolve, walk

if TYPE_CHECKING:
    from memlane.store import MemoryStore

__all__ = ["DEBOUNCE", "KnowledgeWatch", "watch"]

#: Seconds of quiet after the last file event before the changes are ingested.
DEBOUNCE = 0.5
# The longest a stop() waits for the worker to notice it.
_TICK = 0.1
# Seconds between two looks at whether the folder followed is still there.
_CHECK = 1.0

ReportCallback = Callable[[IngestReport], object]
ErrorCallback = Callable[[BaseException], object]


log = logging.getLogger("memlane.knowledge")


class _Events(FileSystemEventHandler):
    """Collects the paths of watchdog's events (from its observer thread)."""

    def __init__(self, changed: Callable[[str], None], root: str, lost: Callable[[], None]) -> None:
        self._changed = changed
        self._root = root
        self._lost = lost

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return  # reads change nothing
        if event.event_type in ("deleted", "moved") and event.src_path == self._root:
            # The folder itself: its inotify watch is gone, even if a folder is made
            # again at once (often with the same inode number, which a look cannot tell).
            self._lost()
        if event.is_directory and event.event_type == "modified":
            return  # a folder's own times: the files inside have events of their own
        for path in (event.src_path, getattr(event, "dest_path", "")):
            if path:
                self._changed(path if isinstance(path, str) else path.decode())


class KnowledgeWatch:
    """A running [`Memory.watch`][memlane.Memory.watch]; [`stop`][memlane.KnowledgeWatch.stop]
    it, or use it as a context manager.

    ``folder`` is the folder followed (absolute), ``initial`` the report of the first
    sync; every later batch of changes goes to its ``on_report``.
    """

    def __init__(
        self,
        mem: MemoryStore,
        folder: Path,
        scope: Owner,
        options: IngestOptions,
        debounce: float,
        on_report: ReportCallback | None,
        on_error: ErrorCallback | None,
    ) -> None:
        self.folder = folder
        self._mem = mem
        self._scope = scope
        self._options = options
        self._debounce = debounce
        self._on_report = on_report
        self._on_error = on_error
        self._root_key = str(folder.resolve())
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._last_event = 0.0
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._identity = _identity(folder)
        # The folder is its own root, even inside a root ingested before: the events'
        # paths are taken relative to it.
        self.initial = ingest_path(mem, folder, scope, options, root=folder)
        self._observer = Observer()
        self._observer.schedule(self._events(), str(folder), recursive=True)
        self._worker = threading.Thread(target=self._run, daemon=True, name="memlane-watch")
        self._observer.start()
        self._worker.start()

    @property
    def running(self) -> bool:
        """Whether the watch still follows the folder."""
        return not self._stopped.is_set()

    def stop(self) -> None:
        """Stops following the folder; changes still waiting for quiet are applied first."""
        if self._stopped.is_set():
            return
        self._observer.stop()
        self._observer.join()
        self._stopped.set()
        self._wake.set()
        self._worker.join()

    def __enter__(self) -> KnowledgeWatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"KnowledgeWatch({self.folder!s}, {state})"

    # -- the observer's side ------------------------------------------------------------

    def _events(self) -> _Events:
        return _Events(self._changed, str(self.folder), self._lose)

    def _lose(self) -> None:
        with self._lock:
            self._identity = None  # followed again once a folder is back (_run)
            self._last_event = time.monotonic()
        self._wake.set()

    def _changed(self, path: str) -> None:
        with self._lock:
            self._pending.add(path)
            self._last_event = time.monotonic()
        self._wake.set()

    # -- the worker's side --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            # Woken by an event, or now and then to see the folder is still the one
            # followed (the observer says nothing when it is deleted or replaced).
            self._wake.wait(_CHECK)
            while not self._stopped.is_set():  # until the burst is over
                with self._lock:
                    quiet = time.monotonic() - self._last_event
                if quiet >= self._debounce:
                    break
                self._stopped.wait(min(self._debounce - quiet, _TICK))
            with self._lock:
                paths, self._pending = self._pending, set()
                self._wake.clear()
            if paths:
                self._apply(paths)
            if self._stopped.is_set():
                return
            with self._lock:
                followed = self._identity
            if _identity(self.folder) != followed:
                self._follow_again()

    def _follow_again(self) -> None:
        """Follows the folder again once it is back (deleted and made again, or another
        folder renamed in its place), and syncs it whole, as the watch's first sync does.
        While it is gone nothing happens: its files' events removed their documents."""
        identity = _identity(self.folder)
        if identity is None:
            with self._lock:
                self._identity = None  # gone: any folder made there is followed
            return
        if (away := self._elsewhere()) is not None:
            # Another folder's link in its place (mv kb kb.old; ln -s ../secret kb): what
            # it leads to was never watched, so it is not followed, as a walk does not
            # follow a link to outside its root. Said once; the watch goes on waiting,
            # and follows a folder (or a link to this one) made there later.
            self._observer.unschedule_all()
            with self._lock:
                self._identity = identity
            self._failed(
                MemlaneError(
                    f"{self.folder} now leads to {away}, outside the folder watched "
                    f"({self._root_key}): not followed (follow_outside=False)"
                )
            )
            return
        try:
            self._observer.unschedule_all()
            self._observer.schedule(self._events(), str(self.folder), recursive=True)
        except OSError:  # gone again meanwhile: tried at the next check
            return
        with self._lock:
            self._identity = identity
        options = dataclasses.replace(self._options, prune_missing=True, progress=False)
        try:
            report = ingest_path(self._mem, self.folder, self._scope, options, root=self.folder)
        except Exception as e:  # said as any sync's error is
            self._failed(e)
            return
        self._report(report)

    def _elsewhere(self) -> str | None:
        """Where the folder's path leads (its real path) when that is not the folder
        watched and ``follow_outside`` is off, else None: a link put in its place."""
        if self._options.follow_outside:
            return None
        try:
            real = str(resolve(self.folder))
        except OSError as e:
            return f"nowhere ({e.strerror or e})"
        return None if real == self._root_key else real

    def _apply(self, paths: set[str]) -> None:
        try:
            report = self._sync(paths)
        except Exception as e:  # the watch goes on: a closed store or a full disk is said
            self._failed(e)
            return
        if report.seen + len(report.pruned):
            self._report(report)

    # The caller's callbacks run on the worker: one that raises is said, never lets the
    # worker die (the watch would stop following while ``running`` still says it does).

    def _report(self, report: IngestReport) -> None:
        if self._on_report is None:
            return
        try:
            self._on_report(report)
        except Exception as e:
            self._failed(e)

    def _failed(self, error: Exception) -> None:
        if self._on_error is not None:
            try:
                self._on_error(error)
                return
            except Exception as e:
                error = MemlaneError(f"on_error raised {shown(e)} for: {error}")
        try:
            warnings.warn(f"memlane watch of {self.folder}: {error}", RuntimeWarning, stacklevel=1)
        except Exception:  # warnings made errors: the log says it
            log.error("memlane watch of %s: %s", self.folder, error)

    def _sync(self, paths: set[str]) -> IngestReport:
        """Brings the documents at ``paths`` (below the folder) in line with the disk."""
        started = time.perf_counter()
        report = IngestReport()
        changed: set[str] = set()
        gone: set[str] = set()
        if self._elsewhere() is not None:  # swapped for a link: _follow_again says it
            return report
        for raw in sorted(paths):
            path = Path(raw)
            rel = relative_path(path, self.folder)
            if rel == "." or rel.startswith("../") or _ignored(rel, path):
                continue
            (changed if path.exists() else gone).add(rel)
        sources: list[Source] = []
        if changed:
            # The whole folder is walked (names and links; no file is read), as an ingest
            # walks it: a file reached by two paths (a link to it) is one document, under
            # the path the ingest keeps, which only the whole folder tells. A folder
            # below that is a root of its own is left out, as an ingest leaves it out:
            # its events store and remove nothing under this root.
            skipped: dict[str, str] = {}
            same: dict[str, str] = {}
            unread: set[str] = set()
            found = walk(
                self.folder,
                self.folder,
                follow_outside=self._options.follow_outside,
                skipped=skipped,
                same=same,
                apart=roots_apart(
                    self._mem, self._scope, self._root_key, self._options.follow_outside
                ),
                unread=unread,
            )
            related = _related_to(changed)
            sources = [s for s in found if related(s.rel)]
            # What the walk leaves out is said, as ingest says it, and its document,
            # if it had one, goes: a file replaced by a link to outside the root must
            # not stay searchable with its old text. Not what it could not look at:
            # a folder it may not list may still hold its files.
            left = {r: why for r, why in skipped.items() if related(r.rstrip("/"))}
            report.skipped.update(left)
            gone.update(r.rstrip("/") for r in left if r not in unread)
            # So does the document of another path to a changed file: its text is old.
            gone.update(other for other, rel in same.items() if related(rel))
        if gone:
            self._remove(gone, {s.rel for s in sources}, report)
        if sources:
            ingest_sources(
                self._mem,
                sources,
                self._scope,
                self._options,
                root_key=self._root_key,
                report=report,
                label=self.folder.name,
            )
        report.seconds = time.perf_counter() - started
        return report

    def _remove(self, gone: set[str], present: set[str], report: IngestReport) -> None:
        """Removes the documents whose source is, or lies below, a path that is gone or
        that the walk leaves out."""
        doomed: dict[str, str] = {}
        for record in knowledge_documents(
            self._mem, {**self._scope.filter(), "root": self._root_key}
        ):
            source = str(record.metadata.get("source", ""))
            if source in present:
                continue
            if any(source == g or source.startswith(g + "/") for g in gone):
                doomed[source] = record.id
        if doomed:
            remove_documents(self._mem, list(doomed.values()), self._scope.filter())
            report.pruned.update(doomed)


def _related_to(changed: set[str]) -> Callable[[str], bool]:
    """Whether a path is one of ``changed``, lies below one, or is a folder holding one
    (a look-up per part of the path: a checkout changes many files of a large folder)."""
    holders: set[str] = set()
    for path in changed:
        parts = path.split("/")
        holders.update("/".join(parts[:i]) for i in range(1, len(parts)))

    def related(rel: str) -> bool:
        parts = rel.split("/")
        return rel in holders or any(
            "/".join(parts[:i]) in changed for i in range(1, len(parts) + 1)
        )

    return related


def _identity(folder: Path) -> tuple[int, int] | None:
    """Which folder is at ``folder`` (device and inode), or None if none is."""
    try:
        info = folder.stat()
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None


def _ignored(rel: str, path: Path) -> bool:
    """Whether the ingest would leave ``path`` out: a hidden name, or a file of a type
    no loader reads (a path that is gone may have been either a file or a folder)."""
    if any(part.startswith(".") for part in rel.split("/")):
        return True
    return path.is_file() and loader_for(path) is None


def watch(
    mem: MemoryStore,
    folder: str | Path,
    scope: Owner,
    options: IngestOptions,
    *,
    debounce: float = DEBOUNCE,
    on_report: ReportCallback | None = None,
    on_error: ErrorCallback | None = None,
) -> KnowledgeWatch:
    """Syncs ``folder`` once, then follows it until the returned watch is stopped."""
    debounce = coerce.number(debounce, "debounce", 0.0, 3600.0)
    for name, callback in (("on_report", on_report), ("on_error", on_error)):
        if callback is not None and not callable(callback):
            raise InvalidArgumentError(f"{name} must be callable, got {shown(callback)}")
    target = coerce.path(folder, "folder").absolute()  # event paths are relative to it
    if not exists(target):
        raise NotFoundError(f"no such folder: {target}")
    if not target.is_dir():
        raise InvalidArgumentError(f"watch needs a folder, got the file {target}")
    return KnowledgeWatch(mem, target, scope, options, debounce, on_report, on_error)
