"""The knowledge methods of :class:`memlane.Memory` (``AsyncMemory`` runs them in a thread).

:class:`KnowledgeMixin` gives ``Memory`` ``ingest``, ``ingest_config``,
``ingest_text``, ``watch``, ``search_knowledge``, ``search_documents``,
``list_documents``, ``get_fragments``, ``remove_document`` and
``clear_knowledge``; they use only ``Memory``'s public API. Knowledge lives in
two tables: ``documents`` (a record per document: its whole extracted text,
``title`` metadata, and the normalised mean of its fragments' vectors) and
``fragments`` (the chunks, ``{document_id}-chunk-{n}``),
with metadata ``document_id``, ``position``, ``total``, ``start``, ``end``
(offsets into the document's extracted text), ``source`` (path relative to the
knowledge root), ``file_type``, ``shared`` and ``agent_id``, plus ``page`` and
``page_end`` for PDFs and ``headings`` for markdown and Word files.

As in elizaOS, shared knowledge (``shared=True``) is read by every agent and an
agent's own (``shared=False``) only by that agent: :meth:`search_knowledge` runs
one engine search filtered to "shared, or this agent's", so another agent's
private fragments are never candidates.
"""

from __future__ import annotations

import builtins
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from memlane import coerce
from memlane._core import DEFAULT_ALPHA
from memlane.chunking import Chunker
from memlane.embeddings.lazy import DEFAULT_DIMENSION, DEFAULT_NAME
from memlane.errors import InvalidArgumentError
from memlane.knowledge.documents import (
    DOCUMENTS,
    FRAGMENTS,
    check_document_id,
    knowledge_documents,
    list_all,
    remove_documents,
)
from memlane.knowledge.ids import normalise_path
from memlane.knowledge.ingest import BATCH_SIZE, IngestOptions, Scope, ingest_path, ingest_sources
from memlane.knowledge.loaders import LOADERS, IngestLimits
from memlane.knowledge.progress import ProgressOption
from memlane.knowledge.report import IngestReport
from memlane.knowledge.walk import Source, inside
from memlane.knowledge.watch import DEBOUNCE, KnowledgeWatch, watch

if TYPE_CHECKING:
    from memlane._memory.store import MemoryStore as Memory
    from memlane.records import MemoryRecord, SearchHit

__all__ = [
    "DOCUMENT_THRESHOLD",
    "FRAGMENT_THRESHOLD",
    "SEARCH_DEFAULTS",
    "KnowledgeMixin",
    "Threshold",
]

#: Fusion settings of :meth:`KnowledgeMixin.search_knowledge`: those of
#: :meth:`memlane.Memory.search`, one default for the whole engine (weighted fusion of the
#: cosine and BM25 over the query's ceiling, chosen on SciFact's 809 train queries:
#: ``benches/tune_search.py``; the test figures are in the README).
SEARCH_DEFAULTS: dict[str, Any] = {"fusion": "weighted", "alpha": DEFAULT_ALPHA}

#: A knowledge search's cut-off: a number, ``None`` (none) or ``"default"``.
Threshold = float | None | Literal["default"]

#: Default cut-off of :meth:`KnowledgeMixin.search_knowledge` (hybrid and vector
#: modes, default model): a minimum cosine similarity. elizaOS's 0.85 suits its own
#: model; with all-MiniLM-L6-v2 it would drop most relevant hits. Chosen by
#: ``benches/tune_knowledge_threshold.py`` on SciFact's abstracts ingested as files: the
#: highest cosine keeping at least 99% of the relevant fragments of the top 5 on the
#: 809 *train* queries (99.4%). On the 300 *test* queries it keeps 98.3% of them (nDCG@5
#: 0.719 -> 0.706) and leaves 67.8% of 500 off-topic questions (WordNet glosses) with
#: no hit, where without a cut-off each gets five: an agent asked about what its
#: knowledge does not hold gets nothing rather than the nearest text. A 95% target
#: (0.45) would silence 91.6% of them but cost 7.4% of the relevant hits on test
#: (nDCG@5 0.672): too much for a default.
FRAGMENT_THRESHOLD = 0.36

#: Default cut-off of :meth:`KnowledgeMixin.search_documents`: a minimum cosine to a
#: document's mean vector, chosen alike (train: 99.0% of the relevant documents of the
#: top 5 kept; test: 99.6% kept, nDCG@5 0.722 -> 0.720; 40.6% of the off-topic
#: questions get no document). A mean vector sits closer to the middle of its
#: fragments than any one of them to a query, hence the lower figure.
DOCUMENT_THRESHOLD = 0.29


