"""What the framework adapters share: scopes, and foreign embedding models as memlane embedders."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from memlane import Memory
from memlane.coerce import FloatArray
from memlane.embeddings.identity import Identified
from memlane.embeddings.lazy import LazyEmbedder, default_embedder
from memlane.errors import InvalidArgumentError, shown
from memlane.records import SCOPE_FIELDS

__all__ = [
    "SCOPES",
    "FunctionEmbedder",
    "check_scope",
    "in_scope",
    "own_memory",
    "shared_default_embedder",
    "unit_rows",
]

#: memlane's scope fields (see ``Memory.add``).
SCOPES = SCOPE_FIELDS


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
