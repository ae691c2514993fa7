"""LangGraph's long-term memory over memlane: a ``BaseStore``.

``pip install "memlane[langgraph]"``, then:

```python
from memlane.integrations.langgraph import MemlaneStore

store = MemlaneStore()                       # in memory; or MemlaneStore(memlane.Memory(path))
store.put(("users", "alice"), "prefs", {"theme": "dark"})
store.get(("users", "alice"), "prefs").value  # {'theme': 'dark'}
graph = builder.compile(store=store)         # a graph's long-term memory
```

It behaves as LangGraph's ``InMemoryStore`` on the same calls: hierarchical
namespaces, ``put/get/delete/search/list_namespaces``, ``batch``/``abatch`` (reads
see the store as it was before the batch's writes; the last write of a key wins),
value filters (``$eq $ne $gt $gte $lt $lte``, nested to 32 levels), and semantic
search through an ``index`` config (``{"dims", "embed", "fields"}``) whose field
texts are each embedded and searched by memlane's engine, an item scoring its best
field's cosine similarity. Where it differs: ``created_at`` survives an update (as in
LangGraph's PostgreSQL store); ``list_namespaces`` lists the namespaces that hold
items (``InMemoryStore`` keeps listing one whose last item was deleted); filters
compare as memlane's do: a bool is never a number (``InMemoryStore``'s ``True == 1``),
and range filters (``$gt`` ...) match numbers only (``InMemoryStore`` also converts
numeric strings); a value's dict keys are str at every depth (another key is refused:
JSON would make it a str); items outlive the process when the ``Memory`` is durable;
and TTLs are supported (``ttl={"default_ttl": minutes, "refresh_on_read": bool}``, or ``ttl=``
on ``put``) through memlane's own expiry: an item's records get ``expires_at``, a
read that refreshes the TTL moves it, and from then on no read of the store returns
them and its maintenance removes them, with no sweeper thread of the adapter's
([`MemlaneStore.sweep_ttl`][memlane.integrations.langgraph.MemlaneStore.sweep_ttl] removes
them at once).

Each item is one memlane record per indexed text (one record when nothing is
indexed) in ``table`` (``"langgraph"``), with ``scope`` (memlane's scope fields)
bound exactly: a store never reads another scope's items, a narrower one's neither (a
store bound to a user reads no item of a store bound to that user and an agent). The
first record holds the item's value, key and namespace, every one a fixed-size digest
of each namespace prefix (which prefix searches read), the others besides only their
text, vector and item, so an item's size is linear in its value and namespace. The
records' ids are derived from the item, so anyone can compute them: a record of another
scope (or table) held under one is never read as the item, and the item's records then
take a fresh id.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
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

from memlane import Memory, MemoryRecord, times
from memlane.errors import InvalidArgumentError, UnknownIdError, shown
from memlane.integrations._common import (
    FunctionEmbedder,
    check_scope,
    document_vectors,
    in_scope,
    own_memory,
)
from memlane.integrations._langgraph_filters import (
    namespace_matches,
    number,
    under,
)
from memlane.integrations._langgraph_records import item_records
from memlane.integrations._langgraph_search import PAGE, Searching
from memlane.scoping import exact_scope, scope_of

__all__ = ["MemlaneStore"]


def _now() -> float:
    """When an item is written (its ``updated_at``; tests move it). Expiry follows the
    memory's own clock, ``time.time``."""
    return time.time()


def _ts(seconds: float) -> datetime:
    return times.moment(seconds)


