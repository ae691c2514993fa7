"""LangChain over memlane: a ``VectorStore``, a hybrid ``BaseRetriever`` and an ``Embeddings``.

``pip install "memlane[langchain]"``, then:

```python
from langchain_core.embeddings import DeterministicFakeEmbedding
from memlane.integrations.langchain import MemlaneVectorStore

store = MemlaneVectorStore(embedding=DeterministicFakeEmbedding(size=64))
store.add_texts(["dark mode", "light mode"], metadatas=[{"n": 1}, {"n": 2}])
store.similarity_search("dark", k=1, filter={"n": {"$gte": 1}})
```

- [`MemlaneVectorStore`][memlane.integrations.langchain.MemlaneVectorStore] stores each
  ``Document`` as one memlane record (its ``page_content`` the text, its ``metadata`` the
  record's metadata, its ``id`` the record's id). ``filter`` takes memlane's filter dict, on
  metadata keys. Adding an id that exists replaces that document (LangChain's upsert).
  A store's ids are its own: when a record of another scope or table holds an id, the
  document's record takes a fresh id and keeps its own in the metadata key
  ``"memlane:id"`` (reserved; never in a ``Document``'s metadata), which counts only on
  the fresh id the adapter made for it: a record any other writer gave the key is the
  document of its own id.
- [`MemlaneRetriever`][memlane.integrations.langchain.MemlaneRetriever] serves memlane's
  hybrid search (BM25 and vectors fused in one engine call), with its scoring.
- [`MemlaneEmbeddings`][memlane.integrations.langchain.MemlaneEmbeddings] exposes a memlane
  embedder (the offline [`OnnxEmbedder`][memlane.OnnxEmbedder] by default) as LangChain
  ``Embeddings``.

Every class takes ``scope`` (memlane's scope fields, e.g. ``{"agent_id": "a",
"user_id": "u"}``): it writes with that scope and never reads outside it. A search may
name a scope field (``user_id=...``) to narrow itself; one the store is bound to only with
its bound value (another is an ``InvalidArgumentError``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance
from pydantic import ConfigDict, Field

from memlane import Embedder, Memory, MemoryRecord, coerce
from memlane.errors import InvalidArgumentError, shown
from memlane.integrations._checks import (
    bound_options,
    filter_depth,
    id_list,
    metadata_list,
    text_list,
)
from memlane.integrations._common import (
    ID_KEY,
    FunctionEmbedder,
    check_scope,
    document_id,
    document_vectors,
    exact_id_filter,
    id_filter,
    own_memory,
    put_documents,
    read_all,
    shared_default_embedder,
)

__all__ = [
    "MemlaneEmbeddings",
    "MemlaneRetriever",
    "MemlaneVectorStore",
    "langchain_embedder",
    "metadata_filter",
]

Mode = Literal["hybrid", "vector", "text"]
#: ``Memory.search`` keywords the adapters set from their own arguments.
_SET_HERE = ("mode", "filters", "query_embedding", "include_embedding")


class MemlaneEmbeddings(Embeddings):
    """A memlane embedder as LangChain ``Embeddings``.

    ``embedder`` is any [`Embedder`][memlane.Embedder]; by default the offline
    [`OnnxEmbedder`][memlane.OnnxEmbedder] (all-MiniLM-L6-v2, 384-d unit vectors), loaded
    at its first use.
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        if embedder is not None and not isinstance(embedder, Embedder):
            raise InvalidArgumentError(
                f"embedder must follow memlane's Embedder protocol, got {type(embedder).__name__}"
            )
        self.embedder: Embedder = shared_default_embedder() if embedder is None else embedder

    @property
    def dimension(self) -> int:
        return int(self.embedder.dimension)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text of ``texts`` (a list of str: a str is refused, not embedded
        one character at a time)."""
        checked = text_list(texts, "texts")
        if not checked:
            return []
        rows: list[list[float]] = np.asarray(
            self.embedder.embed_batch(checked), dtype=np.float32
        ).tolist()
        return rows

    def embed_query(self, text: str) -> list[float]:
        row: list[float] = np.asarray(self.embedder.embed(text), dtype=np.float32).tolist()
        return row


def langchain_embedder(embedding: Embeddings, dimension: int | None = None) -> Embedder:
    """A memlane embedder over LangChain ``Embeddings`` (dimension measured if not given)."""
    if isinstance(embedding, MemlaneEmbeddings):
        return embedding.embedder
    model = getattr(embedding, "model", None) or getattr(embedding, "model_name", None)
    name = f"langchain:{type(embedding).__name__}" + (f":{model}" if model else "")
    return FunctionEmbedder(embedding.embed_documents, embedding.embed_query, name, dimension)


def metadata_filter(flt: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A LangChain filter (on document metadata) as memlane's filter dict.

    Every field name means a metadata key, also those memlane reserves for record
    fields (``type``, ``id``, ...); operators (``$and``, ``$in``, ...) pass through.
    """
    return None if flt is None else _metadata_filter(flt, 0)


