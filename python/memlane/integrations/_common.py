"""What the framework adapters share: scopes, documents' ids, metadata keys in filters, and
foreign embedding models as memlane embedders."""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from memlane import Memory, MemoryRecord
from memlane.coerce import FloatArray
from memlane.embeddings.identity import Identified
from memlane.embeddings.lazy import LazyEmbedder, default_embedder
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError, UnknownIdError, shown
from memlane.records import SCOPE_FIELDS
from memlane.scoping import scope_of

__all__ = [
    "ID_KEY",
    "SCOPES",
    "FunctionEmbedder",
    "check_scope",
    "document_id",
    "document_vectors",
    "escape_key",
    "exact_id_filter",
    "fresh_id",
    "id_filter",
    "in_scope",
    "own_memory",
    "put_documents",
    "read_all",
    "reserved_id_key",
    "shared_default_embedder",
    "unit_rows",
]

#: memlane's scope fields (see ``Memory.add``).
SCOPES = SCOPE_FIELDS
#: The metadata key that keeps a document's id (LangChain's, or LlamaIndex's node id) on a
#: record under another id. Record ids are global while a store's ids are its own: when a
#: record the store does not own (another scope's or table's) holds the id, the document's
#: record takes a fresh one. Reserved: a document's own metadata may not use it.
ID_KEY = "memlane:id"


@functools.cache
def shared_default_embedder() -> LazyEmbedder:
    """One default embedder for every adapter of the process that was given none, so
    the model loads once (at its first use), not once per adapter object."""
    return default_embedder()


def check_scope(scope: Mapping[str, str] | None) -> dict[str, Any]:
    """A copy of ``scope`` after checking its keys are scope fields and its values strings."""
    out: dict[str, Any] = dict(scope or {})
    for key, value in out.items():
        if key not in SCOPES:
            raise InvalidArgumentError(f"scope key {shown(key)} is not one of {SCOPES}")
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(
                f"scope[{key!r}] must be a non-empty str, got {shown(value)}"
            )
    return out


def in_scope(record: Any, scope: Mapping[str, str], table: str | None) -> bool:
    """Whether a record belongs to the scope (and table) an adapter is bound to."""
    if table is not None and record.table != table:
        return False
    return all(getattr(record, key) == value for key, value in scope.items())


def document_vectors(embeddings: object, answer: object, texts: Sequence[str]) -> list[Any]:
    """``answer``, the framework's embeddings of ``texts``, when it holds one vector a
    text (each checked where it is stored); else ``EmbedderUnavailableError``."""
    vectors: list[Any] | None = None
    if isinstance(answer, Iterable) and not isinstance(answer, str | bytes | Mapping):
        vectors = list(answer)
    if vectors is None or len(vectors) != len(texts):
        got = "no list" if vectors is None else f"{len(vectors)} vectors"
        raise EmbedderUnavailableError(
            f"{type(embeddings).__name__}.embed_documents returned {got} for {len(texts)} texts"
        )
    return vectors


