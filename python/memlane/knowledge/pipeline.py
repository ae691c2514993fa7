"""The ingestion pipeline: hash, diff, load, chunk, embed, write.

A producer thread reads each file, hashes it and, when it changed, loads and
chunks it, while the calling thread embeds and writes what the producer has
ready: chunking runs while the model embeds (onnxruntime releases the GIL).
The calling thread takes whole documents from the queue until it holds
``batch_size`` fragments (or the producer has had nothing for a moment),
embeds their fragments in sub-batches sorted by length, then writes them with
their document records in one ``memlane.Memory.add_many`` call: one
transaction, in which a document's record comes with all its fragments. The
producer builds each document's records and checks their text and metadata as
an add would, so a file that no record may hold fails alone, not its batch; an
unexpected error of the producer is raised again in the calling thread.

Sorting is what keeps the model's padding low: a model batch is padded to its
longest text. For the default model the producer counts each fragment's
tokens with the model's own tokenizer (a sort by characters pads about 15%
more on SciFact); for other embedders, characters stand in. Over groups of
2,048 fragments the padding is within 2% of one sort over everything.

A document's record (table ``documents``) carries the fingerprint of what it
was made from: the file's sha256, the chunker's settings and the metadata
given. The same fingerprint later means nothing to do. A changed file's old
record and fragments are deleted just before its new ones are written; the
record is deleted first and written last, so a document whose record exists
is complete, and a run cut short is completed by the next one (until
``Memory`` offers a transaction around a delete and an add,
readers can meanwhile see the document missing for that moment). Fragments
whose text the old version already had reuse its vectors.

The record's text is the document's whole extracted text (as elizaOS keeps it;
bounded by ``IngestLimits.max_unpacked_bytes``, like everything loaded), its
``title`` metadata the file's title or path, and its vector the normalised mean
of its fragments' (``document_vector``), so whole documents can be ranked.
"""

from __future__ import annotations

import hashlib
import json
import queue
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memlane import coerce
from memlane.embeddings import TextTruncatedWarning
from memlane.embeddings.cache import model_vectors
from memlane.embeddings.lazy import LazyEmbedder
from memlane.errors import (
    ConflictError,
    InvalidArgumentError,
    MemlaneError,
    UnknownIdError,
    shown,
)
from memlane.knowledge.chunking import Chunk, Chunker, default_chunkers
from memlane.knowledge.document_limits import (
    DocumentLimitError,
    IngestLimits,
    applied_limits,
    fragment_budget,
)
from memlane.knowledge.documents import (
    ALONE,
    DOCUMENTS,
    FRAGMENTS,
    Held,
    choose_id,
    chosen_meanwhile,
    document_vector,
    knowledge_documents,
    list_all,
    of_documents,
    remove_documents,
    replacing,
    unstorable,
)
from memlane.knowledge.ids import fragment_id
from memlane.knowledge.loaded_document import LoadedDocument, json_safe, unpacked_size
from memlane.knowledge.owner import Owner
from memlane.knowledge.progress import ProgressBar, ProgressOption
from memlane.knowledge.report import IngestReport
from memlane.knowledge.walk import LeftOut, Source

if TYPE_CHECKING:
    from memlane.embeddings import Embedder
    from memlane.records import MemoryRecord
    from memlane.store import MemoryStore

__all__ = [
    "BATCH_SIZE",
    "IngestOptions",
    "Owner",
    "Pipeline",
    "checked_metadata",
    "embedding_cost",
]

# Part of every fingerprint: bump it when loaders or record layout change, so
# that the next ingestion rewrites every document.
FORMAT_VERSION = 2
# Texts per embed_batch call (a few model batches; the progress bar moves after each).
_EMBED_BATCH = 128
#: Fragments embedded and written together by default.
BATCH_SIZE = 2048
# How long the writer waits for the producer before writing what it holds.
_PRODUCER_WAIT = 0.05
# Writes of a batch whose ids other ingests of the owner took meanwhile (Pipeline.refused).
_ATTEMPTS = 3

FloatArray = npt.NDArray[np.float32]


def embedding_cost(embedder: Embedder | None) -> Callable[[list[str]], list[int]]:
    """A sort key for texts to embed: tokens the model reads where it can say, else characters."""

    def cost(texts: list[str]) -> list[int]:
        # Resolved at the first call: a lazy default model loads only when
        # something is to be embedded.
        inner = embedder.get() if isinstance(embedder, LazyEmbedder) else embedder
        count = getattr(inner, "count_tokens", None)
        return list(count(texts)) if callable(count) else [len(t) for t in texts]

    return cost


