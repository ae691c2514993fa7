"""FunctionEmbedder, which the adapters make of a framework's ``embed_documents`` and
``embed_query``, is ``asymmetric`` when the two differ (Cohere's ``input_type``, e5's
and nomic's prefixes): a store's cache then never stores a search's question vector
as a memory's vector."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memlane import Memory
from memlane.integrations._common import FunctionEmbedder

QUERY, PASSAGE = [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]


class Embeddings:
    """A framework's embeddings object, a question embedded unlike a document."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [PASSAGE for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return QUERY


def test_two_functions_make_it_asymmetric(tmp_path: Path) -> None:
    model = Embeddings()
    embedder = FunctionEmbedder(model.embed_documents, model.embed_query, "fn:asym", 4)
    assert embedder.asymmetric is True
    with Memory(tmp_path / "store", embedder=embedder) as mem:
        mem.search("dark mode", 1)  # the question first
        record = mem.add("dark mode")  # then the same words stored
        stored = mem.get(record.id, include_embedding=True).embedding
        assert stored is not None
        np.testing.assert_allclose(np.asarray(stored, dtype=np.float64), np.array(PASSAGE))


def test_one_function_for_both_is_symmetric() -> None:
    def both(texts: list[str]) -> list[list[float]]:
        return [PASSAGE for _ in texts]

    model = Embeddings()
    assert FunctionEmbedder(both, both, "fn:one", 4).asymmetric is False  # type: ignore[arg-type]
    # A bound method is a new object at each read: the same method is still one function.
    same = FunctionEmbedder(model.embed_documents, model.embed_documents, "fn:one", 4)  # type: ignore[arg-type]
    assert same.asymmetric is False
