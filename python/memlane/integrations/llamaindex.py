"""LlamaIndex over memlane: a ``BasePydanticVectorStore``.

``pip install "memlane[llamaindex]"``, then:

```python
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import VectorStoreQuery, VectorStoreQueryMode
from memlane.integrations.llamaindex import MemlaneVectorStore

store = MemlaneVectorStore()                 # in memory, memlane's offline embedder
store.add([TextNode(text="Alice prefers dark mode", metadata={"user": "alice"})])
store.query(VectorStoreQuery(query_str="theme", mode=VectorStoreQueryMode.HYBRID))
```

Query modes, each one call into memlane's engine: ``DEFAULT`` (vector
similarity), ``TEXT_SEARCH`` and ``SPARSE`` (BM25), ``HYBRID`` (BM25 and vectors
fused; ``query.alpha`` weighs the vector side, as memlane's ``alpha``), and
``MMR`` (the nearest ``similarity_top_k * 4``, at most the engine's 16,777,216,
re-ranked for diversity). ``MetadataFilters`` become memlane filters evaluated in the
engine (``==``, ``!=``, ranges, ``in``, ``nin``, ``any``, ``all``, ``contains``,
``is_empty``; AND, OR, NOT), a filter's key always one metadata key (a ``.`` in it is
no path). Nodes without an embedding are embedded by the memory's own embedder;
a query without ``query_embedding`` is embedded by it too.

``scope`` (memlane's scope fields) binds the store: nodes are written with it
and no query, get or delete reaches outside it: a query's keyword arguments may name a
scope field it is bound to only with the bound value. Node ids are given as lists of str,
and are the store's own: when a record of another scope or table holds a node's id, the
node's record takes a fresh id, keeping the node's in the metadata key ``"memlane:id"``
(reserved: a node's metadata may not use it; it counts only on the fresh id the adapter
made for the node). Of several nodes with one id in an add, the last is stored.
A query's ``similarity_top_k`` of None is LlamaIndex's default for the field, 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.query.embedding_utils import get_top_k_mmr_embeddings
from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
from pydantic import Field, PrivateAttr

from memlane import Memory, MemoryRecord, coerce
from memlane.errors import InvalidArgumentError, shown
from memlane.integrations._checks import MAX_K, bound_options, filter_depth, id_list
from memlane.integrations._common import (
    ID_KEY,
    FunctionEmbedder,
    check_scope,
    document_id,
    escape_key,
    exact_id_filter,
    id_filter,
    own_memory,
    put_documents,
    reserved_id_key,
)

__all__ = ["MemlaneVectorStore", "to_memlane_filter"]

_MODES = {
    VectorStoreQueryMode.DEFAULT: "vector",
    VectorStoreQueryMode.TEXT_SEARCH: "text",
    VectorStoreQueryMode.SPARSE: "text",
    VectorStoreQueryMode.HYBRID: "hybrid",
    VectorStoreQueryMode.MMR: "vector",
}
_RANGE = {
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.NE: "$ne",
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
}
#: ``Memory.search`` keywords a query sets from the ``VectorStoreQuery``.
_SET_HERE = ("mode", "filters", "query_embedding", "include_embedding")


def _one(f: MetadataFilter) -> dict[str, Any]:
    key = f"metadata.{escape_key(f.key)}"
    op = FilterOperator(f.operator)
    if op in (FilterOperator.EQ, FilterOperator.CONTAINS):
        # A metadata list matches when any element does: "contains".
        return {key: f.value}
    if op in _RANGE:
        value = list(f.value) if isinstance(f.value, list | tuple) else f.value
        return {key: {_RANGE[op]: value}}
    values = f.value if isinstance(f.value, list | tuple) else [f.value]
    if op == FilterOperator.ANY:
        return {key: {"$in": list(values)}}
    if op == FilterOperator.ALL:
        return {"$and": [{key: v} for v in values]}
    if op == FilterOperator.IS_EMPTY:
        # As LlamaIndex's: absent, None or "" (an empty list no filter of memlane's names).
        return {"$or": [{key: {"$exists": False}}, {key: None}, {key: ""}]}
    raise InvalidArgumentError(
        f"filter operator {op.value!r} is not supported by memlane "
        "(supported: ==, !=, >, >=, <, <=, in, nin, any, all, contains, is_empty)"
    )


def to_memlane_filter(filters: MetadataFilters | None) -> dict[str, Any] | None:
    """LlamaIndex ``MetadataFilters`` as memlane's filter dict (on node metadata)."""
    return None if filters is None else _filter(filters, 0)


