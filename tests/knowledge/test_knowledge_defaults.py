"""Ingestion's default chunkers fit the default model, and knowledge search with the
conversation's recent messages as context (elizaOS's ``conversationContext``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from conftest import REPO, StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.embeddings import TextTruncatedWarning
from memlane.errors import InvalidArgumentError
from memlane.knowledge import MarkdownSplitter, RecursiveCharacterSplitter, TokenSplitter
from memlane.knowledge.chunking import CHUNK_TOKENS, default_chunkers

#: What the default model reads of a text, [CLS] and [SEP] included.
MODEL_LIMIT = 256


def ordinary_markdown() -> list[Path]:
    return [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md", REPO / "ARCHITECTURE.md"]


def test_default_chunks_of_ordinary_markdown_fit_the_model() -> None:
    # 1,000 characters cut most of these files' fragments at the model's limit.
    count = TokenSplitter().count_tokens
    text_chunker, markdown_chunker = default_chunkers()
    lengths = []
    for path in ordinary_markdown():
        source = path.read_text(encoding="utf-8")
        for chunker in (text_chunker, markdown_chunker):
            for chunk in chunker.split(source):
                assert source[chunk.start : chunk.end] == chunk.text
                lengths.append(count(chunk.content) + 2)  # [CLS] and [SEP]
    assert len(lengths) > 300
    assert max(lengths) <= MODEL_LIMIT
    assert CHUNK_TOKENS + 2 <= MODEL_LIMIT


def test_token_length_packs_pieces_up_to_the_size() -> None:
    count = TokenSplitter().count_tokens
    text = " ".join(f"word{i} is here." for i in range(400))
    chunks = RecursiveCharacterSplitter(50, 10, length=count).split(text)
    assert all(count(c.text) <= 50 for c in chunks)
    # Packed, not cut at every sentence: each chunk but the last is close to full.
    assert all(count(c.text) > 35 for c in chunks[:-1])
    assert text.endswith(chunks[-1].text)


def test_heading_path_comes_off_a_token_size() -> None:
    count = TokenSplitter().count_tokens
    long_heading = "A heading of many words " * 6
    text = f"# {long_heading}\n\n" + "Some body text here. " * 200
    chunks = MarkdownSplitter(60, 10, length=count).split(text)
    assert chunks and all(c.prefix for c in chunks)
    assert all(count(c.content) <= 60 for c in chunks)


def test_length_must_be_callable() -> None:
    with pytest.raises(InvalidArgumentError, match="length must be callable"):
        RecursiveCharacterSplitter(100, 10, length=3)  # type: ignore[arg-type]


def test_default_ingestion_of_markdown_cuts_nothing(tmp_path: Path) -> None:
    # The default model itself reports what it cuts: nothing, with the default chunkers.
    folder = tmp_path / "docs"
    folder.mkdir()
    for path in ordinary_markdown()[:4]:
        (folder / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    with Memory(None) as mem, warnings.catch_warnings():
        warnings.simplefilter("error", TextTruncatedWarning)
        report = mem.ingest(folder, shared=True)
    assert report.fragments > 20
    assert report.truncated == 0


FACTS = {
    "billing.md": "The billing service retries failed card payments three times.",
    "deploy.md": "The deploy pipeline retries failed builds three times.",
}


def knowledge(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Memory:
    mem = make_store("knowledge", word_embedder)
    for source, text in FACTS.items():
        mem.ingest_text(text, source=source, shared=True)
    return mem


@pytest.mark.parametrize("mode", ["hybrid", "vector", "text"])
def test_conversation_context_steers_a_follow_up(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, mode: str
) -> None:
    mem = knowledge(make_store, word_embedder)
    question = "how many times does it retry?"

    def first(context: list[str]) -> str:
        hits = mem.search_knowledge(
            question, k=1, threshold=None, mode=mode, conversation_context=context
        )
        return str(hits[0].record.metadata["source"])

    assert first(["My card payment failed.", "Billing says it will try again."]) == "billing.md"
    assert first(["The build failed in the deploy pipeline."]) == "deploy.md"
    assert first(["The build failed in the deploy pipeline.", ""]) == "deploy.md"


def test_conversation_context_must_be_text(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    mem = knowledge(make_store, word_embedder)
    for bad in (3, [1, "x"], {"a": "b"}):
        with pytest.raises(InvalidArgumentError, match="conversation_context"):
            mem.search_knowledge("retry", conversation_context=bad)  # type: ignore[arg-type]
