"""A search's one engine call, the records it admits given as they are (the engine builds
the conditions: ``_core.SearchRequest``), and the engine's answer turned into records."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeGuard

import numpy as np

from memlane import _core, coerce
from memlane._memory.access import AccessLog
from memlane._memory.dates import named_intervals
from memlane._memory.encoding import record
from memlane._memory.judged import Version, judged
from memlane._memory.sync import IndexSync
from memlane.coerce import FloatArray
from memlane.embeddings.cache import CachedEmbedder
from memlane.errors import CorruptFileError, InvalidArgumentError, StorageError, shown
from memlane.records import SearchHit
from memlane.schema import Row

Mode = Literal["hybrid", "vector", "text"]

#: A reranker: the query and the search's best hits in, the hits it keeps out, best first.
Rerank = Callable[[str, list[SearchHit]], Sequence[SearchHit]]
#: A search with ``rerank`` hands the callable its best ``max(k, RERANK_DEPTH)`` hits.
RERANK_DEPTH = 20
#: Hybrid searches of ``WARM_TEXT`` an open runs before it returns (``Searcher.warm``).
WARM_SEARCHES = 4
WARM_TEXT = "memory"


def moment(value: Any, label: str) -> float | None:
    """A read's time argument as unix seconds (None: not given)."""
    return None if value is None else coerce.timestamp(value, label)


def visible(row: Row | None, now: float) -> TypeGuard[Row]:
    """Whether reads return ``row`` at ``now``: there is one, and it has not expired
    (from that instant every read leaves it out; maintenance removes it later)."""
    return row is not None and (row.expires_at is None or row.expires_at > now)


