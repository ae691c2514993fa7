"""Whole documents: the record's full text and mean vector, search_documents, and the
default similarity cut-off of the knowledge searches."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, StoreFactory, WordHashEmbedder
from memlane import AsyncMemory, Memory, OnnxEmbedder
from memlane.errors import InvalidArgumentError
from memlane.knowledge import DOCUMENT_THRESHOLD, FRAGMENT_THRESHOLD
from memlane.knowledge.documents import document_vector

OCEAN = "Tides rise and fall twice a day as the moon pulls the sea. " * 30
FOREST = "Oak trees shed their leaves in autumn and grow them back in spring. " * 30


def write(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "ocean.txt").write_text(OCEAN)
    (root / "forest.txt").write_text(FOREST)


def test_document_record_holds_its_text_and_mean_vector(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    write(tmp_path / "kb")
    mem = make_store("docs", word_embedder)
    try:
        report = mem.ingest(tmp_path / "kb", shared=True, progress=False)
        doc_id = report.ingested["ocean.txt"]
        doc = mem.get(doc_id, include_embedding=True)
        assert doc.text == OCEAN  # the whole loaded text, not a title
        assert doc.metadata["title"] == "ocean.txt"
        fragments = mem.get_fragments(doc_id, include_embedding=True)
        assert len(fragments) > 1
        vectors = np.stack([f.embedding for f in fragments])
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        mean = unit.mean(axis=0)
        assert doc.embedding is not None
        np.testing.assert_allclose(doc.embedding, mean / np.linalg.norm(mean), atol=1e-5)
        assert np.linalg.norm(doc.embedding) == pytest.approx(1.0, abs=1e-5)

        hits = mem.search_documents("moon pulls the sea tides", k=2)
        assert hits[0].record.id == doc_id
        assert hits[0].record.text == OCEAN
        assert all(h.record.table == "documents" for h in hits)
        # A changed file replaces its document's text and vector.
        (tmp_path / "kb" / "ocean.txt").write_text("Coral reefs need warm clear water.")
        mem.ingest(tmp_path / "kb", shared=True, progress=False)
        doc = mem.get(doc_id, include_embedding=True)
        assert doc.text == "Coral reefs need warm clear water."
        (only,) = mem.get_fragments(doc_id, include_embedding=True)
        np.testing.assert_allclose(doc.embedding, only.embedding, atol=1e-5)
    finally:
        mem.close()


def test_search_documents_keeps_agents_apart(word_embedder: WordHashEmbedder) -> None:
    mem = Memory(None, word_embedder)
    mem.ingest_text(OCEAN, source="inline:ocean", agent_id="a")
    mem.ingest_text(FOREST, source="inline:forest", shared=True)
    shared = mem.search_documents("tides moon sea", threshold=None)
    assert {h.record.metadata["source"] for h in shared} == {"inline:forest"}
    mine = mem.search_documents("tides moon sea", agent_id="a", k=1, threshold=None)
    assert mine[0].record.metadata["source"] == "inline:ocean"
    assert mem.search_documents("tides", agent_id="b", mode="text") == []


def test_document_vector_of_unit_and_zero_rows() -> None:
    rows = np.array([[3.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    np.testing.assert_allclose(document_vector(rows), [2**-0.5, 2**-0.5], atol=1e-6)
    # Opposite fragments cancel: the first one's direction stands in.
    np.testing.assert_allclose(document_vector(np.array([[1.0, 0], [-1.0, 0]])), [1.0, 0])


def test_default_threshold_cuts_unrelated_fragments(onnx_embedder: OnnxEmbedder) -> None:
    mem = Memory(None, onnx_embedder)
    mem.ingest_text(OCEAN, source="inline:ocean", shared=True)
    mem.ingest_text(FOREST, source="inline:forest", shared=True)
    question = "How do I reset my bank account password?"
    # No cut-off: the nearest text comes back, however unrelated.
    loose = mem.search_knowledge(question, threshold=None, explain=True)
    assert loose and max(h.explain["cosine"] for h in loose) < FRAGMENT_THRESHOLD
    assert mem.search_knowledge(question) == []
    assert mem.search_documents(question) == []
    assert mem.search_documents(question, threshold=None)
    # A related question passes the default cut-off.
    hits = mem.search_knowledge("Why does the sea level change during the day?", explain=True)
    assert hits and all(h.explain["cosine"] >= FRAGMENT_THRESHOLD for h in hits)
    assert hits[0].record.metadata["source"] == "inline:ocean"
    docs = mem.search_documents("When do oak trees lose their leaves?", explain=True)
    assert docs[0].record.metadata["source"] == "inline:forest"
    assert all(h.explain["cosine"] >= DOCUMENT_THRESHOLD for h in docs)
    # Text mode has no cosine: the default cuts nothing there.
    assert mem.search_knowledge("password bank sea", mode="text")


def test_the_default_cut_offs_are_the_measured_ones() -> None:
    # benches/tune_knowledge_threshold.py measures them with the default chunkers; the docs
    # give its figures, so the code's cut-offs must be the ones the docs measured.
    text = (REPO / "docs" / "knowledge.md").read_text("utf-8")
    said = re.search(
        r"cosine of (0\.\d+) for `search_knowledge` \(`FRAGMENT_THRESHOLD`\) and (0\.\d+) for",
        text,
    )
    assert said is not None
    assert (float(said[1]), float(said[2])) == (FRAGMENT_THRESHOLD, DOCUMENT_THRESHOLD)
    for search, cut in (
        ("search_knowledge", FRAGMENT_THRESHOLD),
        ("search_documents", DOCUMENT_THRESHOLD),
    ):
        assert f"| `{search}` | **{cut:.2f}** (99% on train) |" in text


def test_threshold_is_checked(word_embedder: WordHashEmbedder) -> None:
    mem = Memory(None, word_embedder)
    with pytest.raises(InvalidArgumentError, match="threshold"):
        mem.search_knowledge("x", threshold="auto")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="min_similarity"):
        mem.search_documents("x", threshold=2.0)


async def test_async_search_documents(word_embedder: WordHashEmbedder) -> None:
    async with AsyncMemory(None, word_embedder) as mem:
        await mem.ingest_text(OCEAN, source="inline:ocean", shared=True)
        hits = await mem.search_documents("tides moon", threshold=None)
        assert hits[0].record.text == OCEAN


def test_a_misspelt_option_is_a_type_error(word_embedder: WordHashEmbedder) -> None:
    mem = Memory(None, word_embedder)
    with pytest.raises(TypeError, match="alpah"):
        mem.search_documents("x", alpah=0.5)


def test_default_threshold_is_for_the_default_model_only(word_embedder: WordHashEmbedder) -> None:
    """Another embedder's cosines are on a scale of their own: "default" cuts nothing."""
    mem = Memory(None, word_embedder)
    mem.ingest_text(OCEAN, source="inline:ocean", shared=True)
    for search in (mem.search_knowledge, mem.search_documents):
        loose = search("bank password reset", threshold=None)
        assert loose and [h.record.id for h in search("bank password reset")] == [
            h.record.id for h in loose
        ]
        assert search("bank password reset", threshold=0.9) == []
