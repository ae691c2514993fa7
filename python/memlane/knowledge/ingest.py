"""Ingesting files and folders: the sources walked, handed to the pipeline
(``memlane.knowledge.pipeline``), and the documents of files gone pruned."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from memlane import coerce
from memlane.embeddings import TextTruncatedWarning
from memlane.errors import InvalidArgumentError, NotFoundError
from memlane.knowledge.documents import (
    ALONE,
    DOCUMENTS,
    knowledge_documents,
    knowledge_only,
    remove_documents,
)
from memlane.knowledge.ids import normalise_path
from memlane.knowledge.pipeline import IngestOptions, Owner, Pipeline
from memlane.knowledge.progress import ProgressBar
from memlane.knowledge.report import IngestReport
from memlane.knowledge.walk import Source, exists, hidden, relative_path, resolve, walk

if TYPE_CHECKING:
    from memlane.store import MemoryStore

__all__ = ["ingest_path", "ingest_sources", "prune", "roots_apart"]

# Why a walk leaves out a folder below its root that is a root of its own, and a file
# ingested alone (roots_apart).
ROOT_APART = "a root of its own (ingested separately)"
FILE_APART = "a document of its own (ingested alone)"


# -- entry points ---------------------------------------------------------------------------


def ingest_sources(
    mem: MemoryStore,
    sources: list[Source],
    scope: Owner,
    options: IngestOptions,
    *,
    root_key: str | None,
    report: IngestReport,
    label: str = "ingest",
    alone: bool = False,
) -> IngestReport:
    """Ingests ``sources`` under the root ``root_key``; ``alone``: a file's own folder
    made its root by ingesting that file alone (``_known_folder``)."""
    bar = ProgressBar(len(sources), enabled=options.progress, label=label)
    pipeline = Pipeline(
        mem, scope, options, root_key=root_key, progress=bar, report=report, alone=alone
    )
    truncated = report.truncated
    try:
        pipeline.run(sources)
    finally:
        bar.close()
    if report.truncated > truncated:
        cut = report.truncated - truncated
        message = (
            f"{cut} fragment(s) were longer than the embedding model reads: their vectors "
            "stand for their beginning (text search sees all of them); a smaller chunk_size, "
            "or the default chunkers (sized in the default model's tokens), avoid it"
        )
        warnings.warn(TextTruncatedWarning(message, count=cut), stacklevel=4)
    return report


def ingest_path(
    mem: MemoryStore,
    path: str | Path,
    scope: Owner,
    options: IngestOptions,
    *,
    root: str | Path | None = None,
    report_root: Path | None = None,
) -> IngestReport:
    """Ingests ``path`` below ``root`` (given, or the knowledge root it lies in, or its
    own folder); the report's paths are relative to that root, or to ``report_root``
    (a resolved folder) if given: ``ingest_config`` reports every entry's files so."""
    started = time.perf_counter()
    target = coerce.path(path, "path")
    if not exists(target):
        raise NotFoundError(f"no such file or folder: {target}")
    alone = False  # a root made by this file alone (see _known_folder)
    if root is not None:
        base = coerce.path(root, "root")
    elif target.is_dir():
        base, target = _known_folder(mem, target, scope) or (target, target)
    elif known := _known_file(mem, target, scope):
        base, target, alone = known
    else:
        base, target, alone = target.parent, target, True
    try:
        folder = base.is_dir()
    except OSError as e:  # a name longer than the system takes, a folder it hides
        raise InvalidArgumentError(
            f"root must be a folder: {str(base)[:200]}: {e.strerror}"
        ) from None
    if not folder:
        raise InvalidArgumentError(f"root must be a folder: {base}")
    report = IngestReport()
    root_key = str(base.resolve())
    apart = roots_apart(mem, scope, root_key, options.follow_outside)
    unread: set[str] = set()
    sources = walk(
        target,
        base,
        follow_outside=options.follow_outside,
        skipped=report.skipped,
        apart=apart,
        unread=unread,
    )
    label = target.name or "ingest"
    ingest_sources(
        mem, sources, scope, options, root_key=root_key, report=report, label=label, alone=alone
    )
    if options.prune_missing and target.is_dir():
        present = {s.rel for s in sources}
        prune(mem, scope, root_key, present, unread, target, base, report)
    report.seconds = time.perf_counter() - started
    if report_root is not None:
        report.rebase(relative_path(Path(root_key), report_root))
    return report


def _known_file(mem: MemoryStore, file: Path, scope: Owner) -> tuple[Path, Path, bool] | None:
    """The root and path of the scope's oldest document made from ``file`` (the same
    real file), if any, and whether that root is the file's own, made by ingesting it
    alone: ingested alone without a root, a file of a folder ingested before is ingested
    again under that folder, by the path it was found at, so its id is its document's,
    which it replaces rather than being a second document beside it.

    The document's path is below its root, so it ends as ``file`` ends, by the path
    given or by the real one.
    """
    real = file.resolve()
    tails: set[str] = set()
    for path in (Path(os.path.abspath(file)), real):
        parts = path.parts[1:]  # without the anchor: a relative path has none
        tails.update(normalise_path("/".join(parts[i:])) for i in range(len(parts)))
    stored = sorted(t for t in tails if storable(t))
    for record in knowledge_documents(mem, {**scope.filter(), "source": {"$in": stored}}):
        root, source = record.metadata.get("root"), str(record.metadata.get("source"))
        if isinstance(root, str) and (found := Path(root) / source).resolve() == real:
            return Path(root), found, record.metadata.get(ALONE) is True
    return None


