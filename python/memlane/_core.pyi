"""Type stubs of the native module; `python -m mypy.stubtest memlane._core` keeps them honest."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from typing import Any, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "ADAPTIVE_HIGH",
    "ADAPTIVE_LOW",
    "DEFAULT_ALPHA",
    "DEFAULT_ANSWER_WEIGHT",
    "DEFAULT_CONTEXT_WEIGHT",
    "DEFAULT_DATE_WEIGHT",
    "DEFAULT_IMPORTANCE_WEIGHT",
    "DEFAULT_QUESTION_WEIGHT",
    "DEFAULT_RECENCY_HALF_LIFE_HOURS",
    "DEFAULT_RECENCY_WEIGHT",
    "DEFAULT_RELEVANCE_WEIGHT",
    "DEFAULT_RRF_K",
    "DEFAULT_SPEAKER_WEIGHT",
    "DEFAULT_WHEN_WEIGHT",
    "LOG_ENTRY",
    "LOG_HEADER",
    "MARKER_BYTES",
    "MARKER_TAG",
    "SPREAD_RANK",
    "UNIQUE_KEY",
    "Admits",
    "BM25Index",
    "BM25Okapi",
    "Engine",
    "HnswIndex",
    "PreparedBatch",
    "SearchAhead",
    "SearchRequest",
    "WordPiece",
    "WordPieceEncoding",
    "__version__",
    "analyze",
    "blobs",
    "log_blobs",
    "log_entries",
    "log_entry_head",
    "log_header",
    "log_header_store",
    "squared_norm",
    "unblobs",
]

__version__: str

DEFAULT_ALPHA: float
#: The range of the cosine's weight in the default (adaptive) fusion, and the rank
#: each list's spread is measured to (``rust/core/src/fusion.rs``).
ADAPTIVE_LOW: float
ADAPTIVE_HIGH: float
SPREAD_RANK: int
DEFAULT_RRF_K: float
DEFAULT_CONTEXT_WEIGHT: float
DEFAULT_ANSWER_WEIGHT: float
DEFAULT_QUESTION_WEIGHT: float
DEFAULT_SPEAKER_WEIGHT: float
DEFAULT_DATE_WEIGHT: float
DEFAULT_WHEN_WEIGHT: float
DEFAULT_RELEVANCE_WEIGHT: float
DEFAULT_IMPORTANCE_WEIGHT: float
DEFAULT_RECENCY_WEIGHT: float
DEFAULT_RECENCY_HALF_LIFE_HOURS: float
#: The metadata key under which the engine's copy of a unique record's metadata holds
#: its ``unique`` flag (the stored metadata never has it).
UNIQUE_KEY: str
#: The vector file's format (``rust/core/src/vector_log.rs``): the bytes of its header
#: and of an entry's head, and the tag byte and length of the marker a record holds in
#: place of its vector (no blob starts with the tag).
LOG_HEADER: int
LOG_ENTRY: int
MARKER_TAG: int
MARKER_BYTES: int

@final
class BM25Index:
    """BM25 keyword index (Lucene's formula) over uint64 ids, updated one text at a time.

    Scores are ``Σ idf(t) · tf / (tf + k1 · (1 - b + b · len / avgdl))`` with
    ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, over the terms of
    [`analyze`][memlane.analyze]; corpus statistics stay exact under adds and removes.
    Results are ordered by score descending, then id ascending, and equal
    exhaustive scoring. Thread-safe.

    Args:
        k1: term-frequency saturation.
        b: document-length normalisation, 0 (none) to 1.
        language: the analyzer's language (stopwords and Snowball stemmer), one of 18.
        stopwords: True for the language's list, False for none, or a list of words.
        stemming: whether terms are stemmed.
        fold_accents: whether accents are removed ("café" matches "cafe").
    """

    def __new__(
        cls,
        k1: float = 1.2,
        b: float = 0.75,
        language: str = "english",
        stopwords: bool | Sequence[str] = True,
        stemming: bool = True,
        fold_accents: bool = False,
    ) -> BM25Index: ...
    def add(self, ids: npt.ArrayLike, texts: Sequence[str]) -> None:
        """Adds texts under ids (re-adding an id replaces its text); all or nothing."""
    def remove(self, ids: npt.ArrayLike) -> None:
        """Removes ids; raises UnknownIdError, removing nothing, if one is absent."""
    def search(
        self, query: str, k: int = 10, allowed: npt.ArrayLike | None = None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """Best k hits, best first, as (m,) ids and scores with m <= k (real hits only).

        An empty query, or one of stopwords only, gives empty arrays.
        ``allowed`` restricts results to those ids.
        """
    def search_batch(
        self, queries: Sequence[str], k: int = 10, allowed: npt.ArrayLike | None = None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """``search`` for each query in parallel, as (nq, k) ids and scores.

        Rows with fewer than k hits are padded with id ``2**64 - 1`` and score ``-inf``.
        """
    def analyze(self, text: str) -> list[str]:
        """The terms this index's analyzer makes of ``text``."""
    def save(self, path: str | PathLike[str]) -> None:
        """Writes a versioned, checksummed file, atomically replacing any file at ``path``."""
    @staticmethod
    def load(path: str | PathLike[str]) -> BM25Index:
        """The index a ``save`` wrote; ``CorruptFileError`` for a damaged file."""
    def ids(self) -> npt.NDArray[np.uint64]:
        """Stored ids, in insertion order."""
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
    @property
    def vocabulary_size(self) -> int:
        """Distinct terms in the stored texts."""
    @property
    def k1(self) -> float: ...
    @property
    def b(self) -> float: ...
    @property
    def language(self) -> str: ...
    @property
    def stopwords(self) -> bool | list[str]: ...
    @property
    def stemming(self) -> bool: ...
    @property
    def fold_accents(self) -> bool: ...

@final
class BM25Okapi:
    """rank_bm25's Okapi BM25 over pre-tokenized documents (lists of str).

    ``idf = ln(N - n + 0.5) - ln(n + 0.5)``, a negative idf replaced by
    ``epsilon * average_idf``; scores equal rank_bm25's, operation for
    operation. Static: built once from the whole corpus.
    """

    def __new__(
        cls,
        corpus: Iterable[Iterable[str]],
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
    ) -> BM25Okapi: ...
    def get_scores(self, query: Iterable[object]) -> npt.NDArray[np.float64]:
        """The score of every document, in corpus order (non-str tokens match nothing)."""
    def get_batch_scores(
        self, query: Iterable[object], doc_ids: Sequence[int]
    ) -> npt.NDArray[np.float64]:
        """The scores of the documents ``doc_ids`` (indices into the corpus), in that order."""
    def terms(self) -> list[str]:
        """Distinct tokens, in order of first appearance."""
    def idf(self) -> npt.NDArray[np.float64]:
        """The idf of each of ``terms()``, negative ones floored."""
    def doc_len(self) -> npt.NDArray[np.uint32]:
        """Tokens per document."""
    def doc_freqs(self) -> list[dict[str, int]]:
        """Per document, token to count, in order of first appearance."""
    def __len__(self) -> int: ...
    @property
    def k1(self) -> float: ...
    @property
    def b(self) -> float: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def avgdl(self) -> float: ...
    @property
    def average_idf(self) -> float: ...

def blobs(vectors: npt.ArrayLike, half: bool) -> list[bytes]:
    """The rows of ``vectors`` (``(n, dim)``, or one vector) as the database keeps them:
    little-endian float32s, or with ``half`` a tag byte, a float32 scale (the power of
    two at or above the row's largest magnitude) and the components divided by it as
    half floats (``rust/core/src/blob.rs``). A row with a non-finite value raises
    ``InvalidArgumentError``."""

def unblobs(stored: Sequence[bytes], dim: int) -> npt.NDArray[np.float32]:
    """The stored vectors ``stored`` of ``dim`` components as an ``(n, dim)`` matrix:
    float32 blobs, or scaled half floats (see ``blobs``). A blob of neither length, with
    another tag or a damaged scale raises ``CorruptFileError``."""

def squared_norm(vector: npt.NDArray[np.float32]) -> float:
    """The float32 sum of squares of a 1-d float32 array, as ``numpy.dot(v, v)`` gives
    it: infinite past float32's range, NaN where a component is. An array that is not
    contiguous and aligned gives NaN (its caller then checks it the whole way)."""

def log_blobs(
    path: str | PathLike[str], end: int, rowids: Sequence[int], markers: Sequence[bytes]
) -> list[bytes]:
    """The blobs the markers ``markers`` name in an embedded store's vector file ``path``,
    read up to byte ``end``, one for each record of ``rowids``: each entry must be its
    record's and check, else ``CorruptFileError`` names the first that is not."""

def log_header(store: bytes) -> bytes:
    """The header of the vector file of the store whose 16-byte id is ``store``."""

def log_header_store(head: bytes) -> bytes | None:
    """The store id a vector file's first bytes ``head`` name; None if they are not a
    vector file's header of this version."""

def log_entry_head(entry: bytes) -> tuple[int, int, int, int | None] | None:
    """``(rowid, blob length, checksum, chain)`` of the entry ``entry`` starts with; None
    if it is too short for a head. ``chain`` is the one a writer goes on from when this
    entry is the last the database records (after a seal, the chain it holds and the
    seal; after a record's entry, written before seals, that entry alone), if ``entry``
    holds the whole entry and it checks; else None."""

def log_entries(
    at: int,
    chain: int | None,
    rowids: Sequence[int],
    blobs: Sequence[bytes],
    *,
    seal: bool = False,
) -> tuple[bytes, list[bytes], tuple[int, int] | None, int]:
    """The entries of ``rowids`` holding ``blobs`` to be written at byte ``at`` after
    entries whose chain is ``chain`` (None: after none), then, with ``seal``, their seal
    (an entry of rowid 0 holding that chain): their bytes, each record's marker, the last
    entry's ``(offset, checksum)``, and the chain after them."""

def analyze(
    text: str,
    language: str = "english",
    stopwords: bool | Sequence[str] = True,
    stemming: bool = True,
    fold_accents: bool = False,
) -> list[str]:
    """The terms BM25 makes of ``text``: Unicode words, lowercased, stopwords
    removed, Snowball-stemmed, optionally accent-folded; bigrams for scripts
    written without spaces. ``analyze("Running quickly!") == ["run", "quick"]``.
    """

@final
class HnswIndex:
    """An HNSW vector index over uint64 ids.

    Thread-safe: searches run in parallel from any number of threads while
    adds and removes take turns. Distances: cosine ``1 - cos``, ip ``1 - dot``,
    l2 squared Euclidean. ``precision`` "f32" keeps the vectors as given and
    reports exact distances; under cosine and ip it also keeps an int8 copy of
    each vector that searches walk the graph by, ranking their final
    candidates on the floats (about 1.25x the memory of the floats alone). "f16"
    halves and "int8" quarters the memory of the floats, at the cost of
    approximate distances; "int8+f16" walks the graph on int8 codes and ranks
    the final candidates on f16 copies (0.8 of the floats' memory, distances
    as precise as f16's).

    Args:
        dim: the vectors' length.
        metric: ``"cosine"``, ``"ip"`` or ``"l2"``.
        m: links per node (as hnswlib's ``M``).
        ef_construction: candidates weighed per link as vectors are added.
        ef: the default search beam (``ef`` of ``search``), settable later.
        seed: the seed of the levels drawn for new vectors.
        precision: ``"f32"``, ``"f16"``, ``"int8"`` or ``"int8+f16"``.
    """

    def __new__(
        cls,
        dim: int,
        metric: str = "cosine",
        m: int = 16,
        ef_construction: int = 200,
        ef: int = 64,
        seed: int = 0,
        precision: str = "f32",
    ) -> HnswIndex: ...
    def add(self, ids: npt.ArrayLike, vectors: npt.ArrayLike) -> None:
        """Add ``vectors`` (n, dim) under ``ids`` (n,); a present id gets the new vector."""
    def remove(self, ids: npt.ArrayLike) -> None:
        """Remove ``ids``; raises UnknownIdError, removing nothing, if one is absent."""
    def search(
        self,
        queries: npt.ArrayLike,
        k: int = 10,
        ef: int | None = None,
        allowed: npt.ArrayLike | None = None,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """Nearest first, as (nq, k) labels and distances.

        Rows with fewer than ``k`` results are padded with label ``2**64 - 1``
        and distance ``inf``. ``allowed`` restricts results to those ids.
        """
    def hide(self, ids: npt.ArrayLike) -> None:
        """Hide ``ids`` from searches, keeping vectors, links and slots (hnswlib's
        ``mark_deleted``); raises UnknownIdError, hiding nothing, if one is not live."""
    def unhide(self, ids: npt.ArrayLike) -> None:
        """Show hidden ``ids`` again, as they were; UnknownIdError if one is not hidden."""
    def release(self, ids: npt.ArrayLike) -> None:
        """Forget hidden ``ids``, freeing their slots for later adds."""
    def hidden(self) -> npt.NDArray[np.uint64]:
        """Hidden ids, in slot order."""
    def search_where(
        self,
        queries: npt.ArrayLike,
        predicate: Callable[[int], object],
        k: int = 10,
        ef: int | None = None,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """``search`` keeping ids for which ``predicate(id)`` is true.

        The predicate is called on the ids the graph search reaches (as
        hnswlib calls its filter), with the GIL held, one query after another;
        an exception it raises propagates. It may read this index (``len``,
        ``in``, ``search``) but not change it (``InvalidArgumentError``).
        """
    def save(self, path: str | PathLike[str]) -> None:
        """Writes a versioned, checksummed file, atomically replacing any file at ``path``."""
    @staticmethod
    def load(path: str | PathLike[str]) -> HnswIndex:
        """The index a ``save`` wrote; ``CorruptFileError`` for a damaged file."""
    def get_vector(self, id: int) -> npt.NDArray[np.float32]:
        """The stored vector of ``id`` (unit length under the cosine metric)."""
    def ids(self) -> npt.NDArray[np.uint64]:
        """Live ids in storage order."""
    def memory_bytes(self) -> int:
        """Bytes held by vectors, links and id maps."""
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def metric(self) -> str: ...
    @property
    def m(self) -> int: ...
    @property
    def ef_construction(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def precision(self) -> str:
        """How vectors are stored: "f32" (exact), "f16", "int8" or "int8+f16"."""
    @property
    def ef(self) -> int:
        """The search beam ``search`` uses when given no ``ef``; settable."""
    @ef.setter
    def ef(self, value: int) -> None: ...

@final
class PreparedBatch:
    """A checked, analysed batch of records from ``Engine.prepare``, applied once."""

@final
class SearchRequest:
    """The options of ``Memory.search`` and the records it admits, checked once, with the
    messages it raises.

    Left None, ``weights``, ``decay``, ``recency_half_life`` and ``track_access``
    are the store's (``Engine.search``'s ``defaults``; without them: the engine's
    defaults, and no access recorded); ``candidates`` is ``max(50, 4 * k)``, and
    ``max(100, 4 * k)`` in a store of conversation turns; ``alpha`` None weighs the
    cosine per query (adaptive fusion, the default).

    The records admitted: ``table`` and ``type`` (a str or several), ``scope`` (a dict
    of scope fields, each checked by the caller), creation times ``[start, end)``,
    ``unique``, the caller's ``filters`` (``Engine.ids_where``'s grammar), and the
    versions: current ones unless ``as_of`` (true then, as known now), ``known_at``
    (held for current then) or ``include_superseded`` (every one); times are unix
    seconds, checked by the caller."""

    def __new__(
        cls,
        k: int | None = None,
        *,
        mode: str | None = None,
        threshold: float | None = None,
        min_similarity: float | None = None,
        weights: Mapping[str, float] | None = None,
        decay: float | None = None,
        recency_half_life: float | None = None,
        fusion: str | None = None,
        rrf_k: float | None = None,
        alpha: float | None = None,
        candidates: int | None = None,
        explain: bool | None = None,
        track_access: bool | None = None,
        context_weight: float | None = None,
        speaker_weight: float | None = None,
        diversity: float | None = None,
        date_weight: float | None = None,
        when_weight: float | None = None,
        answer_weight: float | None = None,
        question_weight: float | None = None,
        table: str | Iterable[str] | None = None,
        type: str | Iterable[str] | None = None,
        scope: Mapping[str, str] | None = None,
        start: float | None = None,
        end: float | None = None,
        unique: bool | None = None,
        filters: Mapping[str, Any] | None = None,
        as_of: float | None = None,
        known_at: float | None = None,
        include_superseded: bool | None = None,
    ) -> SearchRequest: ...
    @property
    def k(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def candidates(self) -> int: ...
    @property
    def diversity(self) -> float: ...
    @property
    def explain(self) -> bool: ...
    @property
    def track_access(self) -> bool | None: ...

@final
class Admits:
    """The records a listing or a write admits, every version of them, checked and built
    once: ``filter`` a dict in the MongoDB style over the record fields (``id``,
    ``table``, ``type``, the scope fields, ``importance``, ``evergreen``,
    ``access_count``, ``created_at``, ``updated_at``, ``last_accessed_at``) and metadata
    keys (any other name, or ``metadata.<key>``), and the tables, types, scope, creation
    times ``[start, end)`` and ``unique`` flag given. A bad field, operator or value is
    an ``InvalidArgumentError`` naming it."""

    def __new__(
        cls,
        filter: Mapping[str, Any] | None = None,
        *,
        table: str | Iterable[str] | None = None,
        type: str | Iterable[str] | None = None,
        scope: Mapping[str, str] | None = None,
        start: float | None = None,
        end: float | None = None,
        unique: bool | None = None,
    ) -> Admits: ...

@final
class SearchAhead:
    """A hybrid search's BM25 list being retrieved on a pool thread
    (``Engine.search_ahead``), for ``Engine.search(..., ahead=)``; taken once."""

@final
class Engine:
    """The memory engine behind ``memlane.Memory``: record attributes, BM25 and HNSW.

    Ids are uint64 (the store's rowids). Thread-safe: searches run in parallel. BM25's
    ``k1`` and ``b`` left None are the engine's, 1.2 and 0.5: memories are short texts,
    where Lucene's b 0.75 (``BM25Index``'s) over-penalises the longer ones.
    """

    def __new__(
        cls,
        dim: int | None = None,
        *,
        m: int = 16,
        ef_construction: int = 100,
        ef: int = 64,
        seed: int = 0,
        precision: str = "f32",
        k1: float | None = None,
        b: float | None = None,
        language: str = "english",
        stopwords: bool = True,
        stemming: bool = True,
    ) -> Engine: ...
    def prepare(
        self,
        rows: Iterable[tuple[Any, ...]],
        texts: bool,
        vectors: npt.ArrayLike | None = None,
    ) -> PreparedBatch:
        """Checks and analyses a batch without changing anything; ``apply`` inserts it.

        ``rows`` are ``memlane.schema.Row`` tuples (the engine finds the fields it
        reads by name in the row type's ``_fields``, once per type, then reads rows
        by position; ``rowid`` is the engine's id, ``id`` the
        public one ``id`` filters read); ``texts``: index their texts too;
        ``vectors``: one row per record.
        """
    def apply(self, batch: PreparedBatch) -> None:
        """Inserts or replaces the records of a prepared batch."""
    def remove(self, ids: npt.ArrayLike, missing_ok: bool = False) -> int:
        """Removes ids; returns how many were removed."""
    def index_pending(self, max: int = 256, budget: float = 0.0) -> int:
        """Links up to ``max`` parked vectors into the graph, and with ``budget`` (seconds)
        more batches of ``max`` until that time has passed; returns how many remain."""
    def settle_pages(self, budget: int) -> int:
        """Asks the kernel to back at most ``budget`` more bytes of the buffers a search
        reads with huge pages; returns how many bytes are left to ask for."""
    def pending(self) -> int:
        """Vectors waiting to be linked into the graph."""
    def vector_text(
        self, request: SearchRequest, text: str, *, now: float, expiring: bool = False
    ) -> str | None:
        """The text to embed for the query ``text`` searched with ``request``: without
        the names (written with a capital) of the speakers of the records it admits,
        less those expired at ``now`` with ``expiring``, where the request's speaker
        pass weighs them; None: ``text`` as it is."""
    def search_ahead(
        self,
        request: SearchRequest,
        text: str,
        *,
        now: float,
        expiring: bool = False,
        defaults: SearchRequest | None = None,
        dates: Sequence[tuple[float, float]] = ...,
    ) -> SearchAhead | None:
        """Starts retrieving, on a pool thread, the BM25 list a hybrid search of
        ``text`` with ``request`` (and ``now``, ``expiring``, ``defaults``, ``dates`` as
        ``search`` takes them) will take once its vector is known; the caller embeds
        the text meanwhile. None for another mode. The search takes the list only if
        it is the one it would retrieve from the engine as it is then."""
    def search(
        self,
        request: SearchRequest,
        text: str | None = None,
        vector: npt.ArrayLike | None = None,
        *,
        now: float,
        expiring: bool = False,
        defaults: SearchRequest | None = None,
        dates: Sequence[tuple[float, float]] = ...,
        touch: bool = True,
        ahead: SearchAhead | None = None,
    ) -> tuple[
        list[int],
        list[float],
        list[dict[str, float | int | None]] | None,
        list[tuple[float, float]],
    ]:
        """One query with ``request``'s options over the store's ``defaults`` (its
        ``weights``, ``decay``, ``recency_half_life``, ``track_access``), among the
        records the request admits: ids, final scores, when the request asks to
        explain one dict of signals per hit (``SearchHit.explain``), and each hit's
        version as it was judged (``updated_at``, ``expires_at`` or infinity). ``now``:
        the time of the access recorded, and with ``expiring`` the time the records
        expired by are left out; ``dates``: the intervals ``(start, end)`` of the dates
        the query's text names; ``touch=False`` records no access whatever the request
        asks; ``ahead``: its BM25 list, retrieved while its vector was made."""
    def nearest(
        self,
        vectors: npt.ArrayLike,
        groups: Sequence[int],
        filters: Sequence[Mapping[str, Any]],
        min_similarity: float,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """Per row of ``vectors``: the nearest record ``filters[groups[row]]`` admits with
        cosine >= ``min_similarity``, as ids (``2**64 - 1`` where none) and similarities
        (NaN where none)."""
    def ids_where(
        self,
        admits: Admits | None = None,
        *,
        order: str = "desc",
        offset: int = 0,
        limit: int = ...,
        sort: str = "created_at",
        expire_at: float | None = None,
    ) -> npt.NDArray[np.uint64]:
        """Ids of the records ``admits`` admits (every version; None: all), less those
        expired at ``expire_at``, by creation time, or by the column ``sort`` names
        (``importance``, ``access_count``, ``last_accessed_at``) and then by creation
        time and id; ``order`` applies to all three, so ties go oldest or newest first."""
    def versioned_ids_where(
        self,
        admits: Admits | None = None,
        *,
        order: str = "desc",
        offset: int = 0,
        limit: int = ...,
        sort: str = "created_at",
        expire_at: float | None = None,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """``ids_where``'s ids, and the ``updated_at`` and ``expires_at`` (infinity for
        none) of each as it was admitted."""
    def count(self, admits: Admits | None = None, *, expire_at: float | None = None) -> int:
        """How many records ``admits`` admits, superseded ones too (None: all), less those
        expired at ``expire_at``."""
    def groups(
        self, admits: Admits | None = None, *, expire_at: float | None = None
    ) -> list[tuple[str, list[str | None], int]]:
        """How many records are admitted (see ``count``) per table and scope: (table, the six
        scope values in ``SCOPE_FIELDS`` order, count), by table, the largest count
        first, then by the scope's values (absent first)."""
    def filter_stats(self, filter: Mapping[str, Any]) -> tuple[int, int]:
        """(matching records, records examined) for a filter."""
    def touch(self, ids: npt.ArrayLike, now: float) -> None:
        """Records an access of ``ids`` at ``now``: last_accessed_at and access_count."""
    def vector(self, id: int) -> npt.NDArray[np.float32] | None: ...
    def fill(self, rows: Sequence[tuple[int, bytes]]) -> None:
        """Gives back the vectors a loaded snapshot left out, as the database keeps them:
        ``(id, blob)`` rows (see ``unblobs``). Ids whose vector is not awaited, and
        rows the index would refuse (their ids stay awaiting), are ignored; a damaged blob
        raises ``CorruptFileError``."""
    def fill_log(self, path: str | PathLike[str], end: int) -> None:
        """Gives back the vectors a loaded snapshot left out from an embedded store's
        vector file (``memlane.storage.vector_log``), read up to byte ``end``: the newest
        entry of each awaited id. An entry whose checksum fails, or a file shorter than
        ``end``, raises ``CorruptFileError``."""
    def awaiting(self) -> npt.NDArray[np.uint64]:
        """Ids whose vector the snapshot left out and no ``fill`` gave back: vector
        searches raise while there are any."""
    def ids(self) -> npt.NDArray[np.uint64]: ...
    def save(
        self, root: str | PathLike[str], seq: int, vectors: bool = True, history: int = 0
    ) -> None:
        """Writes a snapshot reflecting change ``seq`` into the directory ``root``;
        without ``vectors`` its graph leaves out the live vectors (the database holds
        them). ``history`` names the history of changes ``seq`` is of (0: none), which
        ``load`` gives back."""
    @staticmethod
    def load(
        root: str | PathLike[str], *, k1: float | None = None, b: float | None = None
    ) -> tuple[Engine, int, int]:
        """The newest snapshot under ``root``, its change sequence number and the
        ``history`` it was saved with (0: none, or an older memlane's snapshot). A file
        of the snapshot that another save wrote is ``CorruptFileError``. If it was saved
        without its vectors, vector searches raise until ``fill`` gave back every id of
        ``awaiting``. BM25's ``k1`` and ``b`` are these (None: the engine's, as at
        construction), not the snapshot's: they weigh its statistics at query time."""
    @property
    def bm25_params(self) -> tuple[float, float]:
        """BM25's ``(k1, b)``."""
    @property
    def dim(self) -> int | None: ...
    @property
    def precision(self) -> str | None: ...
    @property
    def ef(self) -> int | None:
        """The vector index's search beam width (None without a vector space)."""
    def set_ef(self, ef: int) -> None:
        """Sets the search beam width (a search-time setting; a loaded snapshot keeps its
        graph, built with the ``m`` and ``ef_construction`` it was built with)."""
    def __len__(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...

@final
class WordPiece:
    """BERT's WordPiece tokenizer read from a ``tokenizer.json`` of the ``tokenizers``
    library (WordPiece model, BertNormalizer, BertPreTokenizer, a BERT template),
    giving that library's ids and character offsets. Immutable and thread-safe.

    The attention mask of an encoding is all ones, its token type ids all zeros.
    """

    @staticmethod
    def from_file(path: str | PathLike[str], max_length: int | None = None) -> WordPiece:
        """Reads ``path``; another configuration raises ``InvalidArgumentError`` saying
        what it is. ``max_length`` cuts every encoding to that many tokens, special
        tokens included (a limit below them cuts nothing, as in ``tokenizers``)."""
    @property
    def max_length(self) -> int | None: ...
    @property
    def pad_id(self) -> int:
        """The file's padding id (0 when it sets none)."""
    @property
    def num_special_tokens(self) -> int:
        """Special tokens the template puts around a text."""
    def encode(self, text: str, add_special_tokens: bool = True) -> WordPieceEncoding: ...
    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[WordPieceEncoding]:
        """``encode`` of each text, in parallel, without the GIL."""

@final
class WordPieceEncoding:
    """One text's tokens."""

    @property
    def ids(self) -> list[int]: ...
    @property
    def offsets(self) -> list[tuple[int, int]]:
        """Each token's characters in the text; ``(0, 0)`` for the template's special tokens."""
    @property
    def truncated(self) -> bool:
        """Whether tokens beyond ``max_length`` were cut."""
    def __len__(self) -> int: ...