def _chunker_key(chunker: Chunker | None) -> str:
    if chunker is None:
        return "default:" + "|".join(map(repr, default_chunkers()))
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(chunker))


def checked_metadata(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """The metadata given for every document, as stored; ``InvalidArgumentError`` if an
    add would refuse it."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidArgumentError("metadata must be a dict with str keys")
    # What every fragment's add() will check, once, before anything is read.
    return coerce.metadata(value)[0]


# -- what the producer hands over ----------------------------------------------------------


@dataclass(slots=True)
class _Job:
    source: Source
    id: str
    digest: str
    fingerprint: str
    size: int
    doc: LoadedDocument
    chunks: list[Chunk]
    costs: list[int]  # sort keys of the chunks' contents (see embedding_cost)
    old: MemoryRecord | None
    # Its records (fragments, then the document), checked as an add checks them; the
    # write gives them their vectors.
    items: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class _Done:
    """A source that needs no write: unchanged, failed, or empty."""

    source: Source
    id: str
    outcome: str  # "unchanged" | "failed" | "limited" | "skipped" | "empty"
    reason: str = ""
    old: MemoryRecord | None = None


@dataclass(slots=True)
class _Crash:
    """The producer's unexpected error, raised again in the calling thread."""

    error: BaseException


_END = object()


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """How documents are ingested: the knowledge methods' options, passed on as one
    (see ``memlane.Memory.ingest`` for each)."""

    chunker: Chunker | None = None
    metadata: Mapping[str, Any] | None = None
    progress: ProgressOption = True
    prune_missing: bool = False
    follow_outside: bool = False
    batch_size: int = BATCH_SIZE
    limits: IngestLimits | None = None


class Pipeline:
    def __init__(
        self,
        mem: MemoryStore,
        scope: Owner,
        options: IngestOptions,
        *,
        root_key: str | None,
        progress: ProgressBar,
        report: IngestReport,
        alone: bool = False,
    ) -> None:
        chunker, limits, batch_size = options.chunker, options.limits, options.batch_size
        if limits is not None and not isinstance(limits, IngestLimits):
            raise InvalidArgumentError(f"limits must be an IngestLimits, got {shown(limits)}")
        self.limits = limits or IngestLimits()
        metadata = checked_metadata(options.metadata)
        if chunker is not None and not isinstance(chunker, Chunker):
            raise InvalidArgumentError(
                "chunker must have a split(text) -> list[Chunk] method, got "
                f"{type(chunker).__name__}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {shown(batch_size)}")
        self.mem = mem
        self.scope = scope
        self.chunker = chunker
        self.metadata = metadata
        self.metadata_json = json.dumps(metadata, sort_keys=True, default=str)
        self.root_key = root_key
        self.alone = alone  # see documents.ALONE
        self.batch_size = batch_size
        self.progress = progress
        self.report = report
        self.embedder = mem.embedder
        self.cost = embedding_cost(self.embedder)
        self.chunker_key = _chunker_key(chunker)
        self.held = Held()
        self._text, self._markdown = default_chunkers()
        self._ids: dict[str, Source] = {}  # the producer's documents so far, by id

    # -- producer ---------------------------------------------------------------------

    def prepare(self, source: Source) -> _Job | _Done:
        try:
            scope = self.scope
            doc_id = choose_id(source.rel, scope.agent_id, scope.shared, self.root_key, self.held)
        except UnicodeEncodeError:  # a name of bytes that are not UTF-8 (a lone surrogate)
            raw = source.rel.encode("utf-8", "surrogateescape")
            return _Done(source, "", "failed", f"the file name is not valid UTF-8: {raw!r}")
        if (first := self._ids.setdefault(doc_id, source)) is not source:
            # Two files whose names are one once normalised (NFC and NFD): one document.
            reason = f"another file has the same name once normalised (NFC): {first.rel!r}"
            return _Done(source, doc_id, "failed", reason)
        old = self.held.by_id.get(doc_id)
        try:
            data = source.read(self.limits.max_unpacked_bytes)
        except LeftOut as e:
            return _Done(source, doc_id, "skipped", str(e))
        except DocumentLimitError as e:
            return _Done(source, doc_id, "limited", str(e))
        except OSError as e:
            return _Done(source, doc_id, "failed", f"cannot read: {e.strerror or e}")
        except MemoryError:  # this file fails, not the whole ingest
            return _Done(source, doc_id, "failed", "cannot read: out of memory")
        digest = hashlib.sha256(data).hexdigest()
        key = f"{FORMAT_VERSION}|{digest}|{self.chunker_key}|{self.metadata_json}"
        fingerprint = hashlib.sha256(key.encode()).hexdigest()
        if (
            old is not None
            and old.metadata.get("fingerprint") == fingerprint
            and old.metadata.get("root", self.root_key) == self.root_key  # not taken over
            and (old.metadata.get(ALONE) is True) == self.alone  # its root walked since
        ):
            return _Done(source, doc_id, "unchanged")
        if not data.strip():
            return _Done(source, doc_id, "empty", "empty file", old)
        limit = self.limits.max_unpacked_bytes
        if (size := unpacked_size(data)) > limit:
            reason = f"unpacks to {size} bytes, above max_unpacked_bytes={limit}"
            return _Done(source, doc_id, "limited", reason)
        try:
            with applied_limits(self.limits):  # the loaders' bounds on their work
                doc = source.loader(data, source.path or Path(source.rel))
            if (over := doc.over(self.limits)) is not None:
                return _Done(source, doc_id, "limited", over)
            chunker = self.chunker or (self._markdown if doc.markdown else self._text)
            # The default splitters stop at the limit, not after cutting every fragment
            # (a caller's chunker may use them for pieces it packs: counted after).
            with fragment_budget(self.limits.max_fragments, self.chunker is None):
                chunks = [c for c in chunker.split(doc.text) if c.content.strip()]
        except DocumentLimitError as e:
            return _Done(source, doc_id, "limited", str(e))
        except Exception as e:  # any parser's error fails this file alone
            reason = str(e).strip() or type(e).__name__
            return _Done(source, doc_id, "failed", reason)
        if len(chunks) > self.limits.max_fragments:
            reason = f"{len(chunks)} fragments, above max_fragments={self.limits.max_fragments}"
            return _Done(source, doc_id, "limited", reason)
        if not chunks:
            return _Done(source, doc_id, "empty", "no text", old)
        costs = self.cost([c.content for c in chunks])
        job = _Job(source, doc_id, digest, fingerprint, len(data), doc, chunks, costs, old)
        job.items = self.records(job)
        if (refused := unstorable(job.items)) is not None:  # this file fails, not the batch
            return _Done(source, doc_id, "failed", refused)
        return job

    def produce(
        self, sources: Iterable[Source], out: queue.Queue[Any], stop: threading.Event
    ) -> None:
        def put(item: object) -> None:
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue

        try:
            for source in sources:
                if stop.is_set():
                    return
                put(self.prepare(source))
        except BaseException as e:  # raised again by run(), in the caller
            put(_Crash(e))
        finally:
            put(_END)

    # -- consumer ---------------------------------------------------------------------

    def run(self, sources: list[Source]) -> None:
        self.report.seen += len(sources)
        self.held = Held(knowledge_documents(self.mem, self.scope.filter()))
        self._ids = {}
        q: queue.Queue[Any] = queue.Queue(maxsize=1024)
        stop = threading.Event()
        producer = threading.Thread(
            target=self.produce, args=(sources, q, stop), daemon=True, name="memlane-ingest"
        )
        producer.start()
        crash: _Crash | None = None
        try:
            pending: list[_Job] = []
            count = 0
            while True:
                if pending and count >= self.batch_size:
                    self.write(pending)
                    pending, count = [], 0
                try:
                    item = q.get(timeout=_PRODUCER_WAIT if pending else None)
                except queue.Empty:  # a slow file: write what is ready, not to idle the model
                    self.write(pending)
                    pending, count = [], 0
                    continue
                if item is _END:
                    break
                if isinstance(item, _Crash):
                    crash = item
                elif isinstance(item, _Job):
                    pending.append(item)
                    count += len(item.chunks)
                else:
                    self.settle(item)
            if pending:
                self.write(pending)
        finally:
            stop.set()
            producer.join()
        if crash is not None:  # the files prepared before it are written
            raise crash.error

    def settle(self, done: _Done) -> None:
        rel = done.source.rel
        if done.outcome == "unchanged":
            self.report.unchanged[rel] = done.id
        elif done.outcome == "failed":
            self.report.failed[rel] = done.reason
        elif done.outcome == "limited":
            self.report.failed[rel] = self.report.limited[rel] = done.reason
        elif done.outcome == "skipped":  # as the walk skips it; its document stays
            self.report.skipped[rel] = done.reason
            self.report.seen -= 1  # counted in run(); seen leaves the skipped out
        else:
            self.report.skipped[rel] = done.reason
            self.report.seen -= 1
            if done.old is not None:  # the file was emptied: its old fragments must go
                remove_documents(self.mem, [done.id], self.scope.filter())
                self.report.pruned[rel] = done.id
        self.progress.update(files=1)

    def embed(self, jobs: list[_Job], reuse: Mapping[str, FloatArray]) -> FloatArray | None:
        """The vectors of the jobs' fragments, in order, cheapest first to the model."""
        if self.embedder is None:
            return None
        texts = [c.content for j in jobs for c in j.chunks]
        costs = [n for j in jobs for n in j.costs]
        out = np.empty((len(texts), int(self.embedder.dimension)), dtype=np.float32)
        todo = []
        for i, text in enumerate(texts):
            if (v := reuse.get(text)) is not None:
                out[i] = v
            else:
                todo.append(i)
        todo.sort(key=costs.__getitem__)
        name, dim = str(self.embedder.name), out.shape[1]
        for start in range(0, len(todo), _EMBED_BATCH):
            rows = todo[start : start + _EMBED_BATCH]
            batch = [texts[i] for i in rows]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", TextTruncatedWarning)
                answer = self.embedder.embed_batch(batch)
            # Checked as every write checks its embedder's answer: one vector for the whole
            # batch would otherwise be broadcast to each fragment and stored.
            out[rows] = model_vectors(name, answer, batch, dim)
            for w in caught:  # counted into the report instead, and said once at the end
                if isinstance(w.message, TextTruncatedWarning):
                    self.report.truncated += w.message.count
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            self.progress.update(fragments=len(rows))
        self.progress.update(fragments=len(texts) - len(todo))
        return out

    def old_vectors(self, jobs: list[_Job]) -> dict[str, FloatArray]:
        """Vectors of the old fragments of the documents being replaced, by text."""
        old = [j for j in jobs if j.old is not None]
        if not old or self.embedder is None:
            return {}
        records = list_all(
            self.mem,
            FRAGMENTS,
            of_documents([j.id for j in old], self.scope.filter()),
            include_embedding=True,
        )
        return {r.text: r.embedding for r in records if r.embedding is not None}

    def write(self, jobs: list[_Job]) -> None:
        reuse = self.old_vectors(jobs)
        embedded: list[tuple[_Job, FloatArray | None]] = []
        truncated = self.report.truncated
        # The bar moves through these files as their fragments are embedded.
        self.progress.start_batch(len(jobs), sum(len(j.chunks) for j in jobs))
        try:
            vectors = self.embed(jobs, reuse)
            row = 0
            for job in jobs:
                n = len(job.chunks)
                embedded.append((job, None if vectors is None else vectors[row : row + n]))
                row += n
        except MemlaneError as e:
            self.report.truncated = truncated  # counted again below
            if len(jobs) == 1:
                self.report.failed[jobs[0].source.rel] = f"cannot embed: {e}"
                self.progress.update(files=1)
                return
            for job in jobs:  # find the document the model refuses
                try:
                    v = self.embed([job], reuse)
                    embedded.append((job, v))
                except MemlaneError as e:
                    self.report.failed[job.source.rel] = f"cannot embed: {e}"
                    self.progress.update(files=1)
        if not embedded:
            return
        for attempt in range(_ATTEMPTS):
            items: list[dict[str, Any]] = []
            for job, v in embedded:
                if v is not None:
                    for item, vector in zip(job.items[:-1], v, strict=True):
                        item["embedding"] = vector
                    job.items[-1]["embedding"] = document_vector(v)
                items.extend(job.items)
            # Old versions (and fragments a run cut short left behind) go in the
            # transaction that stores the new ones: a crash leaves one or the other. Only
            # this owner's, and only the versions these ids were chosen for (replacing).
            expected = {job.id: job.old for job, _ in embedded}
            flt = replacing(self.mem, expected, self.scope.filter())
            try:
                self.mem.replace(items, [DOCUMENTS, FRAGMENTS], filters=flt)
                break
            except InvalidArgumentError as e:
                self.refused(embedded, e, last=attempt == _ATTEMPTS - 1)
        for job, _ in embedded:
            target = self.report.replaced if job.old is not None else self.report.ingested
            target[job.source.rel] = job.id
            self.report.fragments += len(job.chunks)
        self.progress.update(files=len(embedded))

    def refused(
        self, embedded: list[tuple[_Job, FloatArray | None]], error: Exception, last: bool
    ) -> None:
        """Why a write was refused, raised, unless another ingest of the owner's stored
        a document with an id it chose (see documents.replacing): those ids are chosen
        again from the documents read again, for the write to be tried again."""
        if taken := [job for job, _ in embedded if self.taken(job.id)]:
            files = ", ".join(f"{job.source.rel!r} (id {job.id})" for job in taken)
            raise InvalidArgumentError(
                f"cannot ingest {files}: the document id is held by a record that is "
                "not this owner's document (another agent's, shared or private, or a "
                "record of another table); nothing of this batch was stored"
            ) from error
        self.held = Held(knowledge_documents(self.mem, self.scope.filter()))
        moved = chosen_meanwhile(self.held, {job.id: job.old for job, _ in embedded})
        if not moved:
            raise error
        if last:
            files = ", ".join(repr(job.source.rel) for job, _ in embedded if job.id in moved)
            raise ConflictError(
                f"cannot ingest {files}: other ingests of this owner kept storing documents "
                f"with the ids chosen for them ({_ATTEMPTS} tries); nothing of this batch "
                "was stored"
            ) from error
        scope = self.scope
        for job, _ in embedded:
            if job.id in moved:
                rel = job.source.rel
                job.id = choose_id(rel, scope.agent_id, scope.shared, self.root_key, self.held)
                job.old = self.held.by_id.get(job.id)
                job.items = self.records(job)

    def taken(self, doc_id: str) -> bool:
        """Whether a record other than this owner's document holds ``doc_id`` (said
        after a write the transaction refused, to name why)."""
        try:
            return not self.scope.holds(self.mem.get(doc_id), self.mem.default_scope)
        except UnknownIdError:
            return False

    def records(self, job: _Job) -> list[dict[str, Any]]:
        """The job's records, without their vectors."""
        doc, scope = job.doc, self.scope
        base = {**self.metadata, **json_safe(doc.metadata)}
        common = {
            "document_id": job.id,
            "source": job.source.rel,
            "file_type": doc.file_type,
            "shared": scope.shared,
            "agent_id": scope.agent_id,
        }
        owner = {"agent_id": scope.agent_id} if scope.agent_id is not None else {}
        total = len(job.chunks)
        items: list[dict[str, Any]] = []
        for position, chunk in enumerate(job.chunks):
            meta = {
                **base,
                **json_safe(dict(chunk.metadata)),
                **common,
                "position": position,
                "total": total,
                "start": chunk.start,
                "end": chunk.end,
            }
            if doc.pages is not None:
                meta["page"] = doc.page_at(chunk.start)
                meta["page_end"] = doc.page_at(max(chunk.start, chunk.end - 1))
            item: dict[str, Any] = {
                "id": fragment_id(job.id, position),
                "text": chunk.content,
                "table": FRAGMENTS,
                "type": "fragment",
                "evergreen": True,
                "metadata": meta,
                **owner,
            }
            items.append(item)
        doc_meta = {
            **base,
            **common,
            "root": self.root_key,
            "content_hash": job.digest,
            "fingerprint": job.fingerprint,
            "total": total,
            "bytes": job.size,
        }
        # Ingest's own key, as those above: a file's or caller's "alone" would make a
        # walked root look like a file's folder (ingest.py) and its files never unchanged.
        doc_meta.pop(ALONE, None)
        if self.alone:
            doc_meta[ALONE] = True
        title = doc.metadata.get("title")
        doc_meta["title"] = title if isinstance(title, str) and title.strip() else job.source.rel
        record: dict[str, Any] = {
            "id": job.id,
            "text": doc.text,
            "table": DOCUMENTS,
            "type": "document",
            "evergreen": True,
            "metadata": doc_meta,
            **owner,
        }
        # The record goes last: add_many commits all at once, and readers that
        # find a record find its fragments.
        items.append(record)
        return items
