"""A refused text is quoted in the error by its start and its length, never whole: a
text of megabytes of invisible characters made a message of tens of millions of
characters (for logs, HTTP answers and a model's tool results)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memlane import Memory
from memlane.embeddings import OnnxEmbedder, _base
from memlane.embeddings._base import check_text
from memlane.errors import InvalidArgumentError

#: Room for a message and a quote of 80 characters (each written as at most 10).
MOST = 1_000


def short(error: BaseException) -> bool:
    """Whether ``error``'s message is short (a failure shows its size, not its text)."""
    size = len(str(error))
    assert size < MOST, f"a message of {size:,} characters"
    return True


HUGE = {
    "zero-width": "\u200b" * 2_000_000,
    "private use": "\ue000" * 2_000_000,
    "control": "\x07" * 2_000_000,
}


def test_a_long_text_is_quoted_by_its_start_and_length() -> None:
    assert _base.quoted("short") == "'short'"
    most = _base.QUOTED_CHARS
    assert _base.quoted("x" * (most + 1)) == f"{'x' * most!r}... ({most + 1:,} characters)"


def test_a_blank_text_is_refused_in_a_short_message() -> None:
    with pytest.raises(InvalidArgumentError) as e:
        check_text(" " * 3_000_000)
    assert short(e.value) and "3,000,000 characters" in str(e.value)


@pytest.fixture(scope="module")
def embedder() -> OnnxEmbedder:
    return OnnxEmbedder()


@pytest.mark.parametrize("kind", HUGE)
def test_an_unreadable_text_is_refused_in_a_short_message(
    embedder: OnnxEmbedder, kind: str
) -> None:
    text = HUGE[kind]
    calls: list[Callable[[], object]] = [
        lambda: embedder.embed(text),
        lambda: embedder.embed_batch(["fine", text]),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError, match="no tokens the model can read") as e:
            call()
        assert short(e.value) and "2,000,000 characters" in str(e.value)


def test_a_store_refuses_an_unreadable_text_in_a_short_message(
    embedder: OnnxEmbedder, tmp_path: Path
) -> None:
    with Memory(tmp_path / "store", embedder=embedder) as mem:
        for call in (lambda: mem.add(HUGE["zero-width"]), lambda: mem.search(HUGE["private use"])):
            with pytest.raises(InvalidArgumentError) as e:
                call()
            assert short(e.value)
