"""LangGraph's search over memlane (``memlane.integrations.langgraph``): the items a
``SearchOp`` finds, by a scan of their first records or by memlane's vector search over
every indexed text, an item scoring its best text.

An item's first record holds its value; every record holds its namespace's prefix
digests (``pre``), so a namespace narrows the engine's search over all of them. A value
filter that few of the namespace's items pass is applied first, on the first records
(one filtered read), and the vector search then reads the texts of those items alone: a
selective search costs what its items cost, not the whole table, and a broad one reads
no value it does not return."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from langgraph.store.base import SearchOp

from memlane import Memory, MemoryRecord
from memlane.integrations._checks import MAX_K
from memlane.integrations._langgraph_filters import matches, pushdown, under

__all__ = ["PAGE", "SELECTIVE", "Searching"]

#: The page size of the adapter's scans.
PAGE = 256
#: At most this many items passing a search's value filter (as the engine reads it) are
#: searched as a list of items, and only when they are few beside the items searched
#: (``_selected``); else the vector search reads every text and checks the items it meets.
SELECTIVE = 4096


class Searching:
    """``MemlaneStore``'s search, over its memory, table and scope."""

    memory: Memory
    table: str
    scope: dict[str, Any]
    index_config: dict[str, Any] | None
    #: The scope fields the store's scope leaves unset, each None: every read asks for
    #: them unset, as a scope's item is its alone (a store bound to a user reads no
    #: item of that user's agent, whose ``get`` and ``put`` it could never reach).
    unset: dict[str, None]

    def bound(self, cond: dict[str, Any]) -> dict[str, Any]:
        """``cond`` and the store's scope exactly (with ``**self.scope``)."""
        return {"$and": [cond, self.unset]} if self.unset else cond

    def _where(self, op: SearchOp, **extra: Any) -> list[dict[str, Any]]:
        """The conditions on the first records of the items ``op`` may find."""
        conds: list[dict[str, Any]] = [{f"metadata.lg.{k}": v} for k, v in extra.items()]
        if op.namespace_prefix:
            conds.append(under(op.namespace_prefix))
        if op.filter:
            conds.extend(pushdown(op.filter, "metadata.lg.value"))
        return conds

    def _scan(self, where: dict[str, Any], flt: Mapping[str, Any] | None) -> Iterator[MemoryRecord]:
        """Records matching ``where`` and the filter, oldest first, page by page."""
        offset = 0
        while True:
            page = self.memory.list(
                self.table,
                limit=PAGE,
                offset=offset,
                order="asc",
                filters=self.bound(where),
                **self.scope,
            )
            for rec in page:
                if not flt or matches(rec.metadata["lg"]["value"], dict(flt)):
                    yield rec
            if len(page) < PAGE:
                return
            offset += PAGE

    def _selected(self, op: SearchOp, need: int) -> dict[str, MemoryRecord] | None:
        """The first records of the indexed items ``op``'s filter admits, by item, when the
        engine's reading of the filter leaves few: at most ``SELECTIVE``, and at most
        ``8 * need`` or a sixteenth of the namespace's items (their values are read here,
        where the search past them reads the values of the hits alone); else None."""
        where = {"$and": self._where(op, part=0, vec=True)}
        n = self.memory.count(self.table, filters=self.bound(where), **self.scope)
        if n > SELECTIVE:
            return None
        if n > 8 * need:
            conds: list[dict[str, Any]] = [{"metadata.lg.part": 0}, {"metadata.lg.vec": True}]
            if op.namespace_prefix:
                conds.append(under(op.namespace_prefix))
            if 16 * n > self.memory.count(
                self.table, filters=self.bound({"$and": conds}), **self.scope
            ):
                return None
        found = self.memory.list(
            self.table, limit=SELECTIVE + 1, filters=self.bound(where), **self.scope
        )
        if len(found) > SELECTIVE:  # grew meanwhile
            return None
        return {
            r.metadata["lg"]["item"]: r
            for r in found
            if matches(r.metadata["lg"]["value"], dict(op.filter or {}))
        }

    def _semantic_where(
        self, op: SearchOp, need: int
    ) -> tuple[dict[str, Any] | None, dict[str, MemoryRecord | None]]:
        """The engine's filter for the texts ``op`` may find (None: none can be) and the
        first records of the items already known (None: ``op`` does not admit it)."""
        conds: list[dict[str, Any]] = [{"metadata.lg.vec": True}]
        if op.filter:
            selected = self._selected(op, need)
            if selected is not None:
                if not selected:
                    return None, {}
                conds.append({"metadata.lg.item": {"$in": list(selected)}})
                return {"$and": conds}, dict(selected)
        if op.namespace_prefix:
            conds.append(under(op.namespace_prefix))
        # An item's later texts hold no value: they pass here, checked through its first.
        # When none of the filter is pushed down ($ne, a list, None), every text passes.
        if op.filter and (first := self._where(op)):
            conds.append({"$or": [{"metadata.lg.part": {"$gt": 0}}, {"$and": first}]})
        return {"$and": conds}, {}

    def _search(
        self, op: SearchOp, qvecs: dict[str, list[float]]
    ) -> list[tuple[MemoryRecord, float | None]]:
        if op.limit <= 0:
            return []
        semantic = bool(op.query) and self.index_config is not None
        if not semantic:
            out: list[tuple[MemoryRecord, float | None]] = []
            found = self._scan({"$and": self._where(op, part=0)}, op.filter)
            for n, rec in enumerate(found):
                if n >= op.offset + op.limit:
                    break
                if n >= op.offset:
                    out.append((rec, None))
            return out
        assert op.query is not None
        need = op.offset + op.limit
        where, firsts = self._semantic_where(op, need)
        best: dict[str, tuple[MemoryRecord, float]] = {}
        k = min(max(2 * need, 16), MAX_K)
        while where is not None:
            hits = self.memory.search(
                op.query,
                k,
                mode="vector",
                table=self.table,
                filters=self.bound(where),
                query_embedding=qvecs.get(op.query),
                weights={"relevance": 1.0},
                explain=True,
                track_access=False,
                **self.scope,
            )
            scores: dict[str, float] = {}
            for hit in hits:
                lg = hit.record.metadata["lg"]
                if lg["part"] == 0 and lg["item"] not in firsts:
                    firsts[lg["item"]] = self._admitted(hit.record, op.filter)
                info = hit.explain or {}
                cosine = info.get("cosine")
                score = float(cosine if cosine is not None else hit.score)
                # An item scores its best field's cosine (a hit's score is 0 for any <= 0).
                scores[lg["item"]] = max(score, scores.get(lg["item"], score))
            self._add_firsts(op, [i for i in scores if i not in firsts], firsts)
            best = {i: (f, s) for i, s in scores.items() if (f := firsts[i]) is not None}
            exhausted = len(hits) < k or k == MAX_K
            # The hits come by cosine, so an item not met yet scores no more than the last.
            if exhausted or len(best) >= need:
                break
            k = min(2 * k, MAX_K)
        ranked = sorted(best.values(), key=lambda p: p[1], reverse=True)[op.offset : need]
        kept: list[tuple[MemoryRecord, float | None]] = list(ranked)
        if len(kept) < op.limit:
            # As InMemoryStore: items with nothing indexed fill the rest, unscored.
            scoreless = self._scan({"$and": self._where(op, part=0, vec=False)}, op.filter)
            for rec in scoreless:
                if len(kept) >= op.limit:
                    break
                kept.append((rec, None))
        return kept

    @staticmethod
    def _admitted(rec: MemoryRecord, flt: dict[str, Any] | None) -> MemoryRecord | None:
        """An item's first record if the filter admits its value, else None."""
        return rec if not flt or matches(rec.metadata["lg"]["value"], flt) else None

    def _add_firsts(
        self, op: SearchOp, items: list[str], firsts: dict[str, MemoryRecord | None]
    ) -> None:
        """Adds to ``firsts`` the first records of ``items`` (None for those ``op`` does
        not admit, or deleted meanwhile), in one read."""
        if not items:
            return
        where = {"$and": [{"metadata.lg.item": {"$in": items}}, *self._where(op, part=0)]}
        found = self.memory.list(
            self.table, limit=len(items), filters=self.bound(where), **self.scope
        )
        firsts.update(dict.fromkeys(items))
        for rec in found:
            firsts[rec.metadata["lg"]["item"]] = self._admitted(rec, op.filter)
