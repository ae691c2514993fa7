"""The work behind the knowledge methods of ``memlane.Memory`` (``ingest``,
``ingest_config``, ``ingest_text``, ``watch``, ``search_knowledge``,
``search_documents``, ``list_documents``, ``get_fragments``, ``remove_document``,
``clear_knowledge``), as functions of the store's record API
(``MemoryStore``, which knows nothing of knowledge).
Knowledge lives in two tables: ``documents`` (a record per document: its whole
extracted text, ``title`` metadata, and the normalised mean of its fragments'
vectors) and ``fragments`` (the chunks, ``{document_id}-chunk-{n}``), with metadata
``document_id``, ``position``, ``total``, ``start``, ``end`` (offsets into the
document's extracted text), ``source`` (path relative to the knowledge root),
``file_type``, ``shared`` and ``agent_id``, plus ``page`` and ``page_end`` for PDFs
and ``headings`` for markdown and Word files.

As in elizaOS, shared knowledge (``shared=True``) is read by every agent and an
agent's own (``shared=False``) only by that agent: a knowledge search runs one
engine search filtered to "shared, or this agent's", so another agent's private
fragments are never candidates. Each read, count and delete admits only records whose
scope is what ingest writes (``documents.knowledge_only``): a record that another scope
added to these tables is never knowledge, whatever its metadata says.
"""

from __future__ import annotations

import builtins
import dataclasses
import errno
import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from memlane import coerce
from memlane._core import DEFAULT_ALPHA
from memlane.embeddings.lazy import is_default_model
from memlane.errors import InvalidArgumentError, shown
from memlane.knowledge.documents import (
    DOCUMENTS,
    FRAGMENTS,
    check_document_id,
    knowledge_only,
    list_all,
    remove_documents,
)
from memlane.knowledge.ids import normalise_path
from memlane.knowledge.ingest import ingest_path, ingest_sources
from memlane.knowledge.loaders import LOADERS
from memlane.knowledge.pipeline import IngestOptions, Owner, checked_metadata
from memlane.knowledge.report import IngestReport
from memlane.knowledge.walk import Source, inside

if TYPE_CHECKING:
    from memlane.records import MemoryRecord, SearchHit
    from memlane.store import MemoryStore

__all__ = [
    "DOCUMENT_THRESHOLD",
    "FRAGMENT_THRESHOLD",
    "SEARCH_DEFAULTS",
    "Threshold",
    "clear",
    "documents_filter",
    "fragments",
    "ingest_config",
    "ingest_text",
    "remove",
    "search",
    "with_context",
]

#: Fusion settings of ``memlane.Memory.search_knowledge``: those of
#: ``memlane.Memory.search``, one default for the whole engine (weighted fusion of the
#: cosine and BM25 over the query's ceiling, chosen on SciFact's 809 train queries:
#: ``benches/tune_search.py``; the test figures are in ``docs/benchmarks.md``).
SEARCH_DEFAULTS: dict[str, Any] = {"fusion": "weighted", "alpha": DEFAULT_ALPHA}

#: A knowledge search's cut-off: a number, ``None`` (none) or ``"default"``.
Threshold = float | None | Literal["default"]

#: Default cut-off of ``memlane.Memory.search_knowledge`` (hybrid and vector
#: modes, default model): a minimum cosine similarity. elizaOS's 0.85 suits its own
#: model; with all-MiniLM-L6-v2 it would drop most relevant hits. Chosen by
#: ``benches/tune_knowledge_threshold.py`` on SciFact's abstracts ingested as files: the
#: highest cosine keeping at least 99% of the relevant fragments of the top 5 on the
#: *train* queries, so that an agent asked about what its knowledge does not hold gets
#: nothing rather than the nearest text (test figures in ``docs/knowledge.md``), measured
#: with the default chunkers (128 tokens).
FRAGMENT_THRESHOLD = 0.37

#: Default cut-off of ``memlane.Memory.search_documents``: a minimum cosine to a
#: document's mean vector, chosen alike (test figures in ``docs/knowledge.md``). A mean
#: vector sits closer to the middle of its fragments than any one of them to a query,
#: hence the lower figure.
DOCUMENT_THRESHOLD = 0.31

_DEFAULT_THRESHOLD = {FRAGMENTS: FRAGMENT_THRESHOLD, DOCUMENTS: DOCUMENT_THRESHOLD}
#: What a knowledge search passes ``MemoryStore.search`` itself: never an option.
_RESERVED = frozenset({"query", "k", "mode", "table", "filters"})


def _visible_filter(agent_id: str | None) -> dict[str, Any]:
    if agent_id is None:
        return {"shared": True}
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise InvalidArgumentError(f"agent_id must be a non-empty str, got {shown(agent_id)}")
    return {"$or": [{"shared": True}, {"shared": False, "agent_id": agent_id}]}