def _filter(filters: object, depth: int) -> dict[str, Any] | None:
    filter_depth(depth)
    if not isinstance(filters, MetadataFilters):
        raise InvalidArgumentError(f"filters must be MetadataFilters, got {shown(filters)}")
    if not filters.filters:
        return None
    parts: list[dict[str, Any]] = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            sub = _filter(f, depth + 1)
            if sub is not None:
                parts.append(sub)
        else:
            parts.append(_one(f))
    condition = FilterCondition(filters.condition or FilterCondition.AND)
    if condition == FilterCondition.NOT:
        # LlamaIndex's NOT: a node matches when none of the filters does.
        return {"$not": _join(parts, "$or") or {"$or": parts}}
    return _join(parts, "$or" if condition == FilterCondition.OR else "$and")


def _join(parts: list[dict[str, Any]], how: str) -> dict[str, Any] | None:
    """``parts`` joined by ``how`` (``$and``, ``$or``) in as few levels as the engine
    reads them (one part is itself; a part joined the same way is spliced in), so the
    adapter's own joins never take a level of the engine's 32. None: no part."""
    flat: list[dict[str, Any]] = []
    for part in parts:
        flat.extend(part[how] if list(part) == [how] else [part])
    if len(flat) > 1:
        return {how: flat}
    return flat[0] if flat else None


def _levels(flt: Mapping[str, Any]) -> int:
    """How deep the engine reads ``flt`` (its ``$and``, ``$or`` and ``$not`` levels)."""
    deepest = 0
    for key, value in flt.items():
        if key in ("$and", "$or"):
            deepest = max(deepest, 1 + max((_levels(v) for v in value), default=0))
        elif key == "$not":
            deepest = max(deepest, 1 + _levels(value))
    return deepest


def _checked(flt: dict[str, Any] | None) -> dict[str, Any] | None:
    """``flt``, refused as the engine would refuse it when nested past its limit."""
    if flt is not None:
        filter_depth(_levels(flt))
    return flt


