"""Shared fixtures: the default embedder loaded once per session, and a cheap stand-in."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
import pytest

from memlane.embeddings import OnnxEmbedder


@pytest.fixture(scope="session")
def onnx_embedder() -> OnnxEmbedder:
    """The real default model, loaded once for the whole run."""
    return OnnxEmbedder()


class WordHashEmbedder:
    """A deterministic bag-of-words embedder: texts sharing words are similar.

    Each word maps to a fixed random Gaussian direction (seeded by its hash) and a
    text to the normalised sum, so vectors are continuous (few exact ties) and
    the same words in any order give the same vector. For tests that need many
    embeddings fast; it follows the Embedder protocol.
    """

    def __init__(self, dimension: int = 32, name: str = "test:word-hash") -> None:
        self.name = name
        self.dimension = dimension
        self.calls = 0
        self._words: dict[str, np.ndarray] = {}

    def _word(self, word: str) -> np.ndarray:
        v = self._words.get(word)
        if v is None:
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)
            self._words[word] = v
        return v

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dimension, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            v += self._word(word)
        if not v.any():
            v[0] = 1.0
        return v / np.linalg.norm(v)

    def embed(self, text: str) -> np.ndarray:
        self.calls += 1
        return self._one(text)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dimension))


@pytest.fixture
def word_embedder() -> WordHashEmbedder:
    return WordHashEmbedder()