class MemlaneStore(Searching, BaseStore):
    """A LangGraph ``BaseStore`` over a [`Memory`][memlane.Memory].

    Args:
        memory: the store to use; by default a new one (in memory unless ``path``
            is given), closed by [`close`][memlane.integrations.langgraph.MemlaneStore.close].
        index: semantic search: ``{"dims": int, "embed": Embeddings | function |
            "provider:model", "fields": ["$"]}``. Without ``embed``, the memory's
            own embedder embeds (memlane's offline ONNX model for a new store).
            Without ``index``, search ignores ``query`` as ``InMemoryStore`` does.
        ttl: ``{"default_ttl": minutes, "refresh_on_read": bool}``: an item's TTL is
            its records' ``expires_at`` (see [`MemoryRecord`][memlane.MemoryRecord]).
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
        self.unset = exact_scope(self.memory, self.scope)[1]
        inner = self.memory.embedder
        self._dim = None if inner is None else int(inner.dimension)
        if dims is not None and self._dim is not None and int(dims) != self._dim:
            raise InvalidArgumentError(
                f"index dims={dims} but the memory's embedder gives {self._dim}-d vectors"
            )
        if self.index_config is not None and self._dim is None:
            raise InvalidArgumentError("semantic search needs a memory with an embedder")
        self._adopt_old_expiries()

    # -- housekeeping -------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the memory if this store made it."""
        if self._owned:
            self.memory.close()

    def __enter__(self) -> MemlaneStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sweep_ttl(self) -> int:
        """Deletes the expired items now; returns how many items went.

        Not needed for correctness: no read returns an expired item, and the memory's
        background maintenance removes them. This frees their space at once, and reads
        the expired records alone (``Memory.expire``, by the database's expiry index).
        """
        gone = self._adopt_old_expiries()
        swept = self.memory.expire(self.table, **self.scope)
        return gone + sum(
            _part(rec) == 0 and all(getattr(rec, f) is None for f in self.unset) for rec in swept
        )

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Nothing to start: the memory's maintenance removes expired items. Kept for
        LangGraph's store API."""

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Nothing to stop (see
        [`start_ttl_sweeper`][memlane.integrations.langgraph.MemlaneStore.start_ttl_sweeper]);
        always True."""
        return True

    def _delete_items(self, cond: dict[str, Any]) -> int:
        """Deletes the records ``cond`` admits, which hold whole items (the records of
        an item share their expiry); returns how many items went."""
        items = self.memory.delete_all(
            self.table, filters=self.bound({"$and": [cond, {"metadata.lg.part": 0}]}), **self.scope
        )
        self.memory.delete_all(self.table, filters=self.bound(cond), **self.scope)
        return items

    def _adopt_old_expiries(self) -> int:
        """Gives the items an earlier version of this adapter wrote with a TTL (their
        expiry in ``metadata.lg.exp``, read by the adapter alone) the record's
        ``expires_at`` instead, so the memory's reads and maintenance see it; deletes
        those already past it, and returns how many. With none left (the usual case)
        the count reads no record: the engine counts the records holding each key."""
        old = {"metadata.lg.exp": {"$exists": True}}
        if not self.memory.count(self.table, filters=self.bound(old), **self.scope):
            return 0
        gone = self._delete_items({"metadata.lg.exp": {"$lte": time.time()}})
        # Each update takes its record out of the filter: read from the start each time.
        while page := self.memory.list(
            self.table, limit=PAGE, filters=self.bound(old), **self.scope
        ):
            for rec in page:
                lg = dict(rec.metadata["lg"])
                exp = lg.pop("exp")
                # A non-number (an edited file) was never treated as an expiry.
                at = float(exp) if number(exp) and math.isfinite(exp) else None
                try:
                    if at is not None and at <= time.time():  # passed since the delete above
                        self.memory.delete(rec.id)
                        gone += lg.get("part") == 0
                    else:
                        meta = {**rec.metadata, "lg": lg}
                        self.memory.update(rec.id, metadata=meta, expires_at=at)
                except UnknownIdError:  # deleted meanwhile
                    continue
        return gone

    # -- records ------------------------------------------------------------------------------

    def _base_id(self, namespace: tuple[str, ...], key: str) -> str:
        """The item's identity (``lg.item``), and the id of its first record unless a
        record the store does not own held that id when the item was put."""
        raw = json.dumps([self.table, sorted(self.scope.items()), list(namespace), key])
        return "lg-" + hashlib.sha256(raw.encode()).hexdigest()[:40]

    def _owns(self, rec: MemoryRecord, items: set[str]) -> bool:
        """Whether ``rec`` is a record of this store's items ``items`` (its table, its
        scope as its reads bind it, the adapter's metadata)."""
        lg = rec.metadata.get("lg")
        return (
            in_scope(rec, scope_of(self.memory.default_scope, self.scope), self.table)
            and all(getattr(rec, f) is None for f in self.unset)
            and isinstance(lg, dict)
            and lg.get("item") in items
        )

    def _first(self, item: str) -> MemoryRecord | None:
        """The first record of ``item``: by its id, read from the database; else (an id
        anyone can compute may be held by another scope's record, and the item then has a
        fresh one) found by the item in the store's scope."""
        try:
            rec = self.memory.get(item)
            if self._owns(rec, {item}) and rec.metadata["lg"].get("part") == 0:
                return rec
        except UnknownIdError:  # never written, deleted, expired, or under a fresh id
            pass
        cond = {"$and": [{"metadata.lg.item": item}, {"metadata.lg.part": 0}]}
        found = self.memory.list(self.table, limit=1, filters=self.bound(cond), **self.scope)
        return found[0] if found else None

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

    def _refresh(self, records: Iterable[MemoryRecord]) -> None:
        """Restarts the TTL of the items of these first records: all the records of an
        item get the same new ``expires_at`` in one transaction (a crash never leaves an
        item's parts expiring apart), and no version (``Memory.renew``: a read changes
        nothing).

        The item's records are read again, in the store's scope and table: its TTL and
        count come from its first as it is now, an item whose records disagree with them
        is left as it is, and a record is renewed only while it is the version read (a put
        meanwhile keeps its own TTL). Nothing outside the scope and table is touched."""
        # Items read without a TTL have none to restart (a put since sets its own).
        # An item's records are its first's id and that id with its part number: another
        # record of the scope claiming the item (anyone may write one) is not the item's.
        firsts = {r.metadata["lg"]["item"]: r.id for r in records if r.metadata["lg"].get("ttl")}
        items = list(firsts)
        now = time.time()
        renew: dict[float, list[MemoryRecord]] = {}
        for at in range(0, len(items), PAGE):
            found: dict[str, list[MemoryRecord]] = {}
            for rec in self._scan({"metadata.lg.item": {"$in": items[at : at + PAGE]}}, None):
                item = rec.metadata["lg"]["item"]
                if _part_of(rec.id, firsts[item]):
                    found.setdefault(item, []).append(rec)
            for item, claimed in found.items():
                parts = _own(claimed, firsts[item])
                ttl = _whole(parts)
                if ttl is not None:
                    renew.setdefault(now + ttl * 60, []).extend(parts)
        for expires_at, parts in renew.items():
            self.memory.renew(parts, expires_at=expires_at)

    # -- batch --------------------------------------------------------------------------------

    def _plan(self, ops: Iterable[Op]) -> tuple[list[Op], dict[tuple[Any, ...], PutOp], list[str]]:
        ops = list(ops)
        puts: dict[tuple[Any, ...], PutOp] = {}
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                ttl = op.ttl
                if ttl is not None and not (number(ttl) and math.isfinite(ttl) and ttl > 0):
                    raise InvalidArgumentError(
                        f"ttl must be a number of minutes > 0, got {shown(ttl)}"
                    )
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
        vectors = None
        if self.embeddings is not None and texts:
            answer = self.embeddings.embed_documents(texts)
            vectors = document_vectors(self.embeddings, answer, texts)
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
                answer = await self.embeddings.aembed_documents(texts)
                vectors = document_vectors(self.embeddings, answer, texts)
        return await asyncio.to_thread(self._run, ops, puts, texts, vectors, qvecs)

    def _run(
        self,
        ops: list[Op],
        puts: dict[tuple[Any, ...], PutOp],
        texts: list[str],
        vectors: Sequence[Sequence[float]] | None,
        qvecs: dict[str, list[float]],
    ) -> list[Result]:
        results: list[Result] = []
        touched: list[MemoryRecord] = []
        for op in ops:
            if isinstance(op, GetOp):
                rec = self._get(op.namespace, op.key)
                results.append(None if rec is None else self._item(rec))
                if rec is not None and op.refresh_ttl:
                    touched.append(rec)
            elif isinstance(op, SearchOp):
                found = self._search(op, qvecs)
                results.append([self._item(r, s, search=True) for r, s in found])
                if op.refresh_ttl:
                    touched.extend(r for r, _ in found)
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                results.append(None)
        if touched:
            self._refresh(touched)
        if puts:
            self._apply(puts, texts, vectors, _now())
        return results

    def _get(self, namespace: tuple[str, ...], key: str) -> MemoryRecord | None:
        return self._first(self._base_id(namespace, key))

    def _apply(
        self,
        puts: dict[tuple[Any, ...], PutOp],
        texts: list[str],
        vectors: Sequence[Sequence[float]] | None,
        now: float,
    ) -> None:
        bases = {k: self._base_id(*k) for k in puts}
        first = {
            "$and": [{"metadata.lg.item": {"$in": list(bases.values())}}, {"metadata.lg.part": 0}]
        }
        old = self.memory.list(
            self.table, limit=len(bases), filters=self.bound(first), **self.scope
        )
        # Each item's records keep the ids they have (the replace passes them on).
        ids = {r.metadata["lg"]["item"]: r.id for r in old}
        created = {r.metadata["lg"]["item"]: r.created_at for r in old}
        placeholder = None
        if self._dim is not None:
            placeholder = np.zeros(self._dim, dtype=np.float32)
            placeholder[0] = 1.0
        items: dict[str, list[dict[str, Any]]] = {}
        at = 0
        for k, op in puts.items():
            own = self._texts(op)
            # A put with nothing to index takes the placeholder, not an empty slice.
            vecs = None if vectors is None or not own else vectors[at : at + len(own)]
            at += len(own)
            if op.value is None:
                continue
            base = bases[k]
            fields = {"table": self.table, "created_at": created.get(base, now), **self.scope}
            items[base] = item_records(base, op, own, vecs, placeholder, now, fields)
        mine = set(bases.values())
        fresh: set[str] = set()
        # Ids anyone can compute: another scope's record may hold one, which the replace
        # keeps. Those items take fresh ids (found by their item, `_first`). A holder gone
        # by the look (deleted, expired) is tried again, then every item takes a fresh id:
        # a refusal naming an id held elsewhere never reaches the caller.
        for attempt in range(3):
            try:
                self._replace(items, ids, list(bases.values()))
                return
            except InvalidArgumentError:
                if attempt == 2:
                    raise
            for base, parts in items.items():
                if base in fresh:
                    continue
                rids = _ids(ids.get(base, base), len(parts))
                if attempt == 1 or any(self._held(rid, mine) for rid in rids):
                    ids[base] = f"lg-{uuid.uuid4().hex}"
                    fresh.add(base)

    def _replace(
        self, items: dict[str, list[dict[str, Any]]], ids: dict[str, str], bases: list[str]
    ) -> None:
        """Stores ``items`` (each item's records, under ``ids[item]`` or the item) in place
        of every record of the items ``bases``, in one transaction."""
        records = [
            {**item, "id": rid}
            for base, parts in items.items()
            for item, rid in zip(parts, _ids(ids.get(base, base), len(parts)), strict=True)
        ]
        cond = {"metadata.lg.item": {"$in": bases}}
        self.memory.replace(records, self.table, filters=self.bound(cond), **self.scope)

    def _held(self, record_id: str, mine: set[str]) -> bool:
        """Whether a record the replace of items ``mine`` keeps holds ``record_id``."""
        try:
            return not self._owns(self.memory.get(record_id), mine)
        except UnknownIdError:
            return False

    # -- namespaces ---------------------------------------------------------------------------

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conds: list[dict[str, Any]] = [{"metadata.lg.part": 0}]
        for cond in op.match_conditions or ():
            if cond.match_type == "prefix" and cond.path and "*" not in cond.path:
                conds.append(under(cond.path))
        seen: set[tuple[str, ...]] = set()
        for rec in self._scan({"$and": conds}, None):
            ns = tuple(rec.metadata["lg"]["ns"])
            if all(namespace_matches(c, ns) for c in op.match_conditions or ()):
                seen.add(ns if op.max_depth is None else ns[: op.max_depth])
        return sorted(seen)[op.offset : op.offset + op.limit]


