"""A read's arguments turned into one engine filter and one engine call, and the
engine's answer turned into records."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from memlane import _core, coerce
from memlane._memory.access import AccessLog
from memlane._memory.encoding import record
from memlane._memory.sync import IndexSync
from memlane.coerce import FloatArray
from memlane.embeddings.cache import CachedEmbedder
from memlane.errors import InvalidArgumentError
from memlane.records import SearchHit

Mode = Literal["hybrid", "vector", "text"]

#: The signals ``explain=True`` gives, in the engine's column order.
EXPLAIN = (
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
# Hits each retriever contributes before fusion, at least (chosen on SciFact's
# train queries: benches/tune_search.py).
CANDIDATES = 50


def build_filter(
    table: str | Sequence[str] | None,
    type: str | Sequence[str] | None,
    scope: Mapping[str, str],
    start: Any = None,
    end: Any = None,
    filters: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """One engine filter for a read's table, type, scope, time range and filters."""
    conds: list[dict[str, Any]] = []
    for field, value in (("table", table), ("type", type)):
        if isinstance(value, str):
            conds.append({field: coerce.text(value, field)})
        elif value is not None:
            values = [coerce.text(v, field) for v in value]
            conds.append({field: {"$in": values}})
    conds.extend({f: v} for f, v in scope.items())
    if start is not None:
        conds.append({"created_at": {"$gte": coerce.timestamp(start, "start")}})
    if end is not None:
        conds.append({"created_at": {"$lt": coerce.timestamp(end, "end")}})
    if filters is not None:
        # Validated by the engine, with everything else, in one pass.
        conds.append(filters)  # type: ignore[arg-type]
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else {"$and": conds}


def versions_filter(
    flt: dict[str, Any] | None, as_of: Any, include_superseded: Any, known_at: Any = None
) -> tuple[dict[str, Any] | None, bool]:
    """A search's filter and whether it leaves superseded records out: by default it
    does (the engine drops them cheaply); ``as_of`` keeps the versions true at that
    time (valid time, as known now); ``known_at`` the versions the store held for
    current at that time (recorded by then, and not yet closed then: a closed
    version's ``updated_at`` is when it was closed); ``include_superseded`` keeps
    every version."""
    every = coerce.flag(include_superseded, "include_superseded")
    if as_of is None and known_at is None:
        return flt, not every
    if every:
        raise InvalidArgumentError("give as_of or known_at, or include_superseded, not both")
    conds: list[dict[str, Any]] = []
    if as_of is not None:
        t = coerce.timestamp(as_of, "as_of")
        conds += [
            {"created_at": {"$lte": t}},
            {"$or": [{"valid_to": None}, {"valid_to": {"$gt": t}}]},
        ]
    if known_at is not None:
        t = coerce.timestamp(known_at, "known_at")
        conds.append({"recorded_at": {"$lte": t}})
        if as_of is None:
            conds.append({"$or": [{"valid_to": None}, {"updated_at": {"$gt": t}}]})
    return {"$and": conds if flt is None else [flt, *conds]}, False


def unexpired(flt: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """``flt`` without the records expired at ``now`` (a record that never expires has
    no ``expires_at``, which ``$lte`` never matches)."""
    live = {"expires_at": {"$not": {"$lte": now}}}
    return live if flt is None else {"$and": [flt, live]}


class Searcher:
    """Runs searches with the store's defaults."""

    def __init__(self, sync: IndexSync, access: AccessLog, embedder: CachedEmbedder | None) -> None:
        self.sync = sync
        self.access = access
        self.embedder = embedder
        self.track_access = True
        self.decay: float | None = None
        self.weights: dict[str, float] | None = None
        self.recency_half_life = _core.DEFAULT_RECENCY_HALF_LIFE_HOURS

    def search(
        self,
        query: str,
        k: int,
        flt: dict[str, Any] | None,
        *,
        mode: Mode,
        threshold: float | None,
        min_similarity: float | None,
        weights: Mapping[str, float] | None,
        decay: float | None,
        recency_half_life: float | None,
        fusion: Literal["rrf", "weighted"],
        rrf_k: float,
        alpha: float,
        candidates: int | None,
        explain: bool,
        query_embedding: Any,
        track_access: bool | None,
        include_embedding: bool,
        as_of: Any = None,
        include_superseded: bool = False,
        known_at: Any = None,
    ) -> list[SearchHit]:
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        # Not stored, so a NUL may stay; a lone surrogate has no UTF-8 form for the engine.
        coerce.clean(query, "query", nul=True)
        coerce.count(k, "k", 1)
        if mode not in ("hybrid", "vector", "text"):
            raise InvalidArgumentError(
                f"mode must be one of {{'hybrid', 'vector', 'text'}}, got {mode!r}"
            )
        dim = self.sync.dim
        vector: FloatArray | None = None
        if mode != "text" and dim is not None:
            if query_embedding is not None:
                # The engine checks the values (finite, not all zero) in the same call.
                vector = coerce.vector(query_embedding, "query_embedding", dim, False)
            else:
                coerce.text(query, "query", nul=True)
                assert self.embedder is not None
                # The caching embedder answers from its cache, else runs the model: never
                # a database lookup, so a search costs the same at any store size.
                vector = self.embedder.embed(query)
        elif mode == "vector":
            raise InvalidArgumentError("vector search on a store without an embedder")
        effective = mode if (vector is not None or mode == "text") else "text"
        if effective == "text":
            coerce.text(query, "query", nul=True)
        if threshold is not None:
            threshold = coerce.number(threshold, "threshold")
        if min_similarity is not None:
            min_similarity = coerce.number(min_similarity, "min_similarity", -1.0, 1.0)
        if effective == "vector" and threshold is not None and min_similarity is None:
            min_similarity, threshold = threshold, None
        w = (coerce.weights(weights) if weights is not None else self.weights) or {}
        lam = self.decay if decay is None else coerce.number(decay, "decay", 0.0)
        half_life = (
            self.recency_half_life
            if recency_half_life is None
            else coerce.number(recency_half_life, "recency_half_life", 1e-9)
        )
        touch = (
            self.track_access if track_access is None else coerce.flag(track_access, "track_access")
        )
        if candidates is not None:
            coerce.count(candidates, "candidates", 1)
        flt, current_only = versions_filter(flt, as_of, include_superseded, known_at)
        now = time.time()
        if self.sync.expiring:
            flt = unexpired(flt, now)
        ids, scores, signals = self.sync.engine.search(
            query,
            vector,
            mode=effective,
            filter=flt,
            k=k,
            candidates=min(max(CANDIDATES, 4 * k), coerce.MAX_COUNT)
            if candidates is None
            else candidates,
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
            current_only=current_only,
        )
        rowids = ids.tolist()
        if touch and rowids and self.access.note(rowids, now):
            self.sync.wake.set()
        rows = self.sync.rows(rowids, embedding=include_embedding)
        hits = []
        for j, rowid in enumerate(rowids):
            row = rows.get(rowid)
            if row is None:  # deleted meanwhile
                continue
            rec = record(row, self.access.get(rowid), include_embedding)
            info: dict[str, float | int | None] | None = None
            if signals is not None:
                info = {}
                for name, value in zip(EXPLAIN, signals[j].tolist(), strict=True):
                    if math.isnan(value):
                        info[name] = None
                    elif name.endswith("_rank"):
                        info[name] = int(value)
                    else:
                        info[name] = float(value)
            hits.append(SearchHit(rec, float(scores[j]), info))
        return hits