def unit_rows(vectors: Any) -> FloatArray:
    """Rows as float32 unit vectors (memlane's embedder contract); a zero row stays zero."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    out: FloatArray = np.divide(arr, norms, out=np.zeros_like(arr), where=norms > 0)
    return out


class FunctionEmbedder(Identified):
    """A memlane ``Embedder`` over a framework's embedding functions.

    ``embed_documents`` turns a list of texts into a list of vectors and
    ``embed_query`` one text into a vector; the dimension is measured on one
    probe text when not given. Vectors are normalised to unit length.

    Two distinct functions make it ``asymmetric``: many models embed a question
    unlike a stored text (Cohere's ``input_type``, e5's and nomic's prefixes), and
    nothing here can tell, so memlane's caches never give a question the vector the
    same words were stored with, nor the other way round.
    """

    def __init__(
        self,
        embed_documents: Callable[[list[str]], Sequence[Sequence[float]]],
        embed_query: Callable[[str], Sequence[float]],
        name: str,
        dimension: int | None = None,
    ) -> None:
        self._docs = embed_documents
        self._query = embed_query
        # ``!=``, not ``is not``: a bound method is a new object at each attribute read.
        documents: object = embed_documents
        self.asymmetric = documents != embed_query
        super().__init__(
            name, len(embed_query("dimension probe")) if dimension is None else dimension
        )

    def embed(self, text: str) -> FloatArray:
        row: FloatArray = unit_rows(self._query(text))[0]
        return row

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        return unit_rows(self._docs(list(texts)))


def own_memory(memory: Memory | None, factory: Callable[[], Memory]) -> tuple[Memory, bool]:
    """The given store, or a new one from ``factory``; and whether the adapter owns it."""
    if memory is not None:
        if not isinstance(memory, Memory):
            raise InvalidArgumentError(
                f"memory must be a memlane.Memory, got {type(memory).__name__}"
            )
        return memory, False
    return factory(), True


def escape_key(key: str) -> str:
    """A metadata key as one step of a filter's dotted path, as memlane's grammar reads it:
    a literal ``.`` (and the ``\\`` escaping one) escaped."""
    return key.replace("\\", "\\\\").replace(".", "\\.")


#: How a fresh record id begins; the rest is a random part and a digest of it with the
#: document's id (``fresh_id``).
_FRESH = "mlid-"


def _digest(nonce: str, document: str) -> str:
    data = f"{nonce}\x00{document}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()[:32]


def fresh_id(document: str) -> str:
    """A new record id for the document ``document`` when its own is held: a random part
    and a digest of it with ``document``, so the kept id (``ID_KEY``) is honoured on this
    record alone (``document_id``)."""
    nonce = uuid.uuid4().hex
    return f"{_FRESH}{nonce}-{_digest(nonce, document)}"


def document_id(record: MemoryRecord) -> str:
    """The id of the document ``record`` holds: the id kept in ``ID_KEY`` when the record's
    own is the fresh id an adapter gave that document, else the record's id. A record
    that any other writer gave the key (``Memory.add``, an agent's ``remember``, an
    import: each may set any metadata, and most no record id) is never read as that
    document."""
    kept = record.metadata.get(ID_KEY)
    rid = record.id
    if isinstance(kept, str) and rid.startswith(_FRESH):
        nonce = rid[len(_FRESH) : len(_FRESH) + 32]
        if rid == f"{_FRESH}{nonce}-{_digest(nonce, kept)}":
            return kept
    return rid


def id_filter(ids: Sequence[str]) -> dict[str, Any]:
    """memlane's filter for the records that may hold the documents ``ids`` (a superset):
    under their own id, or under a fresh one with the id kept (``ID_KEY``). Which do is
    ``document_id``'s to tell (``exact_id_filter``)."""
    return {"$or": [{"id": {"$in": list(ids)}}, {f"metadata.{ID_KEY}": {"$in": list(ids)}}]}


def exact_id_filter(
    memory: Memory, ids: Sequence[str], table: str, scope: Mapping[str, Any]
) -> dict[str, Any]:
    """memlane's filter for the records of the documents ``ids`` in ``table`` and
    ``scope``, for a write: ``id_filter`` less the records it names that hold no document
    of ``ids`` (a record another writer gave the kept id, or a fresh record whose id a
    caller named), as they are read now."""
    mine = set(ids)
    odd = {"$and": [{f"metadata.{ID_KEY}": {"$exists": True}}, id_filter(ids)]}
    wrong = [r.id for r in read_all(memory, odd, table, scope) if document_id(r) not in mine]
    return {"$and": [id_filter(ids), {"id": {"$nin": wrong}}]} if wrong else id_filter(ids)


def read_all(
    memory: Memory, where: Mapping[str, Any], table: str, scope: Mapping[str, Any]
) -> list[MemoryRecord]:
    """Every record matching ``where`` in ``table`` and ``scope`` (a count, then one list
    with room for some added meanwhile), oldest first."""
    total = memory.count(table, filters=dict(where), **scope)
    if not total:
        return []
    return memory.list(table, limit=2 * total + 16, order="asc", filters=dict(where), **scope)


def reserved_id_key(metadata: Mapping[str, Any], label: str) -> None:
    """Refuses a document's metadata that uses ``ID_KEY``."""
    if ID_KEY in metadata:
        raise InvalidArgumentError(
            f"{label} has the key {ID_KEY!r}, which memlane reserves for the document's id"
        )


def put_documents(
    memory: Memory, items: Sequence[Mapping[str, Any]], table: str, scope: Mapping[str, Any]
) -> None:
    """Stores ``items`` (memlane items whose ``id`` is their document's) in place of every
    record of their ids in ``table`` and ``scope``, in one transaction; of several items
    with one id, the last (as when added one by one).

    An id held by a record that stays (another scope's or table's, or another document's
    under a fresh id) gives the item a fresh record id, with its own kept in ``ID_KEY``:
    the caller never learns that the id is held elsewhere, nor is kept from using it."""
    last = {item["id"]: j for j, item in enumerate(items)}
    kept = [items[j] for j in sorted(last.values())]
    ids = list(last)
    where = exact_id_filter(memory, ids, table, scope)
    owner = scope_of(memory.default_scope, scope)
    taken: set[str] = set()
    # A holder may vanish between a refused replace and the look (another scope's delete
    # or expiry): the ids are tried again, then every item takes a fresh one, so a refusal
    # naming an id held elsewhere never reaches the caller.
    for last_try in (False, False, True):
        batch = [_fresh(item) if last_try or item["id"] in taken else item for item in kept]
        try:
            memory.replace(batch, table, filters=where, **scope)
            return
        except InvalidArgumentError:
            if last_try:
                raise
            taken |= {i for i in ids if i not in taken and _held(memory, i, set(ids), owner, table)}


def _fresh(item: Mapping[str, Any]) -> dict[str, Any]:
    """``item`` under a fresh record id, its own kept in ``ID_KEY``."""
    metadata = {**item["metadata"], ID_KEY: item["id"]}
    return {**item, "id": fresh_id(item["id"]), "metadata": metadata}


def _held(
    memory: Memory, record_id: str, mine: set[str], scope: Mapping[str, str], table: str
) -> bool:
    """Whether a record that a replace of the documents ``mine`` keeps holds
    ``record_id``."""
    try:
        rec = memory.get(record_id)
    except UnknownIdError:
        return False
    return not (in_scope(rec, scope, table) and document_id(rec) in mine)