def _ids(first: str, n: int) -> list[str]:
    """The ids of an item's ``n`` records: the first one's, then it with the part number."""
    return [first] + [f"{first}-{i}" for i in range(1, n)]


def _own(claimed: list[MemoryRecord], first: str) -> list[MemoryRecord]:
    """Of the records ``claimed`` that claim the item whose first is ``first``, the item's:
    the first and, for its count ``n``, the ids ``_ids`` gives each at its part number
    (a record planted under such an id, past the count, is not one)."""
    head = [r for r in claimed if r.id == first]
    n = head[0].metadata["lg"].get("n") if head else None
    if not (isinstance(n, int) and 0 < n <= len(claimed)):
        return head
    want = dict(zip(_ids(first, n), range(n), strict=True))
    return [r for r in claimed if want.get(r.id, -1) == r.metadata["lg"].get("part")]


def _part_of(record_id: str, first: str) -> bool:
    """Whether ``record_id`` is the id of a record of the item whose first is ``first``."""
    number = record_id[len(first) + 1 :] if record_id.startswith(first + "-") else ""
    return record_id == first or (number.isdecimal() and number.isascii())


def _whole(parts: list[MemoryRecord]) -> float | None:
    """The TTL (minutes) of the item whose records are ``parts``, as its first holds it;
    None when it has none, or ``parts`` are not its count of records numbered 0, 1, ..."""
    first = [r.metadata["lg"] for r in parts if r.metadata["lg"].get("part") == 0]
    if len(first) != 1:
        return None
    ttl, n = first[0].get("ttl"), first[0].get("n")
    if not (number(ttl) and math.isfinite(ttl) and 0 < ttl < 1e9 and number(n)):
        return None
    numbers = {r.metadata["lg"].get("part") for r in parts}
    whole = n == len(parts) and numbers == set(range(len(parts)))
    return float(ttl) if whole else None


def _part(rec: MemoryRecord) -> object:
    """The part number of an item's record (None: no record of an item)."""
    lg = rec.metadata.get("lg")
    return lg.get("part") if isinstance(lg, dict) else None
