"""The memory store: :class:`Memory`.

A store directory holds ``memory.db`` (SQLite, the source of truth), ``index/``
(snapshots of the engine: BM25, HNSW and the records' attributes) and ``lock``.
A ``postgresql://`` URL opens a store in PostgreSQL instead, shared by many
processes: each keeps its own engine and follows the others' changes.
Each write validates everything (in Python, then in the engine's ``prepare``),
commits one transaction, and only then updates the engine, which can no
longer fail. Opening loads the newest snapshot and replays the changes the
database holds beyond it; a missing or damaged snapshot is rebuilt from the
database with a warning.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import functools
import json
import math
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from memlane import _core
from memlane._core import Engine
from memlane.dedup import DedupWindow, content_hash, window_keys
from memlane.embeddings._base import Embedder
from memlane.embeddings.cache import CachedEmbedder, EmbeddingCache
from memlane.embeddings.lazy import default_embedder
from memlane.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidArgumentError,
    MemlaneError,
    StorageError,
    UnknownIdError,
)
from memlane.knowledge.api import KnowledgeMixin
from memlane.records import SCOPE_FIELDS, MemoryRecord, SearchHit
from memlane.storage import COLUMNS, Row, Store, StoreLock, open_store

__all__ = ["DEFAULT_EMBEDDER", "Memory"]

Mode = Literal["hybrid", "vector", "text"]
FloatArray = npt.NDArray[np.float32]


class _DefaultEmbedder:
    def __repr__(self) -> str:
        return "DEFAULT_EMBEDDER"


#: The ``embedder`` argument's default: :class:`memlane.OnnxEmbedder`, loaded on first use.
DEFAULT_EMBEDDER: Any = _DefaultEmbedder()

_UNSET: Any = object()

_C = {name: i for i, name in enumerate(COLUMNS)}
_ADD_KEYS = frozenset(
    {
        "text",
        "table",
        "type",
        *SCOPE_FIELDS,
        "importance",
        "evergreen",
        "metadata",
        "embedding",
        "id",
        "created_at",
        "unique",
    }
)
# What an import may carry besides the add() keys.
_IMPORT_KEYS = _ADD_KEYS | {"updated_at", "last_accessed_at", "access_count", "content_hash"}
_EXPLAIN = (
    "bm25",
    "bm25_rank",
    "cosine",
    "vector_rank",
    "relevance",
    "importance",
    "recency",
    "age_hours",
    "boost",
    "score",
)
_WEIGHT_KEYS = frozenset({"relevance", "importance", "recency"})
# Hits each retriever contributes before fusion, at least (chosen on SciFact's
# train queries: benches/tune_search.py).
_CANDIDATES = 50
_INDEX_BATCH = 256
# Batches up to this size are linked into the graph by the writer itself.
_INLINE_INDEX = 64
_ACCESS_FLUSH_SECONDS = 10.0
# The WAL is checkpointed (off the write path) past this size.
#: Vector precisions of the in-memory index (see ``HnswIndex``).
_PRECISIONS = ("f32", "f16", "int8", "int8+f16")
_CHECKPOINT_BYTES = 32 << 20
# Graph linking waits this long after a write, unless this many vectors are parked.
_WRITE_QUIET = 0.2
_MAX_PARKED = 100_000
_ACCESS_FLUSH_COUNT = 50_000
# Batches at least this large are analysed by the engine while SQLite writes them.
_OVERLAP_MIN = 256


@dataclass(frozen=True, slots=True)
class _Replacing:
    """What a :meth:`Memory.replace` deletes: its filter (None: every record)."""

    filter: dict[str, Any] | None


@dataclass(slots=True)
class _New:
    """One record to add, validated."""

    id: str
    text: str
    table: str
    type: str
    scope: tuple[str | None, ...]
    importance: float
    evergreen: bool
    metadata: dict[str, Any]
    metadata_json: str
    embedding: FloatArray | None
    created_at: float
    updated_at: float
    last_accessed_at: float
    access_count: int
    unique: bool
    content_hash: str
    # Check for duplicates before storing (add(unique=True)); imports never do.
    dedup: bool = False
    id_given: bool = True


# -- argument checks --------------------------------------------------------------


def _str(value: object, label: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{label} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise InvalidArgumentError(f"{label} must not be empty")
    return value


def _number(
    value: object, label: str, low: float | None = None, high: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidArgumentError(f"{label} must be a number, got {type(value).__name__}")
    x = float(value)
    if not math.isfinite(x):
        raise InvalidArgumentError(f"{label} must be a finite number, got {x}")
    if (low is not None and x < low) or (high is not None and x > high):
        raise InvalidArgumentError(f"{label} must be in [{low}, {high}], got {x}")
    return x


def _time(value: object, label: str) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidArgumentError(f"{label} must be timezone-aware (or unix seconds)")
        return value.timestamp()
    return _number(value, label)


def _bool(value: object, label: str) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise InvalidArgumentError(f"{label} must be a bool, got {type(value).__name__}")
    return bool(value)


def _metadata(value: object) -> tuple[dict[str, Any], str]:
    if value is None:
        return {}, "{}"
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"metadata must be a dict, got {type(value).__name__}")
    if not all(isinstance(k, str) for k in value):
        raise InvalidArgumentError("metadata keys must be str")
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"metadata must be JSON-serialisable: {e}") from None
    # Round-trip: what is stored is what a later read returns.
    return json.loads(text), text


def _scope_kwargs(scope: Mapping[str, Any]) -> None:
    unknown = set(scope) - set(SCOPE_FIELDS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown argument(s) {sorted(unknown)}; scope fields are {list(SCOPE_FIELDS)}"
        )


def _new_id() -> str:
    """A random (version 4) UUID string, several times cheaper than ``str(uuid.uuid4())``."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"


def _check_vectors(vectors: FloatArray, rows: Sequence[int], label: str) -> None:
    """Finite and non-zero, all rows at once; names the first bad record."""
    finite = np.asarray(np.isfinite(vectors).all(axis=1))
    nonzero = np.asarray((vectors != 0).any(axis=1))
    bad = np.flatnonzero(~(finite & nonzero))
    if bad.size:
        i = int(bad[0])
        what = "has a non-finite value (NaN or infinity)" if not finite[i] else "is all zeros"
        raise InvalidArgumentError(f"record {rows[i]}: {label} {what}")


def _blob(v: FloatArray | None) -> bytes | None:
    return None if v is None else np.ascontiguousarray(v, dtype="<f4").tobytes()


def _unblob(b: bytes | None) -> FloatArray | None:
    if b is None:
        return None
    v: FloatArray = np.frombuffer(b, dtype="<f4").astype(np.float32)
    return v


def _maintain(ref: weakref.ref[Memory], wake: threading.Event) -> None:
    """The background thread: links parked vectors, flushes access counts, snapshots."""
    while True:
        wake.wait(timeout=1.0)
        wake.clear()
        memory = ref()
        if memory is None or memory._closing:
            return
        try:
            if memory._vanished():
                return
            memory._maintenance()
        except Exception as e:  # keep serving; the next wake-up retries
            if memory._vanished():
                return
            _background_failed(memory, "background maintenance", e)
        del memory


def _background_failed(memory: Memory, what: str, e: Exception) -> None:
    """Warns once (the first failure) that a background task of ``memory`` failed."""
    if memory._background_error is None:
        warnings.warn(
            f"memlane: {what} of {memory.location} failed: {e!r}", RuntimeWarning, stacklevel=2
        )
    memory._background_error = e


# Open stores, closed at interpreter exit: their background thread may be inside the
# engine then, and a thread that comes back from native code into a finalizing
# interpreter is killed mid-frame.
_OPEN: weakref.WeakSet[Memory] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for memory in list(_OPEN):
        with contextlib.suppress(Exception):
            memory.close()
        with contextlib.suppress(Exception):
            memory._finalizer()  # released even if close failed (a no-op after close)


def _follow(ref: weakref.ref[Memory]) -> None:
    """Called by a shared store's thread when other processes may have written."""
    memory = ref()
    if memory is None or memory._closing:
        return
    try:
        memory._follow()
    except Exception as e:  # keep following; the next call retries
        _background_failed(memory, "following changes", e)