def _metadata_filter(flt: object, depth: int) -> dict[str, Any]:
    filter_depth(depth)
    if callable(flt) or not isinstance(flt, Mapping):
        raise InvalidArgumentError(
            "filter must be a dict in memlane's filter grammar "
            '(e.g. {"source": {"$in": ["a", "b"]}}), not a callable'
        )
    out: dict[str, Any] = {}
    for key, value in flt.items():
        if not isinstance(key, str):
            raise InvalidArgumentError(f"filter keys must be str, got {shown(key)}")
        if key in ("$and", "$or"):
            if not isinstance(value, list | tuple):
                raise InvalidArgumentError(f"{key} takes a list of filters")
            out[key] = [_metadata_filter(v, depth + 1) for v in value]
        elif key == "$not":
            out[key] = _metadata_filter(value, depth + 1)
        elif key.startswith("$"):
            out[key] = value  # memlane names the unknown operator
        else:
            out[key if key.startswith("metadata.") else f"metadata.{key}"] = value
    return out


def _check_vector(embedding: object) -> None:
    """Refuses a search's ``embedding`` that is no vector (memlane checks a vector's
    values): without this, None would search by the embedding of an empty query."""
    if embedding is None or isinstance(embedding, str | bytes | Mapping):
        raise InvalidArgumentError(
            f"embedding must be a vector (a list of floats), got {shown(embedding)}"
        )


def to_document(record: MemoryRecord) -> Document:
    metadata = {k: v for k, v in record.metadata.items() if k != ID_KEY}
    return Document(page_content=record.text, metadata=metadata, id=document_id(record))


