"""LangGraph's long-term memory over memlane: a ``BaseStore``.

``pip install "memlane[langgraph]"``::

    from memlane.integrations.langgraph import MemlaneStore

    store = MemlaneStore()                       # in memory; or MemlaneStore(memlane.Memory(path))
    store.put(("users", "alice"), "prefs", {"theme": "dark"})
    store.get(("users", "alice"), "prefs").value  # {'theme': 'dark'}
    graph = builder.compile(store=store)         # a graph's long-term memory

It behaves as LangGraph's ``InMemoryStore`` on the same calls: hierarchical
namespaces, ``put/get/delete/search/list_namespaces``, ``batch``/``abatch`` (reads
see the store as it was before the batch's writes; the last write of a key wins),
value filters (``$eq $ne $gt $gte $lt $lte``), and semantic search through an
``index`` config (``{"dims", "embed", "fields"}``) whose field texts are each
embedded and searched by memlane's engine, an item scoring its best field's
cosine similarity. Where it differs: ``created_at`` survives an update (as in
LangGraph's PostgreSQL store); ``list_namespaces`` lists the namespaces that hold
items (``InMemoryStore`` keeps listing one whose last item was deleted); range
filters (``$gt`` ...) match numbers only (``InMemoryStore`` also converts numeric
strings); items outlive the process when the ``Memory`` is durable; and TTLs are
supported (``ttl={"default_ttl": minutes, "refresh_on_read": bool}``, or ``ttl=``
on ``put``): expired items are never returned, a read that refreshes a TTL
rewrites the item's expiry, and :meth:`MemlaneStore.sweep_ttl` (or
:meth:`MemlaneStore.start_ttl_sweeper`) deletes them.

Each item is one memlane record per indexed text (one record when nothing is
indexed) in ``table`` (``"langgraph"``), with ``scope`` (memlane's scope fields)
bound: a store never reads another scope's items.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from memlane import Memory, MemoryRecord
from memlane._memory import times
from memlane.errors import InvalidArgumentError, UnknownIdError
from memlane.integrations._common import FunctionEmbedder, check_scope, own_memory

__all__ = ["MemlaneStore"]

_PAGE = 256
#: The clock TTLs are read against (tests move it).
_now = time.time
_OPS = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"}


def _ts(seconds: float) -> datetime:
    return times.moment(seconds)


def _matches(value: Any, flt: Any) -> bool:
    """LangGraph's filter semantics (JSONB-like) on one value."""
    if isinstance(flt, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in flt):
            return all(_operator(value, op, arg) for op, arg in flt.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in flt.items())
    if isinstance(flt, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(flt)
            and all(_matches(a, b) for a, b in zip(value, flt, strict=True))
        )
    return bool(value == flt)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if op not in _OPS:
        raise InvalidArgumentError(f"unsupported filter operator {op!r}; use one of {sorted(_OPS)}")
    try:
        a, b = float(value), float(arg)
    except (TypeError, ValueError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _pushdown(flt: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    """memlane conditions that every item ``flt`` matches also matches (a superset).

    Items are checked against ``flt`` itself afterwards, so what memlane's grammar
    reads differently (lists, None, ``$ne`` on lists, booleans) is left out here.
    """
    conds: list[dict[str, Any]] = []
    for key, arg in flt.items():
        if not isinstance(key, str) or "." in key or key.startswith("$") or not key:
            continue
        field = f"{path}.{key}"
        if isinstance(arg, str) or _number(arg):
            conds.append({field: arg})
        elif isinstance(arg, dict) and any(isinstance(k, str) and k.startswith("$") for k in arg):
            for op, x in arg.items():
                if op == "$eq" and (isinstance(x, str) or _number(x)):
                    conds.append({field: x})
                elif op in ("$gt", "$gte", "$lt", "$lte") and _number(x):
                    conds.append({field: {op: x}})
        elif isinstance(arg, dict):
            conds.extend(_pushdown(arg, field))
    return conds


def _namespace_matches(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    part = ns[: len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path) :]
    if cond.match_type not in ("prefix", "suffix"):
        raise InvalidArgumentError(f"unsupported match type {cond.match_type!r}")
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


class MemlaneStore(BaseStore):
    """A LangGraph ``BaseStore`` over a :class:`memlane.Memory`.

    Args:
        memory: the store to use; by default a new one (in memory unless ``path``
            is given), closed by :meth:`close`.
        index: semantic search: ``{"dims": int, "embed": Embeddings | function |
            "provider:model", "fields": ["$"]}``. Without ``embed``, the memory's
            own embedder embeds (memlane's offline ONNX model for a new store).
            Without ``index``, search ignores ``query`` as ``InMemoryStore`` does.
        ttl: ``{"default_ttl": minutes, "refresh_on_read": bool}``.
        scope: memlane scope fields every item gets and every read is bound to.
        table: the memlane table items live in.
        path: where a new store lives (a directory or ``postgresql://`` URL).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        memory: Memory | None = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        scope: Mapping[str, str] | None = None,
        table: str = "langgraph",
        path: str | Path | None = None,
    ) -> None:
        self.scope = check_scope(scope)
        self.table = table
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = dict(index) if index else None
        self.embeddings: Embeddings | None = None
        self._fields: list[tuple[str, Any]] = []
        dims: int | None = None
        if self.index_config is not None:
            if self.index_config.get("embed") is not None:
                self.embeddings = ensure_embeddings(self.index_config["embed"])
            dims = self.index_config.get("dims")
            self._fields = [
                (p, p if p == "$" else tokenize_path(p))
                for p in (self.index_config.get("fields") or ["$"])
            ]
        emb = self.embeddings

        def make() -> Memory:
            if self.index_config is None:
                return Memory(path, embedder=None)
            if emb is None:
                return Memory(path)
            name = f"langgraph:{type(emb).__name__}"
            embedder = FunctionEmbedder(emb.embed_documents, emb.embed_query, name, dims)
            return Memory(path, embedder=embedder, hnsw_precision="f32")

        self.memory, self._owned = own_memory(memory, make)
        inner = self.memory.embedder
        self._dim = None if inner is None else int(inner.dimension)
        if dims is not None and self._dim is not None and int(dims) != self._dim:
            raise InvalidArgumentError(
                f"index dims={dims} but the memory's embedder gives {self._dim}-d vectors"
            )
        if self.index_config is not None and self._dim is None:
            raise InvalidArgumentError("semantic search needs a memory with an embedder")
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    # -- housekeeping -------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the TTL sweeper; closes the memory if this store made it."""
        self.stop_ttl_sweeper()
        if self._owned:
            self.memory.close()

    def __enter__(self) -> MemlaneStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sweep_ttl(self) -> int:
        """Deletes the expired items' records now; returns how many records went."""
        return self.memory.delete_all(
            self.table, filters={"metadata.lg.exp": {"$lte": _now()}}, **self.scope
        )

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweeps expired items in a background thread every interval (default: the
        ``ttl`` config's ``sweep_interval_minutes``, else 5 minutes)."""
        if self._sweeper is not None:
            return
        conf = self.ttl_config or {}
        minutes = sweep_interval_minutes or conf.get("sweep_interval_minutes") or 5
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(float(minutes) * 60):
                self.sweep_ttl()

        self._sweeper = threading.Thread(target=run, daemon=True, name="memlane-ttl")
        self._sweeper.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stops the sweeper thread; whether it stopped within ``timeout``."""
        if self._sweeper is None:
            return True
        self._stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    # -- records ------------------------------------------------------------------------------

    def _base_id(self, namespace: tuple[str, ...], key: str) -> str:
        raw = json.dumps([self.table, sorted(self.scope.items()), list(namespace), key])
        return "lg-" + hashlib.sha256(raw.encode()).hexdigest()[:40]

    def _live(self, now: float) -> dict[str, Any]:
        return {
            "$or": [
                {"metadata.lg.exp": {"$exists": False}},
                {"metadata.lg.exp": {"$gt": now}},
            ]
        }

    def _item(self, rec: MemoryRecord, score: float | None = None, search: bool = False) -> Item:
        lg = rec.metadata["lg"]
        args: dict[str, Any] = {
            "value": lg["value"],
            "key": lg["key"],
            "namespace": tuple(lg["ns"]),
            "created_at": _ts(rec.created_at),
            "updated_at": _ts(lg["u"]),
        }
        return SearchItem(**args, score=score) if search else Item(**args)

    def _texts(self, op: PutOp) -> list[str]:
        """The texts of an item that semantic search embeds."""
        if self.index_config is None or op.index is False or op.value is None:
            return []
        paths = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        texts: list[str] = []
        for _, tokens in paths:
            texts.extend(t for t in get_text_at_path(op.value, tokens) if t.strip())
        return texts

    def _refresh(self, records: Iterable[MemoryRecord], now: float) -> None:
        """Restarts the TTL of these items (every record of each)."""
        for rec in records:
            lg = rec.metadata["lg"]
            if lg.get("ttl") is None:
                continue
            base = lg["item"]
            ids = [base] + [f"{base}-{i}" for i in range(1, lg["n"])]
            for record_id in ids:
                try:
                    current = self.memory.get(record_id)
                except UnknownIdError:
                    continue
                meta = dict(current.metadata)
                meta["lg"] = {**meta["lg"], "exp": now + float(lg["ttl"]) * 60}
                self.memory.update(record_id, metadata=meta)

    # -- batch --------------------------------------------------------------------------------

    def _plan(self, ops: Iterable[Op]) -> tuple[list[Op], dict[tuple[Any, ...], PutOp], list[str]]:
        ops = list(ops)
        puts: dict[tuple[Any, ...], PutOp] = {}
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = op
            elif not isinstance(op, GetOp | SearchOp | ListNamespacesOp):
                raise InvalidArgumentError(f"unknown operation {type(op).__name__}")
        texts = [t for op in puts.values() for t in self._texts(op)]
        return ops, puts, texts

    def _queries(self, ops: Sequence[Op]) -> list[str]:
        if self.index_config is None or self.embeddings is None:
            return []
        return sorted({op.query for op in ops if isinstance(op, SearchOp) and op.query})

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops, puts, texts = self._plan(ops)
        queries = self._queries(ops)
        qvecs = {q: self.embeddings.embed_query(q) for q in queries} if self.embeddings else {}
        vectors = self.embeddings.embed_documents(texts) if self.embeddings and texts else None
        return self._run(ops, puts, texts, vectors, qvecs)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops, puts, texts = self._plan(ops)
        queries = self._queries(ops)
        qvecs: dict[str, list[float]] = {}
        vectors = None
        if self.embeddings is not None:
            found = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
            qvecs = dict(zip(queries, found, strict=True))
            if texts:
                vectors = await self.embeddings.aembed_documents(texts)
        return await asyncio.to_thread(self._run, ops, puts, texts, vectors, qvecs)

    def _run(
        self,
        ops: list[Op],
        puts: dict[tuple[Any, ...], PutOp],
        texts: list[str],
        vectors: Sequence[Sequence[float]] | None,
        qvecs: dict[str, list[float]],
    ) -> list[Result]:
        now = _now()
        results: list[Result] = []
        touched: list[MemoryRecord] = []
        for op in ops:
            if isinstance(op, GetOp):
                rec = self._get(op.namespace, op.key, now)
                results.append(None if rec is None else self._item(rec))
                if rec is not None and op.refresh_ttl:
                    touched.append(rec)
            elif isinstance(op, SearchOp):
                found = self._search(op, qvecs, now)
                results.append([self._item(r, s, search=True) for r, s in found])
                if op.refresh_ttl:
                    touched.extend(r for r, _ in found)
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op, now))
            else:
                results.append(None)
        if touched:
            self._refresh(touched, now)
        if puts:
            self._apply(puts, texts, vectors, now)
        return results

    def _get(self, namespace: tuple[str, ...], key: str, now: float) -> MemoryRecord | None:
        try:
            rec = self.memory.get(self._base_id(namespace, key))
        except UnknownIdError:
            return None
        exp = rec.metadata.get("lg", {}).get("exp")
        if exp is not None and exp <= now:
            return None
        return rec

    def _apply(
        self,
        puts: dict[tuple[Any, ...], PutOp],
        texts: list[str],
        vectors: Sequence[Sequence[float]] | None,
        now: float,
    ) -> None:
        bases = {k: self._base_id(*k) for k in puts}
        old = self.memory.list(
            self.table,
            limit=len(bases),
            filters={"id": {"$in": list(bases.values())}},
            **self.scope,
        )
        created = {r.id: r.created_at for r in old}
        placeholder = None
        if self._dim is not None:
            placeholder = np.zeros(self._dim, dtype=np.float32)
            placeholder[0] = 1.0
        items: list[dict[str, Any]] = []
        at = 0
        for k, op in puts.items():
            own = self._texts(op)
            vecs = None if vectors is None else vectors[at : at + len(own)]
            at += len(own)
            if op.value is None:
                continue
            base = bases[k]
            value = dict(op.value)
            lg: dict[str, Any] = {
                "item": base,
                "ns": list(op.namespace),
                "path": [".".join(op.namespace[: i + 1]) for i in range(len(op.namespace))],
                "key": op.key,
                "value": value,
                "n": max(1, len(own)),
                "vec": bool(own),
                "u": now,
            }
            if op.ttl is not None:
                lg["ttl"] = float(op.ttl)
                lg["exp"] = now + float(op.ttl) * 60
            parts = own or [json.dumps(value, sort_keys=True, ensure_ascii=False)]
            for i, text in enumerate(parts):
                item: dict[str, Any] = {
                    "text": text,
                    "id": base if i == 0 else f"{base}-{i}",
                    "table": self.table,
                    "metadata": {"lg": {**lg, "part": i}},
                    "created_at": created.get(base, now),
                    **self.scope,
                }
                if vecs is not None:
                    item["embedding"] = vecs[i]
                elif not own and placeholder is not None:
                    item["embedding"] = placeholder  # never searched: "vec" is False
                items.append(item)
        self.memory.replace(
            items,
            self.table,
            filters={"metadata.lg.item": {"$in": list(bases.values())}},
            **self.scope,
        )

    # -- search -------------------------------------------------------------------------------

    def _where(self, op: SearchOp, now: float, **extra: Any) -> dict[str, Any]:
        conds: list[dict[str, Any]] = [self._live(now)]
        conds.extend({f"metadata.lg.{k}": v} for k, v in extra.items())
        if op.namespace_prefix:
            conds.append({"metadata.lg.path": ".".join(op.namespace_prefix)})
        if op.filter:
            conds.extend(_pushdown(op.filter, "metadata.lg.value"))
        return {"$and": conds}

    def _scan(self, where: dict[str, Any], flt: Mapping[str, Any] | None) -> Iterator[MemoryRecord]:
        """Records matching ``where`` and the filter, oldest first, page by page."""
        offset = 0
        while True:
            page = self.memory.list(
                self.table, limit=_PAGE, offset=offset, order="asc", filters=where, **self.scope
            )
            for rec in page:
                if not flt or _matches(rec.metadata["lg"]["value"], dict(flt)):
                    yield rec
            if len(page) < _PAGE:
                return
            offset += _PAGE

    def _search(
        self, op: SearchOp, qvecs: dict[str, list[float]], now: float
    ) -> list[tuple[MemoryRecord, float | None]]:
        if op.limit <= 0:
            return []
        semantic = bool(op.query) and self.index_config is not None
        if not semantic:
            out: list[tuple[MemoryRecord, float | None]] = []
            for n, rec in enumerate(self._scan(self._where(op, now, part=0), op.filter)):
                if n >= op.offset + op.limit:
                    break
                if n >= op.offset:
                    out.append((rec, None))
            return out
        assert op.query is not None
        where = self._where(op, now, vec=True)
        need = op.offset + op.limit
        vector = qvecs.get(op.query)
        k = max(2 * need, 16)
        while True:
            hits = self.memory.search(
                op.query,
                k,
                mode="vector",
                table=self.table,
                filters=where,
                query_embedding=vector,
                weights={"relevance": 1.0},
                explain=True,
                track_access=False,
                **self.scope,
            )
            best: dict[str, tuple[MemoryRecord, float]] = {}
            for hit in hits:
                lg = hit.record.metadata["lg"]
                if op.filter and not _matches(lg["value"], op.filter):
                    continue
                info = hit.explain or {}
                cosine = info.get("cosine")
                score = float(cosine if cosine is not None else hit.score)
                # An item scores its best field (the engine ties every cosine <= 0 at 0).
                if lg["item"] not in best or score > best[lg["item"]][1]:
                    best[lg["item"]] = (hit.record, score)
            exhausted = len(hits) < k
            # Cosines at or below 0 all score 0 in the engine: fetch them all to order them.
            if exhausted or (len(best) >= need and hits[-1].score > 0):
                break
            k *= 2
        ranked = sorted(best.values(), key=lambda p: p[1], reverse=True)[op.offset : need]
        primary = [self._primary(rec) for rec, _ in ranked]
        kept: list[tuple[MemoryRecord, float | None]] = [
            (p, s) for p, (_, s) in zip(primary, ranked, strict=True) if p is not None
        ]
        if len(kept) < op.limit:
            # As InMemoryStore: items with nothing indexed fill the rest, unscored.
            scoreless = self._scan(self._where(op, now, vec=False), op.filter)
            for rec in scoreless:
                if len(kept) >= op.limit:
                    break
                kept.append((rec, None))
        return kept

    def _primary(self, rec: MemoryRecord) -> MemoryRecord | None:
        if rec.metadata["lg"]["part"] == 0:
            return rec
        try:
            return self.memory.get(rec.metadata["lg"]["item"])
        except UnknownIdError:  # pragma: no cover - deleted meanwhile
            return None

    def _list_namespaces(self, op: ListNamespacesOp, now: float) -> list[tuple[str, ...]]:
        conds: list[dict[str, Any]] = [self._live(now), {"metadata.lg.part": 0}]
        for cond in op.match_conditions or ():
            if cond.match_type == "prefix" and cond.path and "*" not in cond.path:
                conds.append({"metadata.lg.path": ".".join(cond.path)})
        seen: set[tuple[str, ...]] = set()
        for rec in self._scan({"$and": conds}, None):
            ns = tuple(rec.metadata["lg"]["ns"])
            if all(_namespace_matches(c, ns) for c in op.match_conditions or ()):
                seen.add(ns if op.max_depth is None else ns[: op.max_depth])
        return sorted(seen)[op.offset : op.offset + op.limit]