def _release(lock: StoreLock | None, db: Store, wake: threading.Event) -> None:
    wake.set()
    db.close()
    if lock is not None:
        lock.release()


class Memory(KnowledgeMixin):
    """Persistent, searchable memory for agents.

    Args:
        path: the store directory, created if missing; ``None`` keeps the store
            in memory (gone at close); a ``postgresql://`` (or ``postgres://``)
            URL opens a store in PostgreSQL shared by any number of processes
            (``?schema=NAME`` picks its schema, ``memlane`` by default).
        embedder: an :class:`~memlane.embeddings.Embedder`; by default the
            offline :class:`~memlane.OnnxEmbedder`, loaded at the first text to
            embed. ``None`` makes a text-only store: searches use BM25 alone.
            A store pins its embedder's name and dimension; opening it with
            another raises :class:`~memlane.errors.EmbedderMismatchError`
            unless ``reembed=True``, which embeds every record again.
        default_scope: scope fields filled in wherever a call leaves them out.
        dedup_threshold: cosine similarity at which ``add(unique=True)`` sees a
            near-duplicate.
        near_duplicate: ``"mark"`` stores a near-duplicate with ``unique=False``
            (as elizaOS does); ``"skip"`` stores nothing and returns the
            existing record.
        dedup_window: seconds during which a repeated ``metadata["message_id"]``,
            or the same ``source`` + ``contact`` + text, is skipped (0 turns it off).
        track_access: whether searches update ``access_count`` and
            ``last_accessed_at`` of what they return (a search may override it).
            The engine sees an access at once (decay restarts); the database
            gets the counts in batches (with the next write, every 10 s, and at
            close), so a crash can lose the last seconds of counts, never a memory.
        decay, weights, recency_half_life: search defaults (see :meth:`search`);
            ``decay=None`` (the default) takes the rate from ``recency_half_life``.
        snapshot_every: changes between periodic index snapshots (at least
            half the store's size, so snapshots cost O(1) per change).
        cache_size: query and text embeddings kept in memory.
        language: the BM25 analyzer's language (stopwords and stemmer).
        hnsw_m, hnsw_ef_construction, hnsw_ef: graph parameters.
        hnsw_precision: how the vector index holds vectors in memory (see
            :class:`~memlane.HnswIndex`). The default walks the graph on int8
            codes and ranks on f16 copies: about twice the speed of "f32" with
            cosines within about 1e-3. The database always keeps vectors in
            full; a snapshot of another precision is rebuilt at open.
        cache_dir: PostgreSQL only: a local folder for index snapshots, so an
            open loads the newest one and replays only the changes since it
            (without it, every open builds the indexes from the database).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        embedder: Embedder | None = DEFAULT_EMBEDDER,
        *,
        default_scope: Mapping[str, str] | None = None,
        reembed: bool = False,
        dedup_threshold: float = 0.95,
        near_duplicate: Literal["mark", "skip"] = "mark",
        dedup_window: float = 300.0,
        track_access: bool = True,
        decay: float | None = None,
        weights: Mapping[str, float] | None = None,
        recency_half_life: float = _core.DEFAULT_RECENCY_HALF_LIFE_HOURS,
        snapshot_every: int = 10_000,
        cache_size: int = 4096,
        language: str = "english",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 100,
        hnsw_ef: int = 64,
        hnsw_precision: str = "int8+f16",
        cache_dir: str | Path | None = None,
    ) -> None:
        self._closing = True  # until fully open, so __del__/close do nothing
        self._gone: str | None = None  # why the store is unusable (its folder vanished)
        scope = dict(default_scope or {})
        _scope_kwargs(scope)
        for f, v in scope.items():
            _str(v, f"default_scope[{f!r}]")
        self.default_scope: dict[str, str] = scope
        self.dedup_threshold = _number(dedup_threshold, "dedup_threshold", -1.0, 1.0)
        if near_duplicate not in ("mark", "skip"):
            raise InvalidArgumentError(
                f"near_duplicate must be one of {{'mark', 'skip'}}, got {near_duplicate!r}"
            )
        self.near_duplicate = near_duplicate
        self.track_access = _bool(track_access, "track_access")
        self.decay = None if decay is None else _number(decay, "decay", 0.0)
        self.weights = self._weights(weights)
        self.recency_half_life = _number(recency_half_life, "recency_half_life", 1e-9)
        if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int):
            raise InvalidArgumentError("snapshot_every must be an int")
        self.snapshot_every = max(1, snapshot_every)
        self._window = DedupWindow(_number(dedup_window, "dedup_window", 0.0))

        if embedder is DEFAULT_EMBEDDER:
            embedder = default_embedder()
        if embedder is not None and not isinstance(embedder, Embedder):
            raise InvalidArgumentError(
                f"embedder must follow the Embedder protocol (name, dimension, embed, "
                f"embed_batch), got {type(embedder).__name__}"
            )
        self._embedder: CachedEmbedder | None = (
            None if embedder is None else CachedEmbedder(embedder, EmbeddingCache(cache_size))
        )
        self._dim: int | None = None if embedder is None else int(embedder.dimension)
        if hnsw_precision not in _PRECISIONS:
            raise InvalidArgumentError(
                f"hnsw_precision must be one of {_PRECISIONS}, got {hnsw_precision!r}"
            )
        self._engine_args: dict[str, Any] = {
            "m": hnsw_m,
            "ef_construction": hnsw_ef_construction,
            "ef": hnsw_ef,
            "precision": hnsw_precision,
            "language": language,
        }

        opened = open_store(path, cache_dir)
        self._db: Store = opened.db
        self._index_dir = opened.index_dir
        self._lock = opened.lock
        #: How messages name the store: its directory, "in memory", or the URL without password.
        self.location = opened.location
        self.path = None if path is None or self._db.shared else Path(path)
        try:
            self._write = threading.RLock()
            self._access: dict[int, tuple[int, float]] = {}
            self._access_since = 0.0
            self._access_lock = threading.Lock()
            self._last_write = 0.0
            self._writes_in_flight = 0
            self._flight_lock = threading.Lock()
            self._changes = 0  # since the last snapshot
            self._pool: ThreadPoolExecutor | None = None
            self._background_error: Exception | None = None
            self._pin(embedder, reembed, language)
            # Every change up to _seq is in the engine; so are this process's own
            # changes in _own (above _seq when other processes committed between).
            self._own: set[int] = set()
            self._engine, self._snap_seq, self._seq = self._open_engine()
            self._seed_window()
        except BaseException:
            self._db.close()
            if self._lock is not None:
                self._lock.release()
            raise
        self._closing = False
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=_maintain, args=(weakref.ref(self), self._wake), daemon=True, name="memlane"
        )
        self._thread.start()
        _OPEN.add(self)
        self._finalizer = weakref.finalize(self, _release, self._lock, self._db, self._wake)
        # At exit _close_all closes the store after its thread stopped; the finalizer's own
        # exit hook would run first and close the database under a running thread.
        self._finalizer.atexit = False
        if self._db.shared:
            self._db.follow(functools.partial(_follow, weakref.ref(self)))
        if self._engine.pending():
            self._wake.set()

    # -- opening ------------------------------------------------------------------

    def _pin(self, embedder: Embedder | None, reembed: bool, language: str) -> None:
        """Records the embedder and analyzer of a new store; checks them on an existing one."""
        name = "" if embedder is None else embedder.name
        dim = 0 if embedder is None else int(embedder.dimension)
        pinned = self._db.get_meta("embedder")
        if pinned is None:
            with self._db.transaction() as conn:
                self._db.set_meta(conn, "embedder", name)
                self._db.set_meta(conn, "dimension", str(dim))
                self._db.set_meta(conn, "language", language)
            return
        pinned_dim = int(self._db.get_meta("dimension") or 0)
        if self._db.get_meta("language") not in (None, language):
            raise InvalidArgumentError(
                f"the store was created with language={self._db.get_meta('language')!r}, "
                f"not {language!r}"
            )
        if (pinned, pinned_dim) == (name, dim):
            return
        if not reembed:

            def describe(n: str, d: int) -> str:
                return f"{n!r} (dimension {d})" if n else "no embedder (text only)"

            raise EmbedderMismatchError(
                f"the store {self.location} was built with {describe(pinned, pinned_dim)} but is "
                f"being opened with {describe(name, dim)}; open it with the same embedder, or "
                "pass reembed=True to embed every record again with the new one"
            )
        self._reembed(name, dim)
        self._reembedded = True

    def _reembed(self, name: str, dim: int) -> None:
        """Replaces every stored vector with the current embedder's (or drops them)."""
        with self._db.transaction() as conn:
            seq = self._db.next_seq(conn)
            rows = self._db.texts(conn)
            for start in range(0, len(rows), 1024):
                chunk = rows[start : start + 1024]
                if self._embedder is None:
                    vectors: list[bytes | None] = [None] * len(chunk)
                else:
                    vs = self._embedder.embed_batch([r[1] for r in chunk])
                    vectors = [_blob(v) for v in vs]
                self._db.set_embeddings(
                    conn, [(r[0], v) for v, r in zip(vectors, chunk, strict=True)], seq
                )
            self._db.set_meta(conn, "embedder", name)
            self._db.set_meta(conn, "dimension", str(dim))
        if self._index_dir is not None:
            import shutil

            shutil.rmtree(self._index_dir, ignore_errors=True)

    def _new_engine(self) -> Engine:
        return Engine(self._dim, **self._engine_args)

    def _open_engine(self) -> tuple[Engine, int, int]:
        """The engine, the sequence number of the snapshot it was loaded from, and the
        one it reflects now."""
        engine: Engine | None = None
        seq = 0
        if self._index_dir is not None:
            reason = None
            try:
                engine, seq = Engine.load(self._index_dir)
                if engine.dim != self._dim:
                    reason = f"its dimension {engine.dim} is not the store's {self._dim}"
                elif engine.dim is not None and engine.precision != self._engine_args["precision"]:
                    reason = (
                        f"its precision {engine.precision} is not the requested "
                        f"{self._engine_args['precision']}"
                    )
                elif seq > self._db.seq():
                    reason = "it is newer than the database"
                elif seq < self._db.forgotten():
                    reason = "it is older than the deletions the database remembers"
            except FileNotFoundError:
                # A new cache folder of a shared store is no loss: it is built from the database.
                if (
                    self._db.count()
                    and not self._db.shared
                    and not getattr(self, "_reembedded", False)
                ):
                    reason = "it is missing"
            except MemlaneError as e:
                reason = str(e)
            if reason is not None:
                warnings.warn(
                    f"memlane: the index snapshot of {self.location} cannot be used ({reason}); "
                    "rebuilding it from the database",
                    RuntimeWarning,
                    stacklevel=4,
                )
                engine, seq = None, 0
        if engine is None:
            engine = self._new_engine()
        # A large replay (a crash, or a lost snapshot) earns a snapshot soon.
        self._changes, upto = self._replay(engine, seq)
        return engine, seq, upto

    def _replay(self, engine: Engine, since: int, skip: Set[int] = frozenset()) -> tuple[int, int]:
        """Applies what the database holds beyond change ``since`` to ``engine``; returns
        how many changes that was and the sequence number every change up to is now
        applied. Text and vectors written by a change in ``skip`` (this process's own,
        already in the engine) are not indexed again; their attributes are, as another
        process may have changed them in between."""
        # Read first: commits happen in sequence order, so all changes up to it are
        # visible below; a newer one read too is applied again by the next replay.
        upto = self._db.seq()
        gone = self._db.tombstones_since(since)
        if gone:
            engine.remove(np.asarray(gone, dtype=np.uint64), missing_ok=True)
        count = len(gone)
        for rows in self._db.rows_since(since):
            count += len(rows)
            new = [
                (r[_C["content_seq"]] > since and r[_C["content_seq"]] not in skip)
                or r[0] not in engine
                for r in rows
            ]
            # Text or vector changed: index it all again; else the attributes only.
            attrs = [r for r, n in zip(rows, new, strict=True) if not n]
            full = [r for r, n in zip(rows, new, strict=True) if n]
            with_vec = [r for r in full if self._dim and r[_C["embedding"]] is not None]
            without = [r for r in full if not (self._dim and r[_C["embedding"]] is not None)]
            if with_vec:
                vectors = np.stack([_unblob(r[_C["embedding"]]) for r in with_vec])  # type: ignore[misc]
                engine.apply(self._prepare(engine, with_vec, texts=True, vectors=vectors))
            if without:
                engine.apply(self._prepare(engine, without, texts=True, vectors=None))
            if attrs:
                engine.apply(self._prepare(engine, attrs, texts=False, vectors=None))
        return count, upto

    def _follow(self) -> None:
        """Applies what other processes committed since this one last looked."""
        if self._db.seq() <= self._seq:
            return
        # Other processes' writes, like this one's, make graph linking step aside.
        with self._flight_lock:
            self._writes_in_flight += 1
        try:
            with self._write:
                if self._closing:
                    return
                if self._seq < self._db.forgotten():
                    # Away longer than tombstones are kept: compare every id instead.
                    present = self._db.all_rowids()
                    ids = self._engine.ids_where(None)
                    gone = [int(i) for i in ids if int(i) not in present]
                    self._engine.remove(np.asarray(gone, dtype=np.uint64), missing_ok=True)
                changes, upto = self._replay(self._engine, self._seq, self._own)
                # Own commits happen under the write lock, so all of them are <= upto.
                self._seq, self._own = upto, set()
                self._changes += changes
        finally:
            with self._flight_lock:
                self._writes_in_flight -= 1
            self._last_write = time.monotonic()
        if self._engine.pending() or self._changes >= self._snapshot_due():
            self._wake.set()

    def _committed(self, seq: int) -> None:
        """Records a change of this process, applied to the engine (write lock held)."""
        if seq == self._seq + 1:
            self._seq = seq
        else:
            self._own.add(seq)

    def _seed_window(self) -> None:
        if self._window.seconds <= 0:
            return
        for key, record_id, at in self._db.recent(time.time() - self._window.seconds):
            self._window.remember([key], record_id, at)

    # -- conversions --------------------------------------------------------------

    def _prepare(
        self, engine: Engine, rows: Sequence[Row], *, texts: bool, vectors: FloatArray | None
    ) -> Any:
        # The engine counts accesses as searches make them; the rows hold those
        # flushed so far, so the ones still pending here are added.
        with self._access_lock:
            pending = {r[0]: self._access[r[0]][0] for r in rows if r[0] in self._access}
        return engine.prepare(
            np.fromiter((r[0] for r in rows), dtype=np.uint64, count=len(rows)),
            [r[_C["text"]] for r in rows] if texts else None,
            vectors,
            tables=[r[_C["tbl"]] for r in rows],
            types=[r[_C["type"]] for r in rows],
            scopes=[[r[_C[f]] for r in rows] for f in SCOPE_FIELDS],
            importance=[r[_C["importance"]] for r in rows],
            evergreen=[bool(r[_C["evergreen"]]) for r in rows],
            created_at=[r[_C["created_at"]] for r in rows],
            updated_at=[r[_C["updated_at"]] for r in rows],
            last_accessed_at=[r[_C["last_accessed_at"]] for r in rows],
            metadata=[r[_C["metadata"]] for r in rows],
            keys=[r[_C["id"]] for r in rows],
            access_counts=[r[_C["access_count"]] + pending.get(r[0], 0) for r in rows],
        )

    def _record(self, row: Row, embedding: bool = False) -> MemoryRecord:
        access_count, last = row[18], row[17]
        pending = self._access.get(row[0])
        if pending is not None:
            access_count += pending[0]
            last = max(last, pending[1])
        return MemoryRecord(
            id=row[1],
            text=row[2],
            table=row[3],
            type=row[4],
            agent_id=row[5],
            user_id=row[6],
            room_id=row[7],
            world_id=row[8],
            session_id=row[9],
            namespace=row[10],
            importance=row[11],
            evergreen=bool(row[12]),
            unique=bool(row[13]),
            metadata={} if row[14] == "{}" else json.loads(row[14]),
            created_at=row[15],
            updated_at=row[16],
            last_accessed_at=last,
            access_count=access_count,
            content_hash=row[19],
            embedding=_unblob(row[20]) if embedding else None,
        )

    @staticmethod
    def _row(rowid: int, n: _New, seq: int, blob: bytes | None = None) -> Row:
        return (
            rowid,
            n.id,
            n.text,
            n.table,
            n.type,
            *n.scope,
            n.importance,
            int(n.evergreen),
            int(n.unique),
            n.metadata_json,
            n.created_at,
            n.updated_at,
            n.last_accessed_at,
            n.access_count,
            n.content_hash,
            _blob(n.embedding) if blob is None else blob,
            seq,
            seq,
        )

    # -- scopes and filters ----------------------------------------------------------

    def _scope(
        self,
        *,
        agent_id: str | None,
        user_id: str | None,
        room_id: str | None,
        world_id: str | None,
        session_id: str | None,
        namespace: str | None,
    ) -> dict[str, str]:
        """A call's scope: :attr:`default_scope` with the fields the call gives over it."""
        given = {
            "agent_id": agent_id,
            "user_id": user_id,
            "room_id": room_id,
            "world_id": world_id,
            "session_id": session_id,
            "namespace": namespace,
        }
        out = dict(self.default_scope)
        for f, v in given.items():
            if v is not None:
                out[f] = str(_str(v, f))
        return out

    def _filter(
        self,
        table: str | Sequence[str] | None,
        type: str | Sequence[str] | None,
        scope: Mapping[str, str],
        start: Any = None,
        end: Any = None,
        filters: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        conds: list[dict[str, Any]] = []
        if isinstance(table, str):
            conds.append({"table": _str(table, "table")})
        elif table is not None:
            tables = list(table)
            for t in tables:
                _str(t, "table")
            conds.append({"table": {"$in": tables}})
        if type is not None:
            if isinstance(type, str):
                conds.append({"type": type})
            else:
                types = list(type)
                for t in types:
                    _str(t, "type")
                conds.append({"type": {"$in": types}})
        conds.extend({f: v} for f, v in scope.items())
        if start is not None:
            conds.append({"created_at": {"$gte": _time(start, "start")}})
        if end is not None:
            conds.append({"created_at": {"$lt": _time(end, "end")}})
        if filters is not None:
            # Validated by the engine, with everything else, in one pass.
            conds.append(filters)  # type: ignore[arg-type]
        if not conds:
            return None
        return conds[0] if len(conds) == 1 else {"$and": conds}

    @staticmethod
    def _weights(weights: Mapping[str, float] | None) -> dict[str, float] | None:
        if weights is None:
            return None
        if not isinstance(weights, Mapping):
            raise InvalidArgumentError(f"weights must be a dict, got {type(weights).__name__}")
        unknown = set(weights) - _WEIGHT_KEYS
        if unknown:
            raise InvalidArgumentError(
                f"unknown weight(s) {sorted(unknown)}; expected {sorted(_WEIGHT_KEYS)}"
            )
        return {k: _number(v, f"weights[{k!r}]", 0.0) for k, v in weights.items()}

    # -- embedding ---------------------------------------------------------------------

    def _vector(self, value: object, label: str, check_values: bool = True) -> FloatArray:
        if self._dim is None:
            raise InvalidArgumentError(
                f"{label} given, but this store has no vector space (it was opened with "
                "embedder=None)"
            )
        if type(value) is np.ndarray and value.dtype == np.float32:
            v: FloatArray = value
        else:
            try:
                v = np.asarray(value, dtype=np.float32)
            except (TypeError, ValueError) as e:
                raise InvalidArgumentError(f"{label} must be an array of numbers: {e}") from None
        if v.shape != (self._dim,):
            raise DimensionMismatchError(
                f"{label} has shape {v.shape}; this store's vectors have dimension {self._dim}"
            )
        if not check_values:
            return v
        if not np.all(np.isfinite(v)):
            raise InvalidArgumentError(f"{label} has a non-finite value (NaN or infinity)")
        if not np.any(v):
            raise InvalidArgumentError(f"{label} is all zeros, which has no direction")
        return v

    def _embed_texts(self, texts: list[str]) -> FloatArray:
        """Vectors of ``texts``: from the cache, from stored records with the same text, or
        embedded (one batch)."""
        assert self._embedder is not None and self._dim is not None
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        todo: list[int] = []
        cache = self._embedder.cache
        for i, t in enumerate(texts):
            hit = cache.get(self._embedder.name, t)
            if hit is None:
                todo.append(i)
            else:
                out[i] = hit
        if todo:
            stored: dict[str, FloatArray] = {}
            hashes = [content_hash(texts[i]) for i in todo]
            for row in self._db.rows_by_hash(hashes, embedding=True):
                v = _unblob(row[_C["embedding"]])
                if v is not None and v.shape[0] == self._dim:
                    stored[row[_C["text"]]] = v
            rest = [i for i in todo if texts[i] not in stored]
            for i in todo:
                if texts[i] in stored:
                    out[i] = stored[texts[i]]
                    cache.put(self._embedder.name, texts[i], out[i])
            if rest:
                out[rest] = self._embedder.embed_batch([texts[i] for i in rest])
        return out

    # -- writes ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing:
            raise MemlaneError("this Memory is closed")
        if self._gone is not None:
            raise StorageError(self._gone)

    def _vanished(self) -> bool:
        """Whether the store's folder was deleted under it (then warns, once, and every
        later call raises :class:`~memlane.errors.StorageError`)."""
        if self._gone is not None:
            return True
        if self.path is None or self.path.is_dir():
            return False
        self._gone = f"the store folder {self.path} is gone (deleted while the store was open)"
        warnings.warn(
            f"memlane: {self._gone}; background maintenance stopped, and every later call "
            "raises StorageError",
            RuntimeWarning,
            stacklevel=3,
        )
        return True

    def _validate(self, item: Mapping[str, Any], now: float, importing: bool = False) -> _New:
        # Runs once per record of a bulk add: the common cases take fast paths
        # (exact types), anything else goes through the general checks.
        if not isinstance(item, Mapping):
            raise InvalidArgumentError(f"a record must be a dict, got {type(item).__name__}")
        if not (_IMPORT_KEYS if importing else _ADD_KEYS).issuperset(item):
            unknown = set(item) - (_IMPORT_KEYS if importing else _ADD_KEYS)
            raise InvalidArgumentError(f"unknown key(s) {sorted(unknown)}")
        get = item.get
        text = get("text")
        if type(text) is not str or not text.strip():
            if text is None:
                raise InvalidArgumentError("a record needs a 'text'")
            if not isinstance(text, str):
                raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
            raise InvalidArgumentError("text is empty or whitespace-only")
        default = self.default_scope
        scope: list[str | None] = []
        for f in SCOPE_FIELDS:
            v = get(f)
            if v is None:
                scope.append(default.get(f))
            else:
                if type(v) is not str or not v.strip():
                    _str(v, f)
                scope.append(v)
        meta = get("metadata")
        metadata, metadata_json = ({}, "{}") if not meta else _metadata(meta)
        created = get("created_at")
        created = now if created is None else _time(created, "created_at")
        updated = get("updated_at")
        updated = now if updated is None else _time(updated, "updated_at")
        last = get("last_accessed_at")
        last = created if last is None else _time(last, "last_accessed_at")
        access_count = get("access_count", 0)
        if type(access_count) is not int or access_count < 0:
            raise InvalidArgumentError("access_count must be an int >= 0")
        importance = get("importance", 0.5)
        if type(importance) is not float or not 0.0 <= importance <= 1.0:
            importance = _number(importance, "importance", 0.0, 1.0)
        table = get("table", "memories")
        if type(table) is not str or not table.strip():
            _str(table, "table")
        kind = get("type", "semantic")
        if type(kind) is not str or not kind.strip():
            _str(kind, "type")
        emb = get("embedding")
        if emb is not None:
            ok = type(emb) is np.ndarray and emb.dtype == np.float32 and emb.shape == (self._dim,)
            # Values are checked for the whole batch at once (see _add).
            emb = emb if ok else self._vector(emb, "embedding", False)
        record_id = get("id")
        flag = get("unique", False)
        if flag is not False and flag is not True:
            flag = _bool(flag, "unique")
        evergreen = get("evergreen", False)
        if evergreen is not False and evergreen is not True:
            evergreen = _bool(evergreen, "evergreen")
        return _New(
            id=_new_id() if record_id is None else str(_str(record_id, "id")),
            text=text,
            table=table,
            type=kind,
            scope=tuple(scope),
            importance=importance,
            evergreen=evergreen,
            metadata=metadata,
            metadata_json=metadata_json,
            embedding=emb,
            created_at=created,
            updated_at=updated,
            last_accessed_at=last,
            access_count=access_count,
            unique=flag and importing,
            content_hash=content_hash(text),
            dedup=flag and not importing,
            id_given=record_id is not None,
        )

    def add(
        self,
        text: str,
        *,
        table: str = "memories",
        type: str = "semantic",
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
        importance: float = 0.5,
        evergreen: bool = False,
        metadata: Mapping[str, Any] | None = None,
        embedding: npt.ArrayLike | None = None,
        id: str | None = None,
        created_at: float | datetime | None = None,
        unique: bool = False,
    ) -> MemoryRecord:
        """Stores one memory and returns it (durable once this returns).

        ``unique=True`` checks for duplicates in the same table and scope: the
        same content returns the existing record (``duplicate="exact"``); a
        similar one (cosine >= ``dedup_threshold``) is handled per
        ``near_duplicate``. Independently, the ``dedup_window`` skips repeated
        messages (``duplicate="window"``).
        """
        item = {
            "text": text,
            "table": table,
            "type": type,
            "agent_id": agent_id,
            "user_id": user_id,
            "room_id": room_id,
            "world_id": world_id,
            "session_id": session_id,
            "namespace": namespace,
            "importance": importance,
            "evergreen": evergreen,
            "metadata": metadata,
            "embedding": embedding,
            "id": id,
            "created_at": created_at,
            "unique": unique,
        }
        return self.add_many([item])[0]

    def add_many(self, items: Iterable[Mapping[str, Any]]) -> list[MemoryRecord]:
        """Stores many memories in one transaction with one embedding batch.

        Each item takes the keyword arguments of :meth:`add` (``text`` required).
        All are validated first: one bad item raises and stores nothing.
        """
        records: list[MemoryRecord] = self._add(items)
        return records

    def replace(
        self,
        items: Iterable[Mapping[str, Any]],
        table: str | Sequence[str] | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> tuple[int, list[MemoryRecord]]:
        """Deletes the records :meth:`delete_all` would and stores ``items`` as
        :meth:`add_many` does, in one transaction: a crash leaves the old records
        or the new ones, never neither. Returns how many went and the new records.

        The items are stored as given: ``unique`` (deduplication) is refused,
        since the records they would match are the ones being replaced.
        """
        self._check_open()
        scope = self._scope(
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )
        flt = self._filter(table, type, scope, filters=filters)
        result: tuple[int, list[MemoryRecord]] = self._add(items, replacing=_Replacing(flt))
        return result

    def _add(
        self,
        items: Iterable[Mapping[str, Any]],
        importing: bool = False,
        replacing: _Replacing | None = None,
    ) -> Any:
        # Graph linking in the background waits while writes stream in.
        with self._flight_lock:
            self._writes_in_flight += 1
        try:
            return self._add_batch(items, importing, replacing)
        finally:
            with self._flight_lock:
                self._writes_in_flight -= 1
            self._last_write = time.monotonic()

    def _add_batch(
        self, items: Iterable[Mapping[str, Any]], importing: bool, replacing: _Replacing | None
    ) -> Any:
        """``add_many``'s records; with ``replacing`` (a filter), also deletes its
        matches in the same transaction and returns (deleted, records)."""
        self._check_open()
        if isinstance(items, Mapping | str):
            raise InvalidArgumentError("add_many takes a list of dicts")
        now = time.time()
        news = []
        for i, item in enumerate(items):
            try:
                news.append(self._validate(item, now, importing))
            except InvalidArgumentError as e:
                raise type(e)(f"record {i}: {e}") from None
        if replacing is not None and any(n.dedup for n in news):
            raise InvalidArgumentError("replace stores items as given: unique=True is refused")
        if not news and replacing is None:
            return []
        given = [i for i, n in enumerate(news) if n.embedding is not None]
        if given:
            _check_vectors(np.stack([news[i].embedding for i in given]), given, "embedding")  # type: ignore[misc]
        seen: set[str] = set()
        for n in news:
            if n.id in seen:
                raise InvalidArgumentError(f"id {n.id!r} appears twice in one add_many")
            seen.add(n.id)
        if self._embedder is not None:
            missing = [i for i, n in enumerate(news) if n.embedding is None]
            if missing:
                vectors = self._embed_texts([news[i].text for i in missing])
                for i, v in zip(missing, vectors, strict=True):
                    news[i].embedding = v

        with self._write:
            self._check_open()
            gone: list[int] = []
            if replacing is not None:
                gone = [int(x) for x in self._engine.ids_where(replacing.filter)]
            # Ids made here are random UUIDs; only the caller's can collide.
            given_ids = [n.id for n in news if n.id_given]
            taken = self._db.existing_ids(given_ids) if given_ids else set()
            if taken and gone:  # a record replaced may pass its id on
                leaving = set(gone)
                rows = (self._db.row_by_id(t) for t in taken)
                taken = {r[1] for r in rows if r is not None and r[0] not in leaving}
            if taken:
                raise InvalidArgumentError(
                    f"id(s) already stored: {sorted(taken)[:5]}; use update() to change a record"
                )
            if importing or replacing is not None:
                store = list(range(len(news)))
                dups: dict[int, tuple[str, str | int]] = {}
                marks: dict[int, str | int] = {}
            else:
                store, dups, marks = self._deduplicate(news, now)
            recent: list[tuple[str, str, float]] = []
            if self._window.seconds > 0 and not importing and replacing is None:
                for i in store:
                    n = news[i]
                    if not n.metadata:
                        continue
                    keys = window_keys((n.table, *n.scope), n.metadata, n.content_hash)
                    recent.extend((k, n.id, now) for k in keys)
            if store:
                self._insert([news[i] for i in store], recent, gone)
            elif gone:
                self._delete_rowids(gone)
            for key, record_id, at in recent:
                self._window.remember([key], record_id, at)
            results: dict[int, MemoryRecord] = {}
            for i in store:
                n = news[i]
                rec = results[i] = self._from_new(n)
                if i in marks:
                    target = marks[i]
                    rec.duplicate = "near"
                    rec.duplicate_of = news[target].id if isinstance(target, int) else target
            for i, (kind, target) in dups.items():
                if isinstance(target, int):
                    rec = replace(results[target])
                else:
                    found = self._get_row(target)
                    if found is None:  # pragma: no cover - rows vanish only under this lock
                        raise MemlaneError(f"duplicate {target!r} vanished")
                    rec = found
                rec.duplicate, rec.duplicate_of = kind, rec.id
                results[i] = rec
        records = [results[i] for i in range(len(news))]
        return records if replacing is None else (len(gone), records)

    def _from_new(self, n: _New) -> MemoryRecord:
        return MemoryRecord(
            id=n.id,
            text=n.text,
            table=n.table,
            type=n.type,
            agent_id=n.scope[0],
            user_id=n.scope[1],
            room_id=n.scope[2],
            world_id=n.scope[3],
            session_id=n.scope[4],
            namespace=n.scope[5],
            importance=n.importance,
            evergreen=n.evergreen,
            unique=n.unique,
            metadata=n.metadata,
            created_at=n.created_at,
            updated_at=n.updated_at,
            last_accessed_at=n.last_accessed_at,
            access_count=n.access_count,
            content_hash=n.content_hash,
        )

    def _deduplicate(
        self, news: list[_New], now: float
    ) -> tuple[list[int], dict[int, tuple[str, str | int]], dict[int, str | int]]:
        """Decides what to store (caller holds the write lock).

        Returns the indices to store; the duplicates not stored, as index ->
        (kind, target); and the near-duplicates stored marked, as index ->
        target. A target is a stored record's id, or the index of an item of
        this batch that is stored.
        """
        store: list[int] = []
        dups: dict[int, tuple[str, str | int]] = {}
        marks: dict[int, str | int] = {}
        exact: dict[tuple[Any, ...], str | int] = {}
        wanted = [n.content_hash for n in news if n.dedup]
        if not wanted and not any(n.metadata for n in news):
            return list(range(len(news))), dups, marks  # nothing to check: a bulk load
        if wanted:
            for row in self._db.rows_by_hash(wanted, embedding=False):
                exact.setdefault((row[_C["content_hash"]], row[_C["tbl"]], *row[5:11]), row[1])
        window_batch: dict[str, int] = {}
        vectors: list[tuple[tuple[Any, ...], FloatArray, int]] = []
        any_dedup = bool(wanted)
        for i, n in enumerate(news):
            skey = (n.table, *n.scope)
            wkeys = window_keys(skey, n.metadata, n.content_hash)
            seen = self._window.find(wkeys, now)
            if seen is not None and not self._db.existing_ids([seen]):
                # Deleted in bulk (delete_all, prune) after the window saw it.
                self._window.forget(seen)
                seen = None
            found: str | int | None = seen
            if found is None:
                found = next((window_batch[k] for k in wkeys if k in window_batch), None)
            if found is not None:
                dups[i] = ("window", found)
                continue
            unit = None
            if n.embedding is not None and any_dedup:
                unit = n.embedding / np.linalg.norm(n.embedding)
            if n.dedup:
                ekey = (n.content_hash, *skey)
                if ekey in exact:
                    dups[i] = ("exact", exact[ekey])
                    continue
                near = self._near(n, skey, unit, vectors)
                if near is not None and self.near_duplicate == "skip":
                    dups[i] = ("near", near)
                    continue
                if near is not None:
                    marks[i] = near
                n.unique = near is None
                exact[ekey] = i
            for k in wkeys:
                window_batch[k] = i
            if unit is not None:
                vectors.append((skey, unit, i))
            store.append(i)
        return store, dups, marks

    def _near(
        self,
        n: _New,
        skey: tuple[Any, ...],
        unit: FloatArray | None,
        batch: list[tuple[tuple[Any, ...], FloatArray, int]],
    ) -> str | int | None:
        """A record (id) or batch item (index) at least ``dedup_threshold`` similar to ``n``."""
        if unit is None or n.embedding is None:
            return None
        for key, other, j in batch:
            if key == skey and float(other @ unit) >= self.dedup_threshold:
                return j
        # Same table and exactly the same scope.
        conds: list[dict[str, Any]] = [{"table": n.table}]
        for f, v in zip(SCOPE_FIELDS, n.scope, strict=True):
            conds.append({f: v} if v is not None else {f: {"$exists": False}})
        ids, _, _ = self._engine.search(
            n.text,
            n.embedding,
            mode="vector",
            filter={"$and": conds},
            k=1,
            w_relevance=1.0,
            min_similarity=self.dedup_threshold,
            now=time.time(),
        )
        if len(ids) == 0:
            return None
        rows = self._db.rows_by_rowid([int(ids[0])])
        return None if not rows else str(next(iter(rows.values()))[1])

    def _get_row(self, record_id: str) -> MemoryRecord | None:
        row = self._db.row_by_id(record_id)
        return None if row is None else self._record(row)

    def _insert(
        self, news: list[_New], recent: list[tuple[str, str, float]], gone: Sequence[int] = ()
    ) -> None:
        """Prepares, commits and indexes new records, deleting the rows ``gone`` in the
        same transaction (caller holds the write lock)."""
        base = self._db.reserve_rowids(len(news))
        vectors = None
        blobs: list[bytes | None] = [None] * len(news)
        if self._dim is not None:
            vectors = np.stack([n.embedding for n in news])  # type: ignore[misc]
            raw = vectors.astype("<f4", copy=False).tobytes()
            width = 4 * self._dim
            blobs = [raw[i * width : (i + 1) * width] for i in range(len(news))]
        rows = [self._row(base + j, news[j], 0, blobs[j]) for j in range(len(news))]
        # The engine checks and analyses the batch (without the GIL) while SQLite
        # writes it; the commit waits for that check, so a batch the engine would
        # refuse is rolled back and nothing changes.
        future = None
        if len(news) >= _OVERLAP_MIN:
            future = self._helper().submit(
                self._prepare, self._engine, rows, texts=True, vectors=vectors
            )
        else:
            prepared = self._prepare(self._engine, rows, texts=True, vectors=vectors)
        with self._db.transaction() as conn:
            seq = self._db.next_seq(conn)
            if gone:  # first: a new record may take a deleted one's id
                with self._access_lock:
                    for r in gone:
                        self._access.pop(r, None)
                self._db.delete(conn, list(gone), seq)
            self._db.insert(conn, [(*r[:-2], seq, seq) for r in rows])
            if future is not None:
                prepared = future.result()
            if recent:
                self._db.remember(conn, recent, time.time() - self._window.seconds)
            self._flush_access(conn, seq)
        if gone:
            self._engine.remove(np.asarray(gone, dtype=np.uint64), missing_ok=True)
        self._engine.apply(prepared)
        self._after_write(seq, len(news) + len(gone))

    def _helper(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="memlane-prepare")
        return self._pool

    def _after_write(self, seq: int, changes: int) -> None:
        self._last_write = time.monotonic()
        self._committed(seq)
        self._changes += changes
        pending = self._engine.pending()
        if 0 < pending <= _INLINE_INDEX:
            self._engine.index_pending(_INLINE_INDEX)
        elif pending or self._changes >= self._snapshot_due():
            self._wake.set()
        if self._db.wal_bytes() > _CHECKPOINT_BYTES:
            self._wake.set()

    def _snapshot_due(self) -> int:
        return max(self.snapshot_every, len(self._engine) // 2)

    def get(self, id: str, *, include_embedding: bool = False) -> MemoryRecord:
        """The record with this id; raises :class:`~memlane.errors.UnknownIdError` if none."""
        self._check_open()
        row = self._db.row_by_id(str(_str(id, "id")), embedding=include_embedding)
        if row is None:
            raise UnknownIdError(f"no memory with id {id!r}")
        return self._record(row, include_embedding)

    def update(
        self,
        id: str,
        *,
        text: str | None = None,
        importance: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        evergreen: bool | None = None,
        type: str | None = None,
        embedding: npt.ArrayLike | None = None,
    ) -> MemoryRecord:
        """Changes fields of a record (metadata is replaced whole) and returns it.

        A new text is embedded again (unless ``embedding`` is given).
        """
        self._check_open()
        current = self.get(id)
        item = current.to_dict(embedding=False)
        for key in ("duplicate", "duplicate_of"):
            item.pop(key, None)
        content_changed = False
        if text is not None:
            item["text"] = text
            content_changed = text != current.text
        if importance is not None:
            item["importance"] = importance
        if metadata is not None:
            item["metadata"] = metadata
        if evergreen is not None:
            item["evergreen"] = evergreen
        if type is not None:
            item["type"] = type
        item["embedding"] = embedding
        item["updated_at"] = time.time()
        n = self._validate(item, time.time(), importing=True)
        if n.embedding is not None:
            _check_vectors(n.embedding[None, :], [0], "embedding")
        new_vector = n.embedding is not None
        if content_changed and not new_vector and self._embedder is not None:
            n.embedding = self._embed_texts([n.text])[0]
            new_vector = True
        with self._write:
            self._check_open()
            row = self._db.row_by_id(n.id, embedding=True)
            if row is None:
                raise UnknownIdError(f"no memory with id {id!r}")
            rowid = row[0]
            if not new_vector:
                n.embedding = _unblob(row[_C["embedding"]])
            pending = self._access.get(rowid)
            n.access_count = row[_C["access_count"]]
            n.last_accessed_at = row[_C["last_accessed_at"]]
            full = self._row(rowid, n, 0)
            vectors = n.embedding[None, :] if new_vector and n.embedding is not None else None
            prepared = self._prepare(
                self._engine, [full], texts=content_changed or new_vector, vectors=vectors
            )
            with self._db.transaction() as conn:
                seq = self._db.next_seq(conn)
                content_seq = seq if (content_changed or new_vector) else row[_C["content_seq"]]
                self._db.replace(conn, [(*full[:-2], seq, content_seq)])
                self._flush_access(conn, seq)
            self._engine.apply(prepared)
            self._after_write(seq, 1)
        rec = self._from_new(n)
        if pending is not None:
            rec.access_count += pending[0]
            rec.last_accessed_at = max(rec.last_accessed_at, pending[1])
        return rec

    def delete(self, id: str) -> None:
        """Deletes a record; raises :class:`~memlane.errors.UnknownIdError` if there is none."""
        self._check_open()
        record_id = str(_str(id, "id"))
        with self._write:
            self._check_open()
            row = self._db.row_by_id(record_id)
            if row is None:
                raise UnknownIdError(f"no memory with id {id!r}")
            self._delete_rowids([row[0]])
            self._window.forget(record_id)

    def _delete_ids(self, ids: Sequence[str]) -> set[str]:
        """Deletes the records of ``ids`` that exist, all in one transaction (one change);
        returns the ids deleted."""
        self._check_open()
        with self._write:
            self._check_open()
            found: dict[int, str] = {}
            for record_id in dict.fromkeys(ids):
                row = self._db.row_by_id(record_id)
                if row is not None:
                    found[int(row[0])] = record_id
            if found:
                self._delete_rowids(builtins.list(found))
            for record_id in found.values():
                self._window.forget(record_id)
        return set(found.values())

    def _delete_rowids(self, rowids: list[int]) -> None:
        with self._db.transaction() as conn:
            seq = self._db.next_seq(conn)
            with self._access_lock:
                for r in rowids:
                    self._access.pop(r, None)
            self._flush_access(conn, seq)
            self._db.delete(conn, rowids, seq)
        self._engine.remove(np.asarray(rowids, dtype=np.uint64), missing_ok=True)
        self._after_write(seq, len(rowids))

    def delete_all(
        self,
        table: str | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> int:
        """Deletes every record of the table and scope (and filters); returns how many."""
        self._check_open()
        scope = self._scope(
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )
        flt = self._filter(table, type, scope, filters=filters)
        with self._write:
            self._check_open()
            rowids = [int(x) for x in self._engine.ids_where(flt)]
            if rowids:
                self._delete_rowids(rowids)
        return len(rowids)

    def prune(
        self,
        *,
        max_age_days: float | None = None,
        keep_importance_at_least: float | None = None,
        keep_access_count_above: int | None = None,
        table: str | None = "memories",
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> builtins.list[MemoryRecord]:
        """Deletes old memories that are not important, used or evergreen; returns them.

        See :func:`memlane.agent.prune.prune`.
        """
        from memlane.agent.prune import prune

        return prune(
            self,
            max_age_days=max_age_days,
            keep_importance_at_least=keep_importance_at_least,
            keep_access_count_above=keep_access_count_above,
            table=table,
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )

    # -- reads -----------------------------------------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The embedder this store was opened with (``None`` for a text-only store)."""
        return None if self._embedder is None else self._embedder.inner

    def __len__(self) -> int:
        return len(self._engine)

    def __contains__(self, id: object) -> bool:
        return isinstance(id, str) and self._db.row_by_id(id) is not None

    def count(
        self,
        table: str | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> int:
        """Number of records in the table and scope (and time range and filters)."""
        self._check_open()
        scope = self._scope(
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )
        return int(self._engine.count(self._filter(table, type, scope, start, end, filters)))

    def list(
        self,
        table: str | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        limit: int = 50,
        order: Literal["asc", "desc"] = "desc",
        *,
        offset: int = 0,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        include_embedding: bool = False,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> builtins.list[MemoryRecord]:
        """Records by creation time (newest first by default), e.g. a room's history.

        ``start`` is inclusive, ``end`` exclusive (unix seconds or aware datetimes).
        """
        self._check_open()
        for label, v in (("limit", limit), ("offset", offset)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidArgumentError(f"{label} must be an int >= 0, got {v!r}")
        scope = self._scope(
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )
        flt = self._filter(table, type, scope, start, end, filters)
        ids = self._engine.ids_where(flt, order=order, offset=offset, limit=limit)
        rows = self._db.rows_by_rowid([int(x) for x in ids], embedding=include_embedding)
        return [self._record(rows[int(i)], include_embedding) for i in ids if int(i) in rows]

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: Mode = "hybrid",
        table: str | None = None,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        threshold: float | None = None,
        min_similarity: float | None = None,
        weights: Mapping[str, float] | None = None,
        decay: float | None = None,
        recency_half_life: float | None = None,
        fusion: Literal["rrf", "weighted"] = "weighted",
        rrf_k: float = _core.DEFAULT_RRF_K,
        alpha: float = _core.DEFAULT_ALPHA,
        candidates: int | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        explain: bool = False,
        query_embedding: npt.ArrayLike | None = None,
        track_access: bool | None = None,
        include_embedding: bool = False,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> builtins.list[SearchHit]:
        """The ``k`` best memories for ``query``, best first, in one call into the engine.

        Modes: ``"hybrid"`` (BM25 and vectors fused), ``"vector"``, ``"text"``.
        A store without an embedder searches text. ``query_embedding`` skips
        embedding the query.

        Every score is the relevance times a bounded boost, so relevance comes
        first at any age (README, "Scoring"):

        - relevance in [0, 1], absolute rather than relative to the other hits:
          vector mode the cosine similarity clamped to [0, 1]; text mode
          ``bm25 / ceiling``, where ``ceiling`` (the sum of the query terms'
          idf) is the score no document can reach; hybrid with
          ``fusion="weighted"`` (the default) ``alpha * cosine + (1 - alpha) *
          bm25 / ceiling``, or with ``fusion="rrf"`` the rank-based
          ``sum(1 / (rrf_k + rank)) * (rrf_k + 1) / lists`` (1 = first in both
          lists; it says where a hit ranks, not how well it matches);
        - recency ``exp(-rate * age)`` (1 if evergreen), ``age`` the hours from
          the record's last access to the newest last access among the
          candidates (not to the wall clock); ``rate`` is ``decay`` when given,
          else ``ln 2 / recency_half_life`` (``decay=0`` turns age off);
        - ``score = relevance * (w_relevance + w_importance * importance +
          w_recency * recency) / (w_relevance + w_importance + w_recency)``.
          Default weights 1, 0.1, 0.02: a hit keeps at least 0.89 of its
          relevance, so age and importance reorder near-ties but never lift an
          irrelevant memory over a relevant one. Keys missing from ``weights``
          weigh 0, so ``weights={"relevance": 1}`` is relevance alone.

        ``threshold`` drops hits whose score is below it (a relevance-scale
        cut-off: with the default embedder, cosines under about 0.3 are
        unrelated texts); in vector mode it is a cosine similarity instead
        (elizaOS's ``match_threshold``). ``min_similarity`` drops hits below a
        cosine similarity in any mode. ``candidates`` is how many hits each
        retriever contributes before fusion (``max(50, 4 * k)`` by default).
        ``explain=True`` gives each hit its signals: ``bm25``, ``bm25_rank``,
        ``cosine``, ``vector_rank``, ``relevance``, ``importance``,
        ``recency``, ``age_hours``, ``boost`` and ``score``.
        """
        self._check_open()
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidArgumentError(f"k must be an int >= 1, got {k!r}")
        if mode not in ("hybrid", "vector", "text"):
            raise InvalidArgumentError(
                f"mode must be one of {{'hybrid', 'vector', 'text'}}, got {mode!r}"
            )
        scope = self._scope(
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )
        flt = self._filter(table, type, scope, start, end, filters)
        vector: FloatArray | None = None
        if mode != "text" and self._dim is not None:
            if query_embedding is not None:
                # The engine checks the values (finite, not all zero) in the same call.
                vector = self._vector(query_embedding, "query_embedding", False)
            else:
                _str(query, "query")
                assert self._embedder is not None
                # The caching embedder answers from its cache, else runs the model: never
                # a database lookup, so a search costs the same at any store size.
                vector = self._embedder.embed(query)
        elif mode == "vector":
            raise InvalidArgumentError("vector search on a store without an embedder")
        effective = mode if (vector is not None or mode == "text") else "text"
        if effective == "text":
            _str(query, "query")
        if threshold is not None:
            threshold = _number(threshold, "threshold")
        if min_similarity is not None:
            min_similarity = _number(min_similarity, "min_similarity", -1.0, 1.0)
        if effective == "vector" and threshold is not None and min_similarity is None:
            min_similarity, threshold = threshold, None
        w = self._weights(weights) if weights is not None else self.weights
        w = w or {}
        lam = self.decay if decay is None else _number(decay, "decay", 0.0)
        half_life = (
            self.recency_half_life
            if recency_half_life is None
            else _number(recency_half_life, "recency_half_life", 1e-9)
        )
        touch = self.track_access if track_access is None else _bool(track_access, "track_access")
        now = time.time()
        ids, scores, signals = self._engine.search(
            query,
            vector,
            mode=effective,
            filter=flt,
            k=k,
            candidates=max(_CANDIDATES, 4 * k) if candidates is None else candidates,
            fusion=fusion,
            rrf_k=rrf_k,
            alpha=alpha,
            w_relevance=w.get("relevance"),
            w_importance=w.get("importance"),
            w_recency=w.get("recency"),
            decay=lam,
            recency_half_life=half_life,
            now=now,
            threshold=threshold,
            min_similarity=min_similarity,
            explain=explain,
            touch=touch,
        )
        rowids = [int(i) for i in ids]
        if touch and rowids:
            self._note_access(rowids, now)
        rows = self._db.rows_by_rowid(rowids, embedding=include_embedding)
        hits = []
        for j, rowid in enumerate(rowids):
            row = rows.get(rowid)
            if row is None:  # deleted meanwhile
                continue
            rec = self._record(row, include_embedding)
            info: dict[str, float | int | None] | None = None
            if signals is not None:
                info = {}
                for name, value in zip(_EXPLAIN, signals[j].tolist(), strict=True):
                    if math.isnan(value):
                        info[name] = None
                    elif name.endswith("_rank"):
                        info[name] = int(value)
                    else:
                        info[name] = float(value)
            hits.append(SearchHit(rec, float(scores[j]), info))
        return hits

    # -- access tracking --------------------------------------------------------------------

    def _note_access(self, rowids: builtins.list[int], now: float) -> None:
        with self._access_lock:
            if not self._access:
                self._access_since = now
            for r in rowids:
                n, _ = self._access.get(r, (0, now))
                self._access[r] = (n + 1, now)
            due = len(self._access) >= _ACCESS_FLUSH_COUNT
        if due:
            self._wake.set()

    def _flush_access(self, conn: Any, seq: int) -> None:
        """Writes the access counts gathered since the last flush (inside a transaction)."""
        with self._access_lock:
            if not self._access:
                return
            accesses, self._access = self._access, {}
        self._db.record_accesses(conn, accesses, seq)

    def _flush_access_now(self) -> None:
        with self._write:
            if not self._access:
                return
            with self._db.transaction() as conn:
                seq = self._db.next_seq(conn)
                self._flush_access(conn, seq)
            self._committed(seq)

    # -- maintenance ---------------------------------------------------------------------------

    def _maintenance(self) -> None:
        if self._db.wal_bytes() > _CHECKPOINT_BYTES:
            self._db.checkpoint()
        while not self._closing and (pending := self._engine.pending()):
            # Linking yields to a stream of writes (it would take their cores and
            # their engine lock); parked vectors are searched exactly meanwhile.
            busy = self._writes_in_flight or time.monotonic() - self._last_write < _WRITE_QUIET
            if busy and pending < _MAX_PARKED:
                time.sleep(_WRITE_QUIET / 4)
                if self._db.wal_bytes() > _CHECKPOINT_BYTES:
                    self._db.checkpoint()
                continue
            self._engine.index_pending(_INDEX_BATCH)
        if self._closing:
            return
        self._db.checkpoint()
        if self._access and (
            time.time() - self._access_since >= _ACCESS_FLUSH_SECONDS
            or len(self._access) >= _ACCESS_FLUSH_COUNT
        ):
            self._flush_access_now()
        if self._index_dir is not None and self._changes >= self._snapshot_due():
            self.snapshot()

    def wait_indexed(self) -> None:
        """Links every parked vector into the graph now (searches find them either way)."""
        self._check_open()
        while self._engine.pending():
            self._engine.index_pending(_INDEX_BATCH)

    def snapshot(self) -> None:
        """Writes an index snapshot now (also done periodically and at close)."""
        if self._index_dir is None:
            return
        with self._write:
            self._flush_access_now()
            seq = self._seq
            self._engine.save(self._index_dir, seq)
            self._snap_seq = seq
            self._changes = 0
        self._db.gc_tombstones(seq)

    def close(self) -> None:
        """Flushes access counts, writes a snapshot, releases the store. Idempotent."""
        if getattr(self, "_closing", True):
            return
        with self._write:
            self._closing = True
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        if self._pool is not None:
            self._pool.shutdown()
        if self._gone is not None:  # nothing left to flush into
            self._finalizer()
            return
        if self._access:
            self._flush_access_now()
        if self._index_dir is not None:
            self._engine.save(self._index_dir, self._seq)
        # A shared store without a snapshot cache still lets old tombstones go.
        if self._index_dir is not None or self._db.shared:
            self._db.gc_tombstones(self._seq)
        self._finalizer()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.location
        state = "closed" if self._closing else f"{len(self._engine)} memories"
        name = self._embedder.name if self._embedder is not None else None
        return f"Memory({where!r}, embedder={name!r}, {state})"

    # -- export and import ------------------------------------------------------------------

    def export_jsonl(self, path: str | Path, *, embeddings: bool = True) -> int:
        """Writes every record as one JSON object per line; returns how many."""
        self._check_open()
        n = 0
        with Path(path).open("w", encoding="utf-8") as f:
            for row in self._db.iter_rows(embedding=embeddings):
                rec = self._record(row, embeddings)
                f.write(json.dumps(rec.to_dict(embedding=embeddings), ensure_ascii=False) + "\n")
                n += 1
        return n

    def import_jsonl(
        self, path: str | Path, *, on_conflict: Literal["error", "skip"] = "error"
    ) -> int:
        """Adds the records of an :meth:`export_jsonl` file with every field as exported.

        Records without an embedding are embedded (when the store has an
        embedder). ``on_conflict="skip"`` skips ids already stored. Returns
        how many were added. All or nothing per 1,000 records.
        """
        self._check_open()
        if on_conflict not in ("error", "skip"):
            raise InvalidArgumentError(
                f"on_conflict must be one of {{'error', 'skip'}}, got {on_conflict!r}"
            )
        added = 0
        for batch in self._read_jsonl(Path(path)):
            if on_conflict == "skip":
                taken = self._db.existing_ids([str(b.get("id")) for b in batch])
                batch = [b for b in batch if str(b.get("id")) not in taken]
            for b in batch:
                b.pop("content_hash", None)  # recomputed from the text
            added += len(self._add(batch, importing=True))
        return added

    @staticmethod
    def _read_jsonl(path: Path) -> Iterator[builtins.list[dict[str, Any]]]:
        batch: builtins.list[dict[str, Any]] = []
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InvalidArgumentError(f"{path}:{lineno}: not JSON: {e}") from None
                if not isinstance(item, dict):
                    raise InvalidArgumentError(f"{path}:{lineno}: not a JSON object")
                batch.append(item)
                if len(batch) == 1000:
                    yield batch
                    batch = []
        if batch:
            yield batch
