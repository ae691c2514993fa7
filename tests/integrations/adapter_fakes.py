"""A deterministic bag-of-words LangChain ``Embeddings`` for the adapters' tests.

Each word is a fixed random direction (seeded by its hash) and a text the sum,
so texts that share words are similar and nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
from langchain_core.embeddings import Embeddings


class WordEmbeddings(Embeddings):
    def __init__(self, size: int = 32) -> None:
        self.size = size
        self.calls = 0

    def _one(self, text: str) -> list[float]:
        v = np.zeros(self.size)
        for word in re.findall(r"\w+", text.lower()):
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            v += np.random.default_rng(seed).standard_normal(self.size)
        if not v.any():
            v[0] = 1.0
        return [float(x) for x in v / np.linalg.norm(v)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        return self._one(text)