def _top_k(value: object, field: str) -> int | None:
    """A query's count field: an int (below 1: no hits), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"query.{field} must be an int, got {shown(value)}")
    return value


def _node(rec: MemoryRecord) -> BaseNode:
    if "_node_content" in rec.metadata:
        node = metadata_dict_to_node(rec.metadata, text=rec.text)
        # The record's document id, not one its metadata names (any writer may set it).
        node.id_ = document_id(rec)
        return node
    metadata = {k: v for k, v in rec.metadata.items() if k != ID_KEY}
    return TextNode(text=rec.text, id_=document_id(rec), metadata=metadata)


class MemlaneVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store over a [`Memory`][memlane.Memory].

    Args:
        memory: the store to use; by default a new one (in memory unless ``path`` is given),
            closed by [`close`][memlane.integrations.llamaindex.MemlaneVectorStore.close].
        embed_model: a LlamaIndex embedding model for a new store's embedder
            (default: memlane's offline ONNX model). Node embeddings must have its
            dimension.
        scope: memlane scope fields every node gets and every read is bound to.
        table: the memlane table nodes live in.
        path: where a new store lives (a directory or ``postgresql://`` URL).
        search_kwargs: passed to [`Memory.search`][memlane.Memory.search] on every query
            (default: relevance alone, no access tracking, so similarities are
            the relevance of memlane's formula).
    """

    stores_text: bool = True
    flat_metadata: bool = False
    table: str = "llamaindex"
    scope: dict[str, Any] = Field(default_factory=dict)
    search_kwargs: dict[str, Any] = Field(default_factory=dict)

    _memory: Memory = PrivateAttr()
    _owned: bool = PrivateAttr(default=False)

    def __init__(
        self,
        memory: Memory | None = None,
        *,
        embed_model: BaseEmbedding | None = None,
        scope: Mapping[str, str] | None = None,
        table: str = "llamaindex",
        path: str | Path | None = None,
        search_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        options = {"weights": {"relevance": 1.0}, "track_access": False}
        options.update(search_kwargs or {})
        super().__init__(  # type: ignore[call-arg]
            scope=check_scope(scope), table=table, search_kwargs=options
        )

        def make() -> Memory:
            if embed_model is None:
                return Memory(path)
            name = f"llamaindex:{type(embed_model).__name__}:{embed_model.model_name}"
            embedder = FunctionEmbedder(
                embed_model.get_text_embedding_batch, embed_model.get_query_embedding, name
            )
            return Memory(path, embedder=embedder)

        self._memory, self._owned = own_memory(memory, make)

    @classmethod
    def class_name(cls) -> str:
        return "MemlaneVectorStore"

    @property
    def client(self) -> Memory:
        """The [`Memory`][memlane.Memory] underneath."""
        return self._memory

    def close(self) -> None:
        """Closes the memory if this store made it."""
        if self._owned:
            self._memory.close()

    def __enter__(self) -> MemlaneVectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -------------------------------------------------------------------------------

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Stores nodes (a node id that exists is replaced; of several nodes with one id,
        the last); returns their ids."""
        # A node is iterable too (a pydantic model yields its fields): refused as one.
        if isinstance(nodes, str | bytes | Mapping | BaseNode) or not isinstance(nodes, Iterable):
            raise InvalidArgumentError(f"nodes must be a list of nodes, got {shown(nodes)}")
        nodes = list(nodes)
        for j, node in enumerate(nodes):
            if not isinstance(node, BaseNode):
                raise InvalidArgumentError(
                    f"nodes[{j}] must be a LlamaIndex node (BaseNode), got {shown(node)}"
                )
        items = []
        for j, node in enumerate(nodes):
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            metadata = node_to_metadata_dict(
                node, remove_text=True, flat_metadata=self.flat_metadata
            )
            reserved_id_key(metadata, f"nodes[{j}].metadata")
            item: dict[str, Any] = {
                "text": text,
                "id": node.node_id,
                "table": self.table,
                "metadata": metadata,
                **self.scope,
            }
            if node.embedding is not None:
                item["embedding"] = node.embedding
            items.append(item)
        if not items:
            return []
        put_documents(self._memory, items, self.table, self.scope)
        return [str(i["id"]) for i in items]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Deletes every node of this source document."""
        coerce.text(ref_doc_id, "ref_doc_id")
        self._memory.delete_all(
            self.table, filters={"metadata.ref_doc_id": ref_doc_id}, **self.scope
        )

    def _where(
        self,
        node_ids: Sequence[str] | None,
        filters: MetadataFilters | None,
        *more: dict[str, Any],
        exact: bool = False,
    ) -> dict[str, Any] | None:
        """The engine's filter for the nodes ``node_ids`` (the records that may hold them,
        or with ``exact``, for a write, those that do) matching ``filters`` and ``more``,
        joined in one level."""
        conds: list[dict[str, Any]] = []
        if node_ids is not None:
            if exact:
                conds.append(exact_id_filter(self._memory, node_ids, self.table, self.scope))
            else:
                conds.append(id_filter(node_ids))
        flt = to_memlane_filter(filters)
        if flt is not None:
            conds.append(flt)
        return _checked(_join([*conds, *more], "$and"))

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Deletes the nodes with these ids (a list of str) and matching these filters."""
        if node_ids is not None:
            node_ids = id_list(node_ids, "node_ids")
            if not node_ids:
                return
        where = self._where(node_ids, filters, exact=True)
        self._memory.delete_all(self.table, filters=where, **self.scope)

    def clear(self) -> None:
        """Deletes every node in this store's scope and table."""
        self._memory.delete_all(self.table, **self.scope)

    # -- reads --------------------------------------------------------------------------------

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """The nodes with these ids (a list of str; in the order asked) and matching these
        filters."""
        if node_ids is not None:
            node_ids = id_list(node_ids, "node_ids")
            if not node_ids:
                return []
        where = self._where(node_ids, filters)
        total = self._memory.count(self.table, filters=where, **self.scope)
        if not total:
            return []
        records = self._memory.list(
            self.table, limit=total, order="asc", filters=where, **self.scope
        )
        if node_ids is not None:
            by_id = {document_id(r): r for r in records}
            records = [by_id[i] for i in dict.fromkeys(node_ids) if i in by_id]
        return [_node(r) for r in records]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """One search in memlane's engine; see the module's docstring for the modes."""
        if not isinstance(query, VectorStoreQuery):
            raise InvalidArgumentError(f"query must be a VectorStoreQuery, got {shown(query)}")
        supported = sorted(m.value for m in _MODES)
        try:
            mode = VectorStoreQueryMode(query.mode)
        except ValueError:
            raise InvalidArgumentError(
                f"query mode {shown(query.mode)} is not a VectorStoreQueryMode; use one of "
                f"{supported}"
            ) from None
        if mode not in _MODES:
            raise InvalidArgumentError(
                f"query mode {mode.value!r} is not supported; use one of {supported}"
            )
        engine_mode = _MODES[mode]
        # None: LlamaIndex's default for the field.
        given = _top_k(query.similarity_top_k, "similarity_top_k")
        k = 1 if given is None else given
        hybrid_k = _top_k(query.hybrid_top_k, "hybrid_top_k")
        sparse_k = _top_k(query.sparse_top_k, "sparse_top_k")
        if mode == VectorStoreQueryMode.HYBRID and hybrid_k:
            k = hybrid_k
        elif engine_mode == "text" and sparse_k:
            k = sparse_k
        if query.mmr_threshold is not None:
            coerce.number(query.mmr_threshold, "query.mmr_threshold", 0.0, 1.0)
        more: list[dict[str, Any]] = []
        # An empty node_ids (what LlamaIndex's retriever sends) restricts nothing.
        node_ids = None if query.node_ids is None else id_list(query.node_ids, "query.node_ids")
        node_ids = node_ids or None
        if query.doc_ids is not None:
            doc_ids = id_list(query.doc_ids, "query.doc_ids")
            if doc_ids:
                more.append({"metadata.ref_doc_id": {"$in": doc_ids}})
        where = self._where(node_ids, query.filters, *more)
        bound = {**self.scope, "table": self.table}
        options = bound_options({**self.search_kwargs, **kwargs}, bound, _SET_HERE)
        if k < 1:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        if mode == VectorStoreQueryMode.HYBRID and query.alpha is not None:
            options["alpha"] = query.alpha
        text = query.query_str or ""
        vector = None if engine_mode == "text" else query.query_embedding
        if engine_mode == "text" and not text:
            raise InvalidArgumentError(f"query mode {mode.value!r} needs query_str")
        if engine_mode != "text" and vector is None and not text:
            raise InvalidArgumentError("give query_embedding or query_str")
        mmr = mode == VectorStoreQueryMode.MMR
        hits = self._memory.search(
            text,
            # MMR re-ranks more than it returns, within what the engine takes.
            min(4 * k, MAX_K) if mmr else k,
            mode=engine_mode,  # type: ignore[arg-type]
            filters=where,
            query_embedding=vector,
            include_embedding=mmr,
            **options,
        )
        pairs = [(h.record, h.score) for h in hits]
        if node_ids is not None:  # a record another writer gave a kept id holds another
            pairs = [(r, x) for r, x in pairs if document_id(r) in set(node_ids)]
        if mmr and pairs:
            qvec = vector
            if qvec is None:
                embedder = self._memory.embedder
                assert embedder is not None  # a vector search above needed one
                qvec = np.asarray(embedder.embed(text), dtype=np.float32).tolist()
            scores, ids = get_top_k_mmr_embeddings(
                list(qvec),
                [np.asarray(r.embedding).tolist() for r, _ in pairs],
                similarity_top_k=k,
                embedding_ids=list(range(len(pairs))),
                mmr_threshold=query.mmr_threshold,
            )
            pairs = [(pairs[i][0], float(s)) for i, s in zip(ids, scores, strict=True)]
        return VectorStoreQueryResult(
            nodes=[_node(r) for r, _ in pairs],
            similarities=[s for _, s in pairs],
            ids=[document_id(r) for r, _ in pairs],
        )