def _known_folder(mem: MemoryStore, folder: Path, scope: Owner) -> tuple[Path, Path] | None:
    """The root and path of ``folder`` when it lies inside a knowledge root of the
    scope's (the nearest) ingested before: its files then keep the paths, and so the
    ids, they have under that root (``sub/s.txt``), rather than being ingested a second
    time as ``s.txt``, a copy that a pruning ingest of the root would never find.
    A folder that is a root itself stays its own.

    Only a root whose walk reaches the folder takes it: not through a hidden folder
    (``kb/.private``, which a pruning ingest of ``kb`` would prune as missing), and not a
    root that is a file's folder, made by ingesting that file alone (``home`` of
    ``home/todo.md`` takes no ``home/.notes/kb``, nor ``home/docs``: ``home`` was never
    walked). The real path is followed, which no link is on.
    """
    real = resolve(folder)
    for root in (real, *real.parents):
        if not storable(str(root)):
            continue
        rel = real.relative_to(root)
        flt = knowledge_only(mem, {**scope.filter(), "root": str(root), ALONE: {"$ne": True}})
        if not any(hidden(part) for part in rel.parts) and mem.count(DOCUMENTS, filters=flt):
            return None if root == real else (root, root / rel)
    return None


def roots_apart(
    mem: MemoryStore, scope: Owner, root_key: str, follow_outside: bool = False
) -> dict[Path, str]:
    """The folders below the root ``root_key`` that are roots of the scope's own (they
    have documents whose root is their real path: ``kb/sub``, ingested or watched as a
    root before ``kb``), and the files below it ingested alone, by real path -> why: a
    walk of ``root_key`` leaves them out (``walk``'s ``apart``), so their files are
    neither stored again under ``root_key`` nor pruned by it; the documents of the root
    apart stay its own, for its ingests and its watch. Read once per ingest or batch.

    The candidates are the folders the walk may reach (listed here, links followed
    where ``follow_outside``), and one document is read per root among them: what this
    reads grows with the folder ingested and its roots apart, not with the store's other
    roots or their documents."""
    folders = sorted(f for f in map(str, _folders(Path(root_key), follow_outside)) if storable(f))
    if not folders:
        return {}
    apart: dict[Path, str] = {}
    owner = scope.filter()
    found: set[str] = set()
    odd: list[str] = []  # records whose root is no string (a writer's own, not ingest's)
    while True:
        rest = [f for f in folders if f not in found]
        flt = {"$and": [owner, {"root": {"$in": rest}}, {"id": {"$nin": odd}}]}
        page = mem.list(DOCUMENTS, limit=1, filters=knowledge_only(mem, flt)) if rest else []
        if not page:
            return apart
        root = page[0].metadata.get("root")
        if not isinstance(root, str) or root not in rest:
            odd.append(page[0].id)
            continue
        found.add(root)
        roots = {"$and": [owner, {"root": root}]}
        walked = {"$and": [roots, {ALONE: {"$ne": True}}]}
        if mem.count(DOCUMENTS, filters=knowledge_only(mem, walked)):
            apart[Path(root)] = ROOT_APART
            continue
        # A root made by files ingested alone, never walked (_known_folder): those files.
        for record in knowledge_documents(mem, roots):
            try:
                file = resolve(Path(root) / str(record.metadata.get("source", "")))
            except OSError:
                continue
            apart.setdefault(file, FILE_APART)


def storable(path: str) -> bool:
    """Whether ``path`` can be a stored root or source, and so a filter's value: a
    name of bytes that are not UTF-8 holds lone surrogates, which no record holds."""
    return not any("\ud800" <= c <= "\udfff" for c in path)


def _folders(top: Path, follow_outside: bool) -> set[Path]:
    """The real paths of the folders below ``top`` a walk may reach (not ``top``), each
    once however many links lead to it."""
    seen: set[Path] = set()
    stack = [top]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if not entry.is_dir():  # follows a link, as the walk does
                    continue
                real = resolve(Path(entry.path))
            except OSError:
                continue
            if real == top or real in seen or not (follow_outside or top in real.parents):
                continue
            seen.add(real)
            stack.append(real)
    return seen


def prune(
    mem: MemoryStore,
    scope: Owner,
    root_key: str,
    present: set[str],
    unread: set[str],
    target: Path,
    base: Path,
    report: IngestReport,
) -> None:
    """Removes the scope's documents under ``target`` whose file was not found: not
    those under a path the walk could not look at (``unread``), whose files may be there."""
    hidden_from_walk = [p.rstrip("/") for p in unread]
    rel_target = relative_path(target, base)
    prefix = "" if rel_target == "." else rel_target + "/"
    gone: dict[str, str] = {}
    for record in knowledge_documents(mem, {**scope.filter(), "root": root_key}):
        rel = str(record.metadata.get("source", ""))
        if rel.startswith(prefix) and rel not in present and not _below(rel, hidden_from_walk):
            gone[rel] = record.id
    if gone:
        remove_documents(mem, list(gone.values()), scope.filter())
        report.pruned.update(gone)


def _below(rel: str, folders: list[str]) -> bool:
    """Whether ``rel`` is one of ``folders`` (relative paths; "." the root) or lies below one."""
    return any(f == "." or rel == f or rel.startswith(f + "/") for f in folders)