def documents_filter(agent_id: str | None, shared: bool | None) -> dict[str, Any] | None:
    if shared is not None and not isinstance(shared, bool):
        raise InvalidArgumentError(f"shared must be a bool or None, got {type(shared).__name__}")
    if shared is True:
        return {"shared": True}
    if shared is False:
        return {"shared": False} if agent_id is None else Owner.of(agent_id, False).filter()
    return None if agent_id is None else _visible_filter(agent_id)


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    """One checked entry of an ``ingest_config`` list: a text, or a file or folder."""

    text: str | None = None
    where: str = ""
    folder: bool = False
    scope: Owner | None = None
    metadata: Mapping[str, Any] | None = None


def _config_entry(
    i: int, entry: object, agent_id: str | None, options: IngestOptions, scope: Mapping[str, str]
) -> _Entry:
    """Entry ``i`` checked as its ingestion would check it (``InvalidArgumentError``
    naming it), before any entry is ingested."""
    if isinstance(entry, str):
        coerce.clean(entry, f"entries[{i}]", nul=True)  # as ingest_text checks a text
        Owner.writing(agent_id, agent_id is None, scope)
        return _Entry(text=entry)
    if not isinstance(entry, Mapping):
        raise InvalidArgumentError(f"entries[{i}] must be a dict or a str")
    unknown = set(entry) - {"directory", "path", "shared", "metadata"}
    where = entry.get("directory", entry.get("path"))
    if unknown or not isinstance(where, str) or ("directory" in entry) == ("path" in entry):
        raise InvalidArgumentError(
            f"entries[{i}] must have exactly one of 'directory' or 'path' (a str), and "
            f"optionally 'shared' and 'metadata'; got {shown(dict(entry))}"
        )
    try:
        normalise_path(coerce.path(where, "its path"))
        owner = Owner.writing(agent_id, entry.get("shared", False), scope)
        own = entry.get("metadata")
        if own is not None and not isinstance(own, Mapping):
            raise InvalidArgumentError(f"metadata must be a dict, got {type(own).__name__}")
        extra = {**(options.metadata or {}), **(own or {})}
        checked_metadata(extra)  # what the pipeline checks, for every document
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"entries[{i}]: {e}") from None
    return _Entry(where=where, folder="directory" in entry, scope=owner, metadata=extra or None)


def ingest_config(
    store: MemoryStore,
    entries: Sequence[Mapping[str, Any] | str],
    agent_id: str | None,
    root: str | Path | None,
    options: IngestOptions,
) -> IngestReport:
    """An elizaOS-style knowledge list ingested in one report (see
    ``memlane.Memory.ingest_config``); ``options`` apply to every entry. Every entry
    is checked before the first is ingested."""
    if isinstance(entries, str | Mapping) or not isinstance(entries, Iterable):
        raise InvalidArgumentError("entries must be a list of dicts (or strings)")
    checked_metadata(options.metadata)
    checked = [
        _config_entry(i, entry, agent_id, options, store.default_scope)
        for i, entry in enumerate(entries)
    ]
    base = Path.cwd() if root is None else coerce.path(root, "root")
    try:
        real_base = base.resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a link loop, before Python 3.13
        raise InvalidArgumentError(f"root {shown(str(base))} cannot be resolved: {e}") from None
    report = IngestReport()
    started = time.perf_counter()
    text_options = IngestOptions(
        options.chunker, options.metadata, progress=False, limits=options.limits
    )
    for entry in checked:
        if entry.text is not None:
            digest = hashlib.sha256(entry.text.encode()).hexdigest()[:16]
            source, shared = f"inline:{digest}", agent_id is None
            part = ingest_text(store, entry.text, source, agent_id, shared, "txt", text_options)
            report.merge(part)
            continue
        assert entry.scope is not None
        target = base / entry.where
        label = normalise_path(entry.where)
        why = _unusable(target, real_base, entry.folder, options.follow_outside)
        if why is not None:
            report.failed[label] = why
            continue
        entry_options = dataclasses.replace(options, metadata=entry.metadata)
        part = ingest_path(store, target, entry.scope, entry_options, report_root=real_base)
        report.merge(part)
    report.seconds = time.perf_counter() - started
    return report


def _unusable(target: Path, real_base: Path, folder: bool, follow_outside: bool) -> str | None:
    """Why an entry's ``target`` is reported as failed without being ingested, or None."""
    try:
        if not follow_outside and not inside(target.resolve(), real_base):
            return "outside the knowledge root"
        if not target.exists():
            return "no such file or folder"
        if folder != target.is_dir():
            return f"not {'a folder' if folder else 'a file'}"
    except RuntimeError:  # pathlib's word for a link loop, before Python 3.13
        return "symbolic link loop"
    except OSError as e:  # a name too long, a folder it may not read
        return "symbolic link loop" if e.errno == errno.ELOOP else (e.strerror or str(e))
    return None