def unexpired(flt: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """``flt`` without the records expired at ``now`` (a record that never expires has
    no ``expires_at``, which ``$lte`` never matches)."""
    live = {"expires_at": {"$not": {"$lte": now}}}
    return live if flt is None else {"$and": [flt, live]}


class Searcher:
    """Runs searches with the store's defaults (``track_access``, ``decay``,
    ``weights``, ``recency_half_life``: as the store was opened with, checked there),
    which the engine reads as one ``SearchRequest``."""

    def __init__(
        self,
        sync: IndexSync,
        access: AccessLog,
        embedder: CachedEmbedder | None,
        *,
        track_access: bool,
        decay: float | None,
        weights: dict[str, float] | None,
        recency_half_life: float,
    ) -> None:
        self.sync = sync
        self.access = access
        self.embedder = embedder
        self.track_access = track_access
        self.decay = decay
        self.weights = weights
        self.recency_half_life = recency_half_life
        self.defaults = _core.SearchRequest(
            decay=decay,
            weights=weights,
            recency_half_life=recency_half_life,
            track_access=track_access,
        )

    def warm(self) -> None:
        """Runs ``WARM_SEARCHES`` hybrid searches of one word in fixed directions, which
        record no access and whose hits are dropped. A process's first searches pay for
        what no later one does (the search space of each thread that walks the graph, the
        graph's entry layers out of every cache, the row reads' statements not yet
        prepared); at a million records the caller's first search took several times a
        settled one (benches/README.md, "The first search after an open"). Stores with
        vectors still to link skip it: a search scans those, which after a rebuild is
        every vector. A damaged row it meets is left to the searches that read it, as
        before: the store stays open for the records that are sound."""
        dim = self.sync.dim
        if dim is None or not len(self.sync.engine) or self.sync.engine.pending():
            return
        directions = np.random.default_rng(0).standard_normal((WARM_SEARCHES, dim))
        request = _core.SearchRequest(track_access=False)
        # No caller searched: the reading-ahead into the row cache need not wait.
        last = self.sync.last_search
        try:
            for vector in directions:
                self._search(WARM_TEXT, request, query_embedding=vector, include_embedding=False)
        except (CorruptFileError, StorageError):
            pass
        self.sync.last_search = last

    @staticmethod
    def depth(k: object, rerank: object) -> object:
        """How many hits the engine returns: ``k``, or for a reranker at least
        ``RERANK_DEPTH`` (then ``k`` is checked here, as the engine words it)."""
        if rerank is None:
            return k
        if not callable(rerank) or not _takes_two(rerank):
            raise InvalidArgumentError(
                f"rerank must be a callable (query, hits) -> hits, got {shown(rerank)}"
            )
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidArgumentError(f"k must be an int >= 1, got {shown(k)}")
        return max(k, RERANK_DEPTH)

    def search(
        self,
        query: str,
        request: _core.SearchRequest,
        *,
        query_embedding: Any,
        include_embedding: bool,
        rerank: Rerank | None = None,
        k: int = 0,
    ) -> list[SearchHit]:
        """The hits of ``query`` with ``request``'s options (checked when it was made)
        among the records it admits; with ``rerank``, the first ``k`` of its order of
        them, the only ones whose access is recorded (none when it raises)."""
        if rerank is None:
            return self._search(
                query, request, query_embedding=query_embedding, include_embedding=include_embedding
            )
        read: list[Row] = []
        hits = self._search(
            query,
            request,
            query_embedding=query_embedding,
            include_embedding=include_embedding,
            read=read,
        )
        rows = {id(hit): row for hit, row in zip(hits, read, strict=True)}
        best = reranked(query, hits, rerank, k)
        touch = self.track_access if request.track_access is None else request.track_access
        if not touch or not best:
            return best
        return self._touched(best, [rows[id(hit)] for hit in best], request, include_embedding)

    def _touched(
        self,
        hits: list[SearchHit],
        rows: list[Row],
        request: _core.SearchRequest,
        include_embedding: bool,
    ) -> list[SearchHit]:
        """``hits`` (read from ``rows``) with an access of each recorded now."""
        rowids = [row.rowid for row in rows]
        now = time.time()
        self.sync.engine.touch(rowids, now)
        if self.access.note(rowids, now):
            self.sync.wake.set()
        # Read again: each record shows the access just recorded, as an unranked hit does.
        return [
            SearchHit(record(row, self.access.get(row), include_embedding), hit.score, hit.explain)
            for hit, row in zip(hits, rows, strict=True)
        ]

    def _search(
        self,
        query: str,
        request: _core.SearchRequest,
        *,
        query_embedding: Any,
        include_embedding: bool,
        read: list[Row] | None = None,
    ) -> list[SearchHit]:
        """The hits; given ``read``, the rows they were read from are put in it, one a
        hit, and no access is recorded but the one a request asking for it has the
        engine record (a reranker chooses the hits the caller gets)."""
        self.sync.last_search = time.monotonic()
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        mode = request.mode
        dim = self.sync.dim
        vector: FloatArray | None = None
        dates = named_intervals(query)
        engine, defaults = self.sync.engine, self.defaults
        ahead: list[_core.SearchAhead | None] = []
        if mode != "text" and dim is not None:
            if query_embedding is not None:
                # The engine checks the values (finite, not all zero) in the same call.
                vector = coerce.vector(query_embedding, "query_embedding", dim, False)
            else:
                # Checked before the model sees it; otherwise the engine checks the text
                # (a lone surrogate, which has no UTF-8 form; empty where words are needed).
                if not query.strip():
                    raise InvalidArgumentError("query must not be empty")
                coerce.clean(query, "query", nul=True)
                assert self.embedder is not None
                # A speaker's name the query holds is left to the speaker pass: in the
                # vector it pulls toward every turn that mentions the name. Only the
                # speakers of what the search admits count (another scope's never do).
                embedded = (
                    engine.vector_text(request, query, now=time.time(), expiring=self.sync.expiring)
                    or query
                )

                def start() -> None:
                    # BM25's list on a pool thread, while the model runs on this one; not
                    # where records expire, whose list is of the moment the search begins,
                    # after the model's run.
                    if not self.sync.expiring:
                        ahead.append(
                            engine.search_ahead(
                                request, query, now=time.time(), defaults=defaults, dates=dates
                            )
                        )

                # The caching embedder answers from its cache, else runs the model: never
                # a database lookup, so a search costs the same at any store size.
                vector = self.embedder.embed_checked(embedded, start)
        elif mode == "vector":
            raise InvalidArgumentError("vector search on a store without an embedder")
        elif query_embedding is not None:  # searched without, but not taken unread
            coerce.vector(query_embedding, "query_embedding", dim, any_length=True)
        now = time.time()
        expiring = self.sync.expiring

        def ask() -> tuple[list[int], list[Version], Any]:
            # No access recorded here: a round may be read again, and only the hits of
            # the last one, returned with their rows, are the caller's.
            ids, scores, signals, versions = engine.search(
                request,
                query,
                vector,
                now=now,
                expiring=expiring,
                defaults=defaults,
                dates=dates,
                touch=False,
                ahead=ahead.pop() if ahead else None,
            )
            return ids, versions, (scores, signals)

        rowids, rows, (scores, signals) = judged(self.sync, ask, include_embedding)
        touch = read is None and (
            self.track_access if request.track_access is None else request.track_access
        )
        kept = [i for i in rowids if i in rows]
        if touch and kept:
            engine.touch(kept, now)
            if self.access.note(kept, now):
                self.sync.wake.set()
        hits = []
        for j, rowid in enumerate(rowids):
            row = rows.get(rowid)
            if row is None:  # deleted meanwhile, or rewritten by another process
                continue
            rec = record(row, self.access.get(row), include_embedding)
            hits.append(SearchHit(rec, scores[j], None if signals is None else signals[j]))
            if read is not None:
                read.append(row)
        return hits


def _takes_two(rerank: Callable[..., object]) -> bool:
    """Whether ``rerank`` can be called with a query and hits: checked before the search,
    as a call that fails to bind raises the same TypeError as one raised inside."""
    try:
        signature = inspect.signature(rerank)
    except (TypeError, ValueError):  # a builtin without one: its call will tell
        return True
    try:
        signature.bind("", [])
    except TypeError:
        return False
    return True


def reranked(query: str, hits: list[SearchHit], rerank: Rerank, k: int) -> list[SearchHit]:
    """The first ``k`` of what ``rerank`` made of ``hits``: hits it was given, each at
    most once (anything else is refused: a reranker cannot invent or repeat a memory)."""
    given = {id(h) for h in hits}
    answer: object = rerank(query, list(hits))
    if inspect.isawaitable(answer):
        if inspect.iscoroutine(answer):
            answer.close()  # never awaited: closed, so Python does not warn of it
        # The search runs in the caller's thread (AsyncMemory's worker thread), which
        # has no event loop to await it on, and the loop it came from may be another's.
        raise InvalidArgumentError(
            f"rerank returned an awaitable ({shown(answer)}): async rerankers are not "
            "supported; pass a function that returns the hits"
        )
    if not isinstance(answer, Iterable):
        raise InvalidArgumentError(
            f"rerank must return the hits it was given (a list), got {shown(answer)}"
        )
    out: list[SearchHit] = []
    seen: set[int] = set()
    for h in answer:
        if id(h) not in given or id(h) in seen:
            raise InvalidArgumentError(
                f"rerank must return hits it was given, each at most once; got {shown(h)}"
            )
        seen.add(id(h))
        out.append(h)
    return out[:k]