class MemlaneVectorStore(VectorStore):
    """A LangChain ``VectorStore`` over a [`Memory`][memlane.Memory].

    Args:
        embedding: LangChain ``Embeddings`` for documents and queries (a new
            store measures its dimension with one ``embed_query`` call). Without
            it, the store embeds with its own embedder (memlane's offline ONNX
            model for a new store).
        memory: the store to use; by default a new one at ``path`` (in memory when ``path``
            is None), closed by
            [`close`][memlane.integrations.langchain.MemlaneVectorStore.close]. With
            ``embedding``, its embedder's dimension must match.
        path: where a new store lives (a directory or ``postgresql://`` URL).
        scope: memlane scope fields every document gets and every read is bound to.
        table: the memlane table documents live in.
        search_mode: how ``similarity_search`` ranks: ``"vector"`` (cosine, the
            default, as other vector stores), ``"hybrid"`` (BM25 and vectors fused)
            or ``"text"`` (BM25). Scores are relevance in [0, 1], higher is better.
        memory_kwargs: passed to [`Memory`][memlane.Memory] when one is made.
    """

    def __init__(
        self,
        embedding: Embeddings | None = None,
        *,
        memory: Memory | None = None,
        path: str | Path | None = None,
        scope: Mapping[str, str] | None = None,
        table: str = "memories",
        search_mode: Mode = "vector",
        **memory_kwargs: Any,
    ) -> None:
        if search_mode not in ("hybrid", "vector", "text"):
            raise InvalidArgumentError(
                f"search_mode must be 'hybrid', 'vector' or 'text', got {shown(search_mode)}"
            )
        self.scope: dict[str, Any] = check_scope(scope)
        self.table = table
        self.search_mode: Mode = search_mode
        self._embedding = embedding

        def make() -> Memory:
            if embedding is None:
                return Memory(path, **memory_kwargs)
            return Memory(path, embedder=langchain_embedder(embedding), **memory_kwargs)

        self.memory, self._owned = own_memory(memory, make)
        if embedding is None and self.memory.embedder is None:
            self.search_mode = "text"

    # -- housekeeping -------------------------------------------------------------------------

    @property
    def embeddings(self) -> Embeddings | None:
        if self._embedding is not None:
            return self._embedding
        inner = self.memory.embedder
        return None if inner is None else MemlaneEmbeddings(inner)

    def close(self) -> None:
        """Closes the store if this object made it."""
        if self._owned:
            self.memory.close()

    def __enter__(self) -> MemlaneVectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        # memlane's scores are already relevance in [0, 1].
        return lambda score: score

    # -- writes -------------------------------------------------------------------------------

    def _check_batch(
        self, texts: object, metadatas: object, ids: object
    ) -> tuple[list[str], list[Mapping[str, Any]] | None, list[str]]:
        """The texts, metadatas and ids (a new one where none is given) of an add, after
        checking each as memlane's add does: before anything is embedded or written."""
        checked = text_list(texts, "texts")
        metas = metadata_list(metadatas, len(checked), "metadatas")
        given = [None] * len(checked) if ids is None else id_list(ids, "ids", none_ok=True)
        if len(given) != len(checked):
            raise InvalidArgumentError(
                f"{len(given)} ids for {len(checked)} texts; give one per text"
            )
        return checked, metas, [str(uuid.uuid4()) if i is None else i for i in given]

    def _write(
        self,
        texts: list[str],
        metadatas: list[Mapping[str, Any]] | None,
        out: list[str],
        vectors: Sequence[Sequence[float]] | None,
    ) -> list[str]:
        items = []
        for j, text in enumerate(texts):
            item: dict[str, Any] = {
                "text": text,
                "metadata": dict(metadatas[j]) if metadatas else {},
                "id": out[j],
                "table": self.table,
                **self.scope,
            }
            if vectors is not None:
                item["embedding"] = vectors[j]
            items.append(item)
        put_documents(self.memory, items, self.table, self.scope)
        return out

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Adds texts (an id that exists is replaced; a None id gets a new one); returns ids.

        ``texts``, ``metadatas`` and ``ids`` are lists (one of each per text); what memlane
        would refuse is refused before anything is embedded or written."""
        checked, metas, out = self._check_batch(texts, metadatas, ids)
        if not checked:
            return []
        vectors = None
        if self._embedding is not None:
            answer = self._embedding.embed_documents(checked)
            vectors = document_vectors(self._embedding, answer, checked)
        return self._write(checked, metas, out, vectors)

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """[`add_texts`][memlane.integrations.langchain.MemlaneVectorStore.add_texts] with
        the embeddings' async API; the write runs in a thread."""
        checked, metas, out = self._check_batch(texts, metadatas, ids)
        if not checked:
            return []
        vectors = None
        if self._embedding is not None:
            answer = await self._embedding.aembed_documents(checked)
            vectors = document_vectors(self._embedding, answer, checked)
        return await asyncio.to_thread(self._write, checked, metas, out, vectors)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Deletes these documents (``ids`` a list of str; missing ids are ignored); with no
        ids, every one in scope."""
        if ids is None:
            self.memory.delete_all(self.table, **self.scope)
            return True
        ids = id_list(ids, "ids")
        if ids:
            where = exact_id_filter(self.memory, ids, self.table, self.scope)
            self.memory.delete_all(self.table, filters=where, **self.scope)
        return True

    # -- reads --------------------------------------------------------------------------------

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents of these ids (a list of str) that exist in scope, in the order
        asked."""
        wanted = list(dict.fromkeys(id_list(ids, "ids")))
        if not wanted:
            return []
        # Every record that may hold one: a record given a kept id by another writer
        # answers only to its own (``document_id``).
        records = read_all(self.memory, id_filter(wanted), self.table, self.scope)
        by_id = {document_id(r): r for r in records}
        return [to_document(by_id[i]) for i in wanted if i in by_id]

    def _query_vector(self, query: str) -> list[float]:
        if self._embedding is not None:
            return self._embedding.embed_query(query)
        embedder = self.memory.embedder
        if embedder is None:
            raise InvalidArgumentError("this store has no embedder: it searches text only")
        row: list[float] = np.asarray(embedder.embed(query), dtype=np.float32).tolist()
        return row

    def _search(
        self,
        query: str,
        vector: Sequence[float] | None,
        k: int,
        mode: Mode,
        filter: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
        include_embedding: bool = False,
    ) -> list[tuple[MemoryRecord, float]]:
        # The caller's keywords come as one dict: any name, even one of this method's
        # parameters, is checked by bound_options and Memory.search.
        options: dict[str, Any] = {"weights": {"relevance": 1.0}, "track_access": False}
        options.update(kwargs)
        options = bound_options(options, {**self.scope, "table": self.table}, _SET_HERE)
        if mode != "text" and vector is None and self._embedding is not None:
            vector = self._embedding.embed_query(query)
        hits = self.memory.search(
            query,
            k,
            mode=mode,
            filters=metadata_filter(filter),
            query_embedding=None if mode == "text" else vector,
            include_embedding=include_embedding,
            **options,
        )
        return [(h.record, h.score) for h in hits]

    def similarity_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """The ``k`` best documents with their scores (relevance in [0, 1], higher is better).

        Extra keyword arguments go to [`Memory.search`][memlane.Memory.search] (``threshold``,
        ``weights``, ``alpha``, ...).
        """
        hits = self._search(query, None, k, self.search_mode, filter, kwargs)
        return [(to_document(r), s) for r, s in hits]

    async def asimilarity_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """[`similarity_search_with_score`][memlane.integrations.langchain.MemlaneVectorStore.similarity_search_with_score]
        with the embeddings' async API."""
        vector = None
        if self._embedding is not None and self.search_mode != "text":
            vector = await self._embedding.aembed_query(query)
        hits = await asyncio.to_thread(
            self._search, query, vector, k, self.search_mode, filter, kwargs
        )
        return [(to_document(r), s) for r, s in hits]

    async def asimilarity_search(
        self,
        query: str,
        k: int = 4,
        filter: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        pairs = await self.asimilarity_search_with_score(query, k, filter, **kwargs)
        return [d for d, _ in pairs]

    def similarity_search(
        self,
        query: str,
        k: int = 4,
        filter: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def similarity_search_by_vector_with_score(
        self,
        embedding: list[float],
        k: int = 4,
        filter: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        _check_vector(embedding)
        hits = self._search("", embedding, k, "vector", filter, kwargs)
        return [(to_document(r), s) for r, s in hits]

    def similarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        pairs = self.similarity_search_by_vector_with_score(embedding, k, filter, **kwargs)
        return [d for d, _ in pairs]

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """``k`` documents among the ``fetch_k`` nearest, chosen for relevance and diversity
        (``lambda_mult`` in [0, 1]: 1 for relevance alone, 0 for diversity alone)."""
        _check_vector(embedding)
        k = coerce.count(k, "k", 1)
        fetch_k = coerce.count(fetch_k, "fetch_k", 1)
        lambda_mult = coerce.number(lambda_mult, "lambda_mult", 0.0, 1.0)
        hits = self._search(
            "", embedding, max(fetch_k, k), "vector", filter, kwargs, include_embedding=True
        )
        if not hits:
            return []
        vectors = [np.asarray(r.embedding, dtype=np.float32).tolist() for r, _ in hits]
        chosen = maximal_marginal_relevance(
            np.asarray(embedding, dtype=np.float32), vectors, lambda_mult=lambda_mult, k=k
        )
        return [to_document(hits[i][0]) for i in chosen]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        return self.max_marginal_relevance_search_by_vector(
            self._query_vector(query), k, fetch_k, lambda_mult, filter, **kwargs
        )

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> MemlaneVectorStore:
        """A new store (keyword arguments as the constructor's) holding these texts."""
        store = cls(embedding=embedding, **kwargs)
        try:
            store.add_texts(texts, metadatas, ids=ids)
        except BaseException:
            store.close()
            raise
        return store

    def as_hybrid_retriever(self, k: int = 4, **kwargs: Any) -> MemlaneRetriever:
        """A [`MemlaneRetriever`][memlane.integrations.langchain.MemlaneRetriever] over this
        store's memory, scope and table."""
        return MemlaneRetriever(
            memory=self.memory,
            k=k,
            scope=self.scope,
            table=self.table,
            embedding=self._embedding,
            **kwargs,
        )


class MemlaneRetriever(BaseRetriever):
    """Documents from memlane's hybrid search: BM25 and vectors fused in one engine call.

    Scores follow memlane's formula (relevance times a bounded boost from
    importance and recency; docs/search.md, "How scores are computed"); with
    ``score_key`` set, each document's metadata carries its score under that key.
    ``search_kwargs`` go to [`Memory.search`][memlane.Memory.search] (``alpha``, ``fusion``,
    ``threshold``, ``weights``, ...). ``invoke(query, k=...)`` overrides ``k``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    k: int = 4
    mode: Mode = "hybrid"
    scope: dict[str, Any] = Field(default_factory=dict)
    table: str | None = "memories"
    filter: dict[str, Any] | None = None
    score_key: str | None = None
    embedding: Embeddings | None = None
    search_kwargs: dict[str, Any] = Field(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        self.scope = check_scope(self.scope)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k = kwargs.pop("k", self.k)
        flt = kwargs.pop("filter", self.filter)
        bound = self.scope if self.table is None else {**self.scope, "table": self.table}
        options = bound_options({**self.search_kwargs, **kwargs}, bound, _SET_HERE[:3])
        vector = None
        if self.embedding is not None and self.mode != "text":
            vector = self.embedding.embed_query(query)
        hits = self.memory.search(
            query,
            k,
            mode=self.mode,
            filters=metadata_filter(flt),
            query_embedding=vector,
            **options,
        )
        docs = []
        for hit in hits:
            doc = to_document(hit.record)
            if self.score_key is not None:
                doc.metadata[self.score_key] = hit.score
            docs.append(doc)
        return docs
