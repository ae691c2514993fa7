"""Text embedders: the ``Embedder`` protocol and the default offline model.

>>> from memlane.embeddings import OnnxEmbedder
>>> embedder = OnnxEmbedder()
>>> embedder.embed("User prefers dark mode").shape
(384,)
"""

from __future__ import annotations

from memlane.embeddings._base import Embedder, TextTruncatedWarning, check_embedder
from memlane.embeddings._model_files import MODEL_SHA256, default_tokenizer_path
from memlane.embeddings._onnx import OnnxEmbedder
from memlane.embeddings.cache import CachedEmbedder, EmbeddingCache
from memlane.embeddings.e5 import E5SmallEmbedder
from memlane.embeddings.http import OpenAIEmbedder
from memlane.embeddings.potion import PotionEmbedder

__all__ = [
    "MODEL_SHA256",
    "CachedEmbedder",
    "E5SmallEmbedder",
    "Embedder",
    "EmbeddingCache",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "PotionEmbedder",
    "TextTruncatedWarning",
    "check_embedder",
    "default_tokenizer_path",
]