def _default_model(mem: Memory) -> bool:
    """Whether ``mem`` embeds with the default model, the one the cut-offs are measured for."""
    embedder = mem.embedder
    return (
        embedder is not None
        and embedder.name == DEFAULT_NAME
        and int(embedder.dimension) == DEFAULT_DIMENSION
    )


def _visible_filter(agent_id: str | None) -> dict[str, Any]:
    if agent_id is None:
        return {"shared": True}
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise InvalidArgumentError(f"agent_id must be a non-empty str, got {agent_id!r}")
    return {"$or": [{"shared": True}, {"shared": False, "agent_id": agent_id}]}


def _documents_filter(agent_id: str | None, shared: bool | None) -> dict[str, Any] | None:
    if shared is not None and not isinstance(shared, bool):
        raise InvalidArgumentError(f"shared must be a bool or None, got {type(shared).__name__}")
    if shared is True:
        return {"shared": True}
    if shared is False:
        return {"shared": False} if agent_id is None else Scope.of(agent_id, False).filter()
    return None if agent_id is None else _visible_filter(agent_id)


class KnowledgeMixin:
    """Document ingestion and retrieval (elizaOS's RAG knowledge) for :class:`~memlane.Memory`."""

    def _memory(self) -> Memory:
        return cast("Memory", self)  # mixed into memlane.Memory, a MemoryStore

    def ingest(
        self,
        path: str | Path,
        *,
        agent_id: str | None = None,
        shared: bool = False,
        chunker: Chunker | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressOption = True,
        prune_missing: bool = False,
        root: str | Path | None = None,
        follow_outside: bool = False,
        batch_size: int = BATCH_SIZE,
        limits: IngestLimits | None = None,
    ) -> IngestReport:
        """Ingests a file, or every supported file in a folder and its subfolders.

        Args:
            path: a file or a folder.
            agent_id: the agent whose own knowledge this is (required unless ``shared``).
            shared: knowledge every agent may read (its ids ignore ``agent_id``).
            chunker: by default :class:`~memlane.chunking.MarkdownSplitter` for
                markdown and Word files, :class:`~memlane.chunking.RecursiveCharacterSplitter`
                for the rest (1000 characters, overlap 200).
            metadata: added to every document and fragment (filterable).
            progress: a bar on stderr when it is a terminal; ``"always"`` or ``False``.
            prune_missing: remove this scope's documents under ``path`` whose file is gone.
            root: the knowledge root that ids are relative to; by default ``path``
                itself (a folder) or its folder (a file).
            follow_outside: follow symbolic links (and a ``path`` with ``..``) that
                lead outside ``root``; by default they are skipped and reported.
            batch_size: fragments embedded and written together (one transaction);
                larger groups sort better by length, so the model pads less.
            limits: how large one document may be (bytes unpacked, fragments); by
                default :class:`~memlane.knowledge.IngestLimits`'s. A document over a
                limit is reported in ``failed`` and ``limited`` and nothing of it stored.

        Unchanged files (same bytes, chunker and metadata) are not touched; a
        changed one replaces its document. Hidden files, unsupported types and
        links out of the root are skipped; unreadable files are reported as
        failed and the rest ingested. Returns an :class:`IngestReport`.
        """
        return ingest_path(
            self._memory(),
            path,
            Scope.of(agent_id, shared),
            IngestOptions(
                chunker, metadata, progress, prune_missing, follow_outside, batch_size, limits
            ),
            root=root,
        )

    def ingest_config(
        self,
        entries: Sequence[Mapping[str, Any] | str],
        *,
        agent_id: str | None = None,
        root: str | Path | None = None,
        chunker: Chunker | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressOption = True,
        prune_missing: bool = False,
        follow_outside: bool = False,
        limits: IngestLimits | None = None,
    ) -> IngestReport:
        """Ingests an elizaOS-style knowledge list in one report.

        Each entry is ``{"directory": ..., "shared": bool}``, ``{"path": ...,
        "shared": bool}`` (optionally with its own ``"metadata"``), or a plain
        string of knowledge text. Paths are relative to ``root`` (by default
        the current folder) and may not lead outside it unless
        ``follow_outside``; such an entry, or a missing one, is reported as
        failed and the others are ingested.
        """
        if isinstance(entries, str | Mapping):
            raise InvalidArgumentError("entries must be a list of dicts (or strings)")
        base = Path.cwd() if root is None else Path(root)
        real_base = base.resolve()
        report = IngestReport()
        started = time.perf_counter()
        for i, entry in enumerate(entries):
            if isinstance(entry, str):
                digest = hashlib.sha256(entry.encode()).hexdigest()[:16]
                part = self.ingest_text(
                    entry,
                    source=f"inline:{digest}",
                    agent_id=agent_id,
                    shared=agent_id is None,
                    chunker=chunker,
                    metadata=metadata,
                    limits=limits,
                )
                report.merge(part)
                continue
            if not isinstance(entry, Mapping):
                raise InvalidArgumentError(f"entries[{i}] must be a dict or a str")
            unknown = set(entry) - {"directory", "path", "shared", "metadata"}
            where = entry.get("directory", entry.get("path"))
            if unknown or not isinstance(where, str) or ("directory" in entry) == ("path" in entry):
                raise InvalidArgumentError(
                    f"entries[{i}] must have exactly one of 'directory' or 'path' (a str), and "
                    f"optionally 'shared' and 'metadata'; got {dict(entry)!r}"
                )
            shared = entry.get("shared", False)
            scope = Scope.of(agent_id, shared)
            target = base / where
            label = normalise_path(where)
            if not follow_outside and not inside(target.resolve(), real_base):
                report.failed[label] = "outside the knowledge root"
                continue
            if not target.exists():
                report.failed[label] = "no such file or folder"
                continue
            if ("directory" in entry) != target.is_dir():
                kind = "a folder" if "directory" in entry else "a file"
                report.failed[label] = f"not {kind}"
                continue
            extra = {**(metadata or {}), **(entry.get("metadata") or {})}
            options = IngestOptions(
                chunker, extra or None, progress, prune_missing, follow_outside, limits=limits
            )
            report.merge(ingest_path(self._memory(), target, scope, options))
        report.seconds = time.perf_counter() - started
        return report

    def ingest_text(
        self,
        text: str,
        *,
        source: str,
        agent_id: str | None = None,
        shared: bool = False,
        file_type: str = "txt",
        chunker: Chunker | None = None,
        metadata: Mapping[str, Any] | None = None,
        limits: IngestLimits | None = None,
    ) -> IngestReport:
        """Ingests a text as a document named ``source`` (e.g. ``"inline:faq"``).

        ``file_type`` picks the loader (``"txt"``, ``"md"``, ``"json"``, ...);
        the same source again replaces the document, unless the text is unchanged.
        ``limits`` as for :meth:`ingest`.
        """
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
        if not isinstance(source, str) or not source.strip():
            raise InvalidArgumentError("source must be a non-empty str")
        coerce.clean(text, "text", nul=True)
        coerce.clean(source, "source")
        loader = LOADERS.get("." + str(file_type).lower().lstrip("."))
        if loader is None:
            raise InvalidArgumentError(
                f"file_type must be one of {sorted(s[1:] for s in LOADERS)}, got {file_type!r}"
            )
        started = time.perf_counter()
        report = IngestReport()
        item = Source(normalise_path(source), loader, data=text.encode("utf-8"))
        options = IngestOptions(chunker, metadata, progress=False, limits=limits)
        scope = Scope.of(agent_id, shared)
        ingest_sources(self._memory(), [item], scope, options, root_key=None, report=report)
        report.seconds = time.perf_counter() - started
        return report

    def watch(
        self,
        path: str | Path,
        *,
        agent_id: str | None = None,
        shared: bool = False,
        chunker: Chunker | None = None,
        metadata: Mapping[str, Any] | None = None,
        follow_outside: bool = False,
        limits: IngestLimits | None = None,
        debounce: float = DEBOUNCE,
        on_report: Callable[[IngestReport], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
    ) -> KnowledgeWatch:
        """Keeps the knowledge of the folder ``path`` in sync until the watch is stopped.

        First an :meth:`ingest` of the folder that also removes the documents of
        files gone since (its report is the watch's ``initial``); then, on the
        operating system's file events (watchdog), each batch of changes once the
        folder has been quiet for ``debounce`` seconds: a new or changed file is
        ingested (only its own document is replaced), a deleted file or folder
        takes its documents and fragments with it, and files :meth:`ingest` skips
        (hidden, unsupported types) are ignored. Each batch's report goes to
        ``on_report``, an error that stops a batch (a closed store, a full disk) to
        ``on_error`` (by default a warning), and the watch goes on. The other
        options are :meth:`ingest`'s. Use it as ``with mem.watch(folder, ...):``
        or call ``stop()``, before closing the store.
        """
        options = IngestOptions(
            chunker,
            metadata,
            progress=False,
            prune_missing=True,  # the first sync: files gone meanwhile take their documents
            follow_outside=follow_outside,
            limits=limits,
        )
        scope = Scope.of(agent_id, shared)
        return watch(
            self._memory(),
            path,
            scope,
            options,
            debounce=debounce,
            on_report=on_report,
            on_error=on_error,
        )

    def search_knowledge(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        k: int = 5,
        threshold: Threshold = "default",
        mode: Literal["hybrid", "vector", "text"] = "hybrid",
        filters: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> builtins.list[SearchHit]:
        """The ``k`` fragments best matching ``query`` in shared knowledge and ``agent_id``'s own.

        Without ``agent_id``, shared knowledge only. ``threshold`` is a minimum
        cosine similarity (elizaOS's ``match_threshold``); in text mode, a
        minimum relevance (BM25 over the query's ceiling, the score no fragment
        reaches). ``"default"`` is :data:`FRAGMENT_THRESHOLD` in hybrid and vector
        modes with the default model (it was measured for that model's cosines), and
        no cut-off in text mode or with another embedder (pass a number measured for
        it); ``None`` is no cut-off. Scores are the relevance
        alone (knowledge neither decays nor weighs importance). ``filters``
        narrows by metadata (e.g. ``{"file_type": "pdf"}``); ``options`` go to
        :meth:`memlane.Memory.search` (``fusion``, ``rrf_k``, ``alpha``,
        ``candidates``, ``explain``, ...) over :data:`SEARCH_DEFAULTS`.
        """
        return self._search(
            FRAGMENTS, FRAGMENT_THRESHOLD, query, agent_id, k, threshold, mode, filters, options
        )

    def search_documents(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        k: int = 5,
        threshold: Threshold = "default",
        mode: Literal["hybrid", "vector", "text"] = "hybrid",
        filters: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> builtins.list[SearchHit]:
        """The ``k`` whole documents best matching ``query``, as :meth:`search_knowledge`.

        A hit's record is the document's: its whole extracted text, BM25 over all
        of it, and the normalised mean of its fragments' vectors (the model reads
        256 tokens, so no single vector can stand for a longer document). Use it
        to hand an agent whole documents, or to rank documents before reading
        their fragments. ``"default"`` is :data:`DOCUMENT_THRESHOLD`.
        """
        return self._search(
            DOCUMENTS, DOCUMENT_THRESHOLD, query, agent_id, k, threshold, mode, filters, options
        )

    def _search(
        self,
        table: str,
        default: float,
        query: str,
        agent_id: str | None,
        k: int,
        threshold: Threshold,
        mode: Literal["hybrid", "vector", "text"],
        filters: Mapping[str, Any] | None,
        options: Mapping[str, Any],
    ) -> builtins.list[SearchHit]:
        visible = _visible_filter(agent_id)
        flt = visible if filters is None else {"$and": [visible, dict(filters)]}
        args: dict[str, Any] = {**SEARCH_DEFAULTS, "weights": {"relevance": 1.0}, **options}
        if isinstance(threshold, str):
            if threshold != "default":
                raise InvalidArgumentError(
                    f"threshold must be a number, None or 'default', got {threshold!r}"
                )
            # Measured for the default model's cosines: none in text mode, and none with
            # another embedder, whose cosines are on a scale of their own.
            threshold = default if mode != "text" and _default_model(self._memory()) else None
        if threshold is not None:
            if mode == "text":
                args["threshold"] = threshold
            else:
                args["min_similarity"] = threshold
        return self._memory().search(query, k, mode=mode, table=table, filters=flt, **args)

    def list_documents(
        self, agent_id: str | None = None, shared: bool | None = None
    ) -> builtins.list[MemoryRecord]:
        """Document records, oldest first.

        ``shared=True``: shared documents; ``shared=False``: private ones (of
        ``agent_id`` if given); ``shared=None``: all, or what ``agent_id`` may
        read (shared and its own).
        """
        return knowledge_documents(self._memory(), _documents_filter(agent_id, shared))

    def get_fragments(
        self, document_id: str, *, include_embedding: bool = False
    ) -> builtins.list[MemoryRecord]:
        """A document's fragments in order; raises ``UnknownIdError`` for an unknown document."""
        mem = self._memory()
        check_document_id(mem, document_id)
        out = list_all(
            mem, FRAGMENTS, {"document_id": document_id}, include_embedding=include_embedding
        )
        out.sort(key=lambda r: int(r.metadata.get("position", 0)))
        return out

    def remove_document(self, document_id: str) -> int:
        """Deletes a document and its fragments; returns how many fragments went."""
        mem = self._memory()
        check_document_id(mem, document_id)
        return remove_documents(mem, [document_id])

    def clear_knowledge(self, agent_id: str | None = None, *, shared: bool | None = False) -> int:
        """Deletes knowledge; returns how many documents went.

        ``shared=False`` (default): ``agent_id``'s own knowledge (required);
        ``shared=True``: the shared knowledge; ``shared=None``: both (every
        agent's when ``agent_id`` is None).
        """
        mem = self._memory()
        if shared is False:
            flt: dict[str, Any] | None = Scope.of(agent_id, False).filter()
        else:
            flt = _documents_filter(agent_id, shared)
        removed = mem.delete_all(DOCUMENTS, filters=flt)
        mem.delete_all(FRAGMENTS, filters=flt)
        return removed