def ingest_text(
    store: MemoryStore,
    text: str,
    source: str,
    agent_id: str | None,
    shared: bool,
    file_type: str,
    options: IngestOptions,
) -> IngestReport:
    """A text ingested as a document named ``source`` (see ``memlane.Memory.ingest_text``)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
    if not isinstance(source, str) or not source.strip():
        raise InvalidArgumentError("source must be a non-empty str")
    coerce.clean(text, "text", nul=True)
    coerce.clean(source, "source")
    named = file_type.lower().lstrip(".") if isinstance(file_type, str) else None
    loader = None if named is None else LOADERS.get("." + named)
    if loader is None:
        raise InvalidArgumentError(
            f"file_type must be one of {sorted(s[1:] for s in LOADERS)}, got {shown(file_type)}"
        )
    started = time.perf_counter()
    report = IngestReport()
    item = Source(normalise_path(source), loader, data=text.encode("utf-8"))
    scope = Owner.writing(agent_id, shared, store.default_scope)
    ingest_sources(store, [item], scope, options, root_key=None, report=report)
    report.seconds = time.perf_counter() - started
    return report


def search(
    store: MemoryStore,
    table: str,
    query: str,
    agent_id: str | None,
    k: int,
    threshold: Threshold,
    mode: Literal["hybrid", "vector", "text"],
    filters: Mapping[str, Any] | None,
    options: Mapping[str, Any],
) -> builtins.list[SearchHit]:
    """A knowledge search of ``table``, ``FRAGMENTS`` or
    ``DOCUMENTS`` (see ``memlane.Memory.search_knowledge``)."""
    reserved = sorted(_RESERVED & set(options))
    if reserved:
        raise InvalidArgumentError(
            f"{', '.join(reserved)} cannot be a knowledge search's option: it searches "
            f"the {table!r} table, with its own arguments for the rest"
        )
    visible = _visible_filter(agent_id)
    if filters is not None and not isinstance(filters, Mapping):
        raise InvalidArgumentError(f"filters must be a dict, got {type(filters).__name__}")
    flt = knowledge_only(store, visible if filters is None else {"$and": [visible, dict(filters)]})
    args: dict[str, Any] = {**SEARCH_DEFAULTS, "weights": {"relevance": 1.0}, **options}
    if isinstance(threshold, str):
        if threshold != "default":
            raise InvalidArgumentError(
                f"threshold must be a number, None or 'default', got {shown(threshold)}"
            )
        # Measured for the default model's cosines: none in text mode, and none with
        # another embedder, whose cosines are on a scale of their own.
        threshold = (
            _DEFAULT_THRESHOLD[table]
            if mode != "text" and is_default_model(store.embedder)
            else None
        )
    if threshold is not None:
        if mode == "text":
            args["threshold"] = threshold
        else:
            args["min_similarity"] = threshold
    return store.search(query, k, mode=mode, table=table, filters=flt, **args)


def with_context(query: str, context: str | Sequence[str] | None) -> str:
    """The text searched: the conversation's recent messages, then the query, one a line
    (elizaOS's ``conversationContext``, put before the query it searches with)."""
    if context is None:
        return query
    if isinstance(context, str):
        lines: Sequence[str] = [context]
    elif isinstance(context, list | tuple) and all(isinstance(m, str) for m in context):
        lines = context
    else:
        raise InvalidArgumentError(
            "conversation_context must be a str or a list of str (the recent messages)"
        )
    if not isinstance(query, str):
        raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
    return "\n".join([*(m for m in lines if m.strip()), query])


def fragments(
    store: MemoryStore, document_id: str, include_embedding: bool
) -> builtins.list[MemoryRecord]:
    """A document's fragments in order; raises ``UnknownIdError`` for an unknown document."""
    check_document_id(store, document_id)
    out = list_all(
        store, FRAGMENTS, {"document_id": document_id}, include_embedding=include_embedding
    )
    out.sort(key=lambda r: int(r.metadata.get("position", 0)))
    return out


def remove(store: MemoryStore, document_id: str) -> int:
    """Deletes a document and its fragments; returns how many fragments went."""
    check_document_id(store, document_id)
    return remove_documents(store, [document_id], None)


def clear(store: MemoryStore, agent_id: str | None, shared: bool | None) -> int:
    """Deletes knowledge (see ``memlane.Memory.clear_knowledge``); returns how many
    documents went."""
    if shared is False:
        flt = knowledge_only(store, Owner.of(agent_id, False).filter())
    else:
        flt = knowledge_only(store, documents_filter(agent_id, shared))
    # Documents and fragments in one transaction, as remove_documents does: a reader
    # (or a process killed between two deletes) never finds the fragments of a document
    # that is gone.
    documents = store.count(DOCUMENTS, filters=flt)
    removed, _ = store.replace([], [DOCUMENTS, FRAGMENTS], filters=flt)
    return min(documents, removed)
